package api

import (
	"context"
	"fmt"
)

// Job is one training job: what every worker of the cluster trains, and
// how its results are judged. It is submitted once (terrace submit, or
// the first worker that brings one), kept in the coordinator's saved
// state, and handed to every worker that joins; a worker whose own flags
// say otherwise is refused. Zero fields take the app's defaults, which
// the submitter fills in before it submits, so that every worker trains
// the same job whatever version of the defaults it was built with.
type Job struct {
	App         string  `json:"app" yaml:"app"`
	Train       string  `json:"train,omitempty" yaml:"train"`
	Test        string  `json:"test,omitempty" yaml:"test"`
	Vocab       string  `json:"vocab,omitempty" yaml:"vocab"`
	Passes      int     `json:"passes" yaml:"passes"`
	Batch       int     `json:"batch" yaml:"batch"`
	Consistency string  `json:"consistency" yaml:"consistency"`
	Encoding    string  `json:"encoding,omitempty" yaml:"encoding"`
	LR          float64 `json:"lr" yaml:"lr"`
	L1          float64 `json:"l1,omitempty" yaml:"l1"`
	L2          float64 `json:"l2,omitempty" yaml:"l2"`
	// Significance: lr and mf's push filter (0: push everything).
	Significance float64 `json:"significance,omitempty" yaml:"significance"`
	Factors      int     `json:"factors,omitempty" yaml:"factors"`
	Topics       int     `json:"topics,omitempty" yaml:"topics"`
	// Hidden: nn's hidden ReLU units.
	Hidden int     `json:"hidden,omitempty" yaml:"hidden"`
	Alpha  float64 `json:"alpha,omitempty" yaml:"alpha"`
	Beta   float64 `json:"beta,omitempty" yaml:"beta"`
	Seed   uint64  `json:"seed" yaml:"seed"`
	// Scale: lr divides every feature by its largest absolute value in the
	// training data ("max", the default) or trains on raw values ("none").
	Scale string `json:"scale,omitempty" yaml:"scale"`
	// Model, when set, is where the worker that evaluates the last pass
	// writes the trained model (terrace export's formats).
	Model string `json:"model,omitempty" yaml:"model"`
}

// PassResult is the evaluation of the model after one pass: metrics by
// name (test_accuracy, test_auc, test_rmse, test_perplexity, ...).
type PassResult struct {
	Pass    int                `json:"pass"`
	Rank    int                `json:"rank"`
	Seconds float64            `json:"seconds"`
	Metrics map[string]float64 `json:"metrics"`
	// Late: evaluated after a later pass had begun, because the worker
	// handed this evaluation died, drained or lost its coordinator.
	Late bool `json:"late,omitempty"`
	// Examples is the pass's exactly-once account, read by the worker
	// that evaluates it (nil where the worker keeps no account).
	Examples *ExamplesAccount `json:"examples,omitempty"`
	// Restored: trained before the checkpoint this job resumed from, and
	// not evaluated again (no metrics, Rank -1): its evaluation is in the
	// run that trained it. The checkpoint's last pass is evaluated: its
	// model is the one restored.
	Restored bool `json:"restored,omitempty"`
}

// Metric is the metric called name, or nil where the pass has none (a
// worker's own training figure where it trained none of the pass).
func (r PassResult) Metric(name string) *float64 {
	if v, ok := r.Metrics[name]; ok {
		return &v
	}
	return nil
}

// ExamplesAccount is how often a pass trained its rows, from the servers'
// count of the rows whose updates they acknowledged (ps's ExamplesTable;
// docs/design/observe.md, "Examples repeated and skipped"). Per
// partition, Repeated is what the count exceeds the partition's rows by
// (a dead worker's rows after its last progress record, trained again by
// its successor) and Skipped what it falls short by (rows whose
// acknowledged training the servers lost, or that nobody trained).
type ExamplesAccount struct {
	Rows     int64 `json:"rows"`
	Trained  int64 `json:"trained"`
	Repeated int64 `json:"repeated"`
	Skipped  int64 `json:"skipped"`
}

// EvalClaim asks for the evaluation of pass Pass (counted from 1), and of
// any earlier pass whose evaluation is due again.
type EvalClaim struct {
	Rank int `json:"rank"`
	Pass int `json:"pass"`
}

// EvalGrant lists the passes the claimant evaluates (none: another live
// worker has them).
type EvalGrant struct {
	Passes []int `json:"passes"`
	// Pending lists the passes up to the claimed one whose evaluation
	// another live worker holds and has not reported.
	Pending []int `json:"pending,omitempty"`
}

// JobStatus is the job, its progress and its results, as GET /v1/job
// answers.
type JobStatus struct {
	Job *Job `json:"job"`
	// Number numbers the job: 1 for the cluster's first, one more for
	// each next (docs/design/jobs.md).
	Number uint64 `json:"number"`
	// PassesDone counts the passes every partition of which is trained.
	PassesDone int          `json:"passes_done"`
	Results    []PassResult `json:"results"`
	// Done: every worker has reported or is gone.
	Done    bool           `json:"done"`
	Workers map[string]int `json:"workers"`
	Servers []string       `json:"servers"`
}

// SubmitJob submits j and returns the job in force: j, or the job
// submitted before it (the caller compares).
func (c *Client) SubmitJob(ctx context.Context, j Job) (Job, error) {
	var got Job
	return got, c.do(ctx, RouteJob, "", j, &got)
}

// JobStatus returns the job, its progress and its results.
func (c *Client) JobStatus(ctx context.Context) (JobStatus, error) {
	var st JobStatus
	return st, c.do(ctx, RouteJobStatus, "", nil, &st)
}

// ClaimEval asks which evaluations rank performs after pass.
func (c *Client) ClaimEval(ctx context.Context, rank, pass int) (EvalGrant, error) {
	var g EvalGrant
	if err := c.do(ctx, RouteEvalClaim, "", EvalClaim{Rank: rank, Pass: pass}, &g); err != nil {
		return EvalGrant{}, fmt.Errorf("claim evaluation of pass %d: %w", pass, err)
	}
	return g, nil
}

// EvalResult records an evaluation.
func (c *Client) EvalResult(ctx context.Context, r PassResult) error {
	return c.do(ctx, RouteEvalResult, "", r, nil)
}
