package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/terrace-ml/terrace/apps/lasso"
	"github.com/terrace-ml/terrace/apps/lda"
	"github.com/terrace-ml/terrace/apps/lr"
	"github.com/terrace-ml/terrace/apps/mf"
	"github.com/terrace-ml/terrace/apps/mlr"
	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/auth"
)

// jobFlags maps each app flag to its job field, for the conflict check:
// a worker's flag that was given and says otherwise than the job in force
// is refused by name.
var jobFlags = map[string]func(j *api.Job) any{
	"app": func(j *api.Job) any { return j.App }, "train": func(j *api.Job) any { return j.Train },
	"test": func(j *api.Job) any { return j.Test }, "vocab": func(j *api.Job) any { return j.Vocab },
	"passes": func(j *api.Job) any { return j.Passes }, "batch": func(j *api.Job) any { return j.Batch },
	"consistency": func(j *api.Job) any { return j.Consistency }, "encoding": func(j *api.Job) any { return j.Encoding },
	"lr": func(j *api.Job) any { return j.LR }, "l1": func(j *api.Job) any { return j.L1 }, "l2": func(j *api.Job) any { return j.L2 },
	"significance": func(j *api.Job) any { return j.Significance }, "factors": func(j *api.Job) any { return j.Factors },
	"topics": func(j *api.Job) any { return j.Topics }, "alpha": func(j *api.Job) any { return j.Alpha },
	"hidden": func(j *api.Job) any { return j.Hidden },
	"beta":   func(j *api.Job) any { return j.Beta }, "seed": func(j *api.Job) any { return j.Seed },
	"scale": func(j *api.Job) any { return j.Scale }, "model": func(j *api.Job) any { return j.Model },
}

// toJob resolves the flags into a job with every default filled in and
// every data path the one used, after checking them.
func (a *appFlags) toJob() (api.Job, error) {
	if err := a.check(); err != nil {
		return api.Job{}, err
	}
	return a.resolved(), nil
}

// resolved is the job the flags say, unchecked.
func (a *appFlags) resolved() api.Job {
	j := api.Job{App: a.app, Consistency: a.consistency, Seed: a.seed, Model: a.model}
	switch a.app {
	case "lr":
		d := lr.DefaultConfig()
		j.Train, j.Test = or(a.train, defaultTrain), lrTestPath(a.train, a.test)
		// Batch 0 stays 0: lr picks it from the data's size (lr.AutoBatch).
		j.Passes, j.Batch, j.Encoding = orInt(a.passes, d.Passes), a.batch, a.encoding
		j.LR, j.L1, j.L2, j.Significance, j.Scale = float64(d.Rule.LR), a.l1, a.l2, a.significance, or(a.scale, "max")
		if a.lr > 0 {
			j.LR = a.lr
		}
	case "mf":
		d := mf.DefaultConfig()
		j.Train, j.Test = a.train, a.test
		j.Passes, j.Batch, j.Factors, j.Encoding = orInt(a.passes, d.Passes), orInt(a.batch, d.Batch), a.rank, a.encoding
		j.LR, j.L2, j.Significance = float64(d.LR), float64(d.L2), a.significance
		if a.fs.Changed("lr") {
			j.LR = a.lr
		}
		if a.fs.Changed("l2") {
			j.L2 = a.l2
		}
	case "mlr", "nn":
		d := mlr.DefaultConfig()
		if a.app == "nn" {
			d = mlr.DefaultNetworkConfig()
			j.Hidden = a.hidden
		}
		j.Train, j.Test = a.train, a.test
		j.Passes, j.Batch, j.Encoding = orInt(a.passes, d.Passes), orInt(a.batch, d.Batch), a.encoding
		j.LR, j.L2 = float64(d.LR), float64(d.L2)
		if a.fs.Changed("lr") {
			j.LR = a.lr
		}
		if a.fs.Changed("l2") {
			j.L2 = a.l2
		}
	case "lasso":
		d := lasso.DefaultConfig()
		j.Train, j.Test = or(a.train, defaultTrain), lrTestPath(a.train, a.test)
		j.Passes, j.Batch = orInt(a.passes, d.Passes), orInt(a.batch, d.Batch)
		if a.fs.Changed("l1") {
			j.L1 = a.l1
		}
	case "lda":
		d := lda.DefaultConfig()
		j.Train, j.Vocab = or(a.train, defaultLDATrain), a.vocab
		if a.train == "" && a.vocab == "" {
			j.Vocab = defaultLDAVocab
		}
		j.Passes, j.Batch, j.Topics, j.Alpha, j.Beta = orInt(a.passes, d.Passes), orInt(a.batch, d.Batch), a.topics, a.alpha, a.beta
	}
	return j
}

func orInt(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// useJob makes the flags say what job j says, after refusing any flag
// given that says otherwise.
func (a *appFlags) useJob(own, j api.Job) error {
	var conflicts []error
	a.fs.Visit(func(f *pflag.Flag) {
		get, ok := jobFlags[f.Name]
		if !ok {
			return
		}
		// Compared as resolved (--passes 0 is the app's default).
		if mine, theirs := get(&own), get(&j); mine != theirs {
			conflicts = append(conflicts, fmt.Errorf("--%s %v, but the cluster's job has %s %v", f.Name, mine, f.Name, theirs))
		}
	})
	if len(conflicts) > 0 {
		return fmt.Errorf("%w: %w (start this worker without those flags to train the cluster's job, or submit the job to a cluster of its own)",
			api.ErrJobConflict, errors.Join(conflicts...))
	}
	a.app, a.train, a.test, a.vocab = j.App, j.Train, j.Test, j.Vocab
	a.passes, a.batch, a.consistency, a.encoding = j.Passes, j.Batch, j.Consistency, j.Encoding
	a.l1, a.l2, a.significance, a.rank = j.L1, j.L2, j.Significance, j.Factors
	a.topics, a.alpha, a.beta, a.seed, a.scale, a.model = j.Topics, j.Alpha, j.Beta, j.Seed, j.Scale, j.Model
	if j.App == "nn" {
		a.hidden = j.Hidden
	}
	a.lr = j.LR
	// mf, mlr and nn read lr and l2 only when given (their defaults
	// differ from lr's), lasso l1 (0: its default, from the data).
	for _, f := range []string{"lr", "l2"} {
		if fl := a.fs.Lookup(f); fl != nil && (j.App == "mf" || j.App == "mlr" || j.App == "nn") {
			fl.Changed = true
		}
	}
	if fl := a.fs.Lookup("l1"); fl != nil && j.App == "lasso" {
		fl.Changed = j.L1 > 0
	}
	return nil
}

// noJobSubmitted is a worker's error when its join timeout (ctx) ended
// while it waited, with no job flags, for a job; done, if not 0, is the
// cluster's job that had ended.
func noJobSubmitted(ctx context.Context, done uint64) error {
	what := "none was submitted"
	if done > 0 {
		what = fmt.Sprintf("job %d is done and no next one was submitted", done)
	}
	return fmt.Errorf("job: %s before the join timeout (--join-timeout), and this worker was given no job flags to submit: %w", what, ctx.Err())
}

// resolveJob takes the cluster's job from the coordinator, or submits
// this node's own if there is none yet and it was given one (a node given
// no job flags waits for the cluster's); flags that say otherwise than
// the job in force are refused by name.
func (a *appFlags) resolveJob(ctx context.Context, cc *api.Client, out io.Writer) (api.Job, error) {
	// Compared as resolved; checked (its files) only if it is submitted:
	// a worker that takes the cluster's job needs the job's files, not
	// its own defaults.
	if err := a.checkFlags(); err != nil {
		return api.Job{}, err
	}
	own := a.resolved()
	given := a.jobGiven()
	var refused error
	waited := false
	var done uint64 // the cluster's job that ended, if one did
	for tries := 0; tries < 3; {
		st, err := cc.JobStatus(ctx)
		if err != nil && !given && ctx.Err() != nil {
			return api.Job{}, noJobSubmitted(ctx, done) // the join timeout ended while asking
		}
		if err != nil {
			return api.Job{}, fmt.Errorf("job: %w", err)
		}
		if st.Job != nil && !st.Done {
			if err := a.useJob(own, *st.Job); err != nil {
				return api.Job{}, err
			}
			return *st.Job, nil
		}
		if !given {
			// A worker given no job trains the cluster's: it waits for
			// one rather than submit the flags' defaults, which would race
			// the worker started beside it with the job's flags.
			if st.Job != nil {
				done = st.Number
			}
			if !waited && out != nil {
				if st.Job != nil {
					fmt.Fprintf(out, "terrace: the cluster's job %d is done; waiting for the next (terrace submit, or a worker started with the job's flags)\n", st.Number)
				} else {
					fmt.Fprintln(out, "terrace: no job on the cluster yet; waiting for one (terrace submit, or a worker started with the job's flags)")
				}
			}
			waited = true
			select {
			case <-ctx.Done():
				return api.Job{}, noJobSubmitted(ctx, done)
			case <-time.After(jobPoll):
			}
			continue
		}
		tries++
		if refused != nil {
			return api.Job{}, fmt.Errorf("job: %w", refused) // done, and no next job is taken
		}
		// No job yet, or the last one is done: this node's flags are
		// the next job on a cluster that stays up.
		if err := a.check(); err != nil {
			return api.Job{}, err
		}
		got, err := cc.SubmitJob(ctx, own)
		if errors.Is(err, api.ErrJobConflict) {
			refused = err
			continue // another node submitted first: check against its job
		}
		if err != nil {
			return api.Job{}, fmt.Errorf("job: %w", err)
		}
		if out != nil {
			fmt.Fprintf(out, "terrace: submitted job: %s\n", describeJob(got))
		}
		return got, a.useJob(own, got)
	}
	return api.Job{}, errors.New("job: the coordinator's job kept changing")
}

// jobPoll is how often a worker given no job asks for the cluster's.
const jobPoll = 250 * time.Millisecond

// jobGiven reports whether any of the job's flags was set (on the command
// line or in --config).
func (a *appFlags) jobGiven() bool {
	for name := range jobFlags {
		if a.fs.Changed(name) {
			return true
		}
	}
	return false
}

func describeJob(j api.Job) string {
	return fmt.Sprintf("%s on %s, %d passes, consistency %s", j.App, j.Train, j.Passes, j.Consistency)
}

// readJobFile reads a job definition: a YAML map of the app flags' names
// to values (the same keys as a job's fields), with the flags' defaults.
func readJobFile(path string) (api.Job, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return api.Job{}, fmt.Errorf("job file: %w", err)
	}
	m, err := flagMap(b)
	if err != nil {
		return api.Job{}, fmt.Errorf("job file %s: %w", path, err)
	}
	var a appFlags
	fs := pflag.NewFlagSet("job", pflag.ContinueOnError)
	a.register(fs)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if _, ok := jobFlags[string(passesAlias(fs, k))]; !ok {
			return api.Job{}, fmt.Errorf("job file %s: unknown setting %q", path, k)
		}
		if err := fs.Set(k, m[k]); err != nil {
			return api.Job{}, fmt.Errorf("job file %s: %s: %w", path, k, err)
		}
	}
	j, err := a.toJob()
	if err != nil {
		return api.Job{}, fmt.Errorf("job file %s: %w", path, err)
	}
	return j, nil
}

func submitCmd() *cobra.Command {
	var coordinator string
	var sec securityFlags
	cmd := &cobra.Command{
		Use:   "submit JOB.yaml",
		Short: "Submit a job (app, data, hyper-parameters, passes, consistency) to a coordinator; its workers train it",
		Long: `A job file is a YAML map of the app flags of terrace train to values, e.g.

  app: lr
  train: datasets/a9a/a9a.gz
  test: datasets/a9a/a9a.t.gz
  passes: 10
  consistency: ssp:2

Workers started with only --coordinator train it; a worker whose flags say
otherwise is refused, naming the flag.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			j, err := readJobFile(args[0])
			if err != nil {
				return err
			}
			cc, _, err := sec.client(coordinator, auth.RoleAdmin)
			if err != nil {
				return err
			}
			cc.RetryFor = 0
			if err := reach(cmd.Context(), cc, cmd.ErrOrStderr(), 30*time.Second); err != nil {
				return fmt.Errorf("submit %s to %s: %w", args[0], coordinator, err)
			}
			// The coordinator takes the job in force again as confirmed:
			// say which happened ("job submitted" was said of both).
			before, berr := cc.JobStatus(cmd.Context())
			got, err := cc.SubmitJob(cmd.Context(), j)
			if err != nil {
				return fmt.Errorf("submit %s to %s: %w", args[0], coordinator, err)
			}
			if after, aerr := cc.JobStatus(cmd.Context()); berr == nil && aerr == nil && before.Job != nil && !before.Done && after.Number == before.Number {
				fmt.Fprintf(cmd.OutOrStdout(), "terrace: job %d, the same, is already in force at %s: nothing changed: %s\n", after.Number, coordinator, describeJob(got))
				return nil
			}
			if after, aerr := cc.JobStatus(cmd.Context()); berr == nil && aerr == nil && before.Job != nil && !before.Done && after.Number != before.Number {
				// A job that trained nothing and has no live worker is
				// replaced: say so, as the coordinator's events do.
				fmt.Fprintf(cmd.OutOrStdout(), "terrace: job %d submitted to %s, replacing job %d (%s), which trained nothing and had no worker alive: %s\n",
					after.Number, coordinator, before.Number, describeJob(*before.Job), describeJob(got))
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "terrace: job submitted to %s: %s\n", coordinator, describeJob(got))
			return nil
		},
	}
	cmd.Flags().StringVar(&coordinator, "coordinator", "127.0.0.1:7070", "coordinator address(es), comma-separated")
	sec.register(cmd.Flags(), false)
	return cmd
}
