package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/terrace-ml/terrace/apps/lr"
	"github.com/terrace-ml/terrace/apps/mf"
	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/coord"
	"github.com/terrace-ml/terrace/internal/harness/drill"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/internal/server"
	"github.com/terrace-ml/terrace/ps"
)

// trainReport is the JSON report of `terrace train`.
type trainReport struct {
	runInfo
	App string `json:"app"`
	// Job is the job as trained: every hyper-parameter and the data
	// paths used, defaults filled in; Config the other flags that apply.
	Job               *api.Job       `json:"job,omitempty"`
	Config            map[string]any `json:"config"`
	Seconds           float64        `json:"seconds"`
	Examples          int64          `json:"examples"`
	ExamplesPerSecond float64        `json:"examples_per_second"`
	TestAccuracy      *float64       `json:"test_accuracy,omitempty"`
	TestLogLoss       *float64       `json:"test_logloss,omitempty"`
	TestAUC           *float64       `json:"test_auc,omitempty"`
	TestRMSE          *float64       `json:"test_rmse,omitempty"`
	TestPerplexity    *float64       `json:"test_perplexity,omitempty"`
	TrainLogLik       *float64       `json:"train_loglik_per_token,omitempty"`
	// Lasso's: its objective and nonzero weights, and the coordinate
	// updates made and skipped by its schedule (it trains no examples).
	Objective          *float64 `json:"objective,omitempty"`
	NonZero            *float64 `json:"nonzero,omitempty"`
	CoordinateUpdates  int64    `json:"coordinate_updates,omitempty"`
	CoordinatesSkipped int64    `json:"coordinates_skipped,omitempty"`
	// UserIDs and ItemIDs are mf's numbering of string ids, the same on
	// every worker (buildReport checks); nil for numbers.
	UserIDs *mf.Numbering `json:"user_ids,omitempty"`
	ItemIDs *mf.Numbering `json:"item_ids,omitempty"`
	// Passes holds every pass's evaluation, by whichever worker made it.
	Passes  []map[string]any        `json:"passes,omitempty"`
	Workers map[int]json.RawMessage `json:"workers"`
	Servers map[string]server.Stats `json:"servers"`
	// Events is the coordinator's timeline (in-process runs).
	Events []api.Event `json:"events,omitempty"`
	// History is the coordinator's samples of the cluster over time.
	History []api.Sample `json:"history,omitempty"`
	// Account is the coordinator's examples account: rows repeated and
	// skipped, pass by pass, without the audit (docs/design/observe.md).
	Account *drill.ExamplesAccount `json:"examples_account,omitempty"`
	// The drill's findings (--processes) and the audit's (--audit): faults,
	// max_stall_seconds, acked_updates_lost, examples_skipped, ...
	*drill.Report
	// Reassignment's counts (--straggle, --reassign).
	*straggleReport
}

// drillFlags are train's flags for --processes and --audit.
type drillFlags struct {
	processes    bool
	runDir       string
	coordinators int
	kill, evict  string
	audit        bool
	account      bool
	auditEvery   int
	timeout      time.Duration
	failAfter    time.Duration
}

func (d *drillFlags) register(fs *pflag.FlagSet) {
	fs.BoolVar(&d.processes, "processes", false, "run every node as its own OS process (this binary re-executed), with a log per node in --run-dir; turns --audit on")
	fs.StringVar(&d.runDir, "run-dir", "", "with --processes: directory for the per-node logs, audit logs and worker reports (a new temporary directory if empty)")
	fs.IntVar(&d.coordinators, "coordinators", 1, "with --processes: coordinator replicas; more than one form their own etcd cluster and fail over for each other")
	fs.StringVar(&d.kill, "kill", "", "with --processes: SIGKILL a random live node of a role at times after training starts, e.g. server@2s,worker@4s,coordinator@6s")
	fs.StringVar(&d.evict, "evict", "", "with --processes: give a random live node of a role eviction notice (its endpoint, or SIGTERM), e.g. worker@3s")
	fs.BoolVar(&d.audit, "audit", false, "count acknowledged updates and trained examples in audit tables and report acked_updates_lost, examples_repeated, examples_skipped, max_stall_seconds")
	fs.BoolVar(&d.account, "account", false, "keep the examples account: one more push per minibatch, for the rows each pass trained more or fewer times than once (examples_account in the report, terrace status, /metrics)")
	fs.IntVar(&d.auditEvery, "audit-every", drill.DefaultAuditEvery, "with --processes: acknowledged pushes a worker holds before appending them to its audit log")
	fs.DurationVar(&d.timeout, "timeout", defaultDrillTimeout, "with --processes: stop every node and fail after this long (0: no limit)")
	fs.DurationVar(&d.failAfter, "failure-timeout", coord.DefaultFailureTimeout, "declare a node dead after this long without a heartbeat or an answer to pings")
}

// defaultDrillTimeout is --timeout's default: a drill that hangs fails.
const defaultDrillTimeout = 10 * time.Minute

// check refuses combinations that cannot run, and flags of --processes
// without it (they were ignored).
func (d *drillFlags) check() (drill.Schedule, error) {
	switch {
	case d.coordinators < 1:
		return nil, fmt.Errorf("--coordinators %d: need at least one", d.coordinators)
	case d.auditEvery < 1:
		return nil, fmt.Errorf("--audit-every %d: need at least 1", d.auditEvery)
	case d.timeout < 0:
		return nil, fmt.Errorf("--timeout %v: want a duration of 0 (no limit) or more", d.timeout)
	}
	sched, err := drill.ParseSchedule(d.kill, d.evict)
	if err != nil {
		return nil, err
	}
	if !d.processes && len(sched) > 0 {
		return nil, errors.New("--kill and --evict need --processes: faults are injected into separate node processes")
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"run-dir", d.runDir != ""}, {"coordinators", d.coordinators > 1}, {"timeout", d.timeout != defaultDrillTimeout}, {"audit-every", d.auditEvery != drill.DefaultAuditEvery}} {
		if !d.processes && f.set {
			return nil, fmt.Errorf("--%s needs --processes", f.name)
		}
	}
	// Coordinators lead by an etcd majority: with fewer left, none leads,
	// and the drill ran to "no worker finished" after every node's retries.
	gone := 0
	for _, f := range sched {
		if f.Role == drill.Coordinator {
			gone++
		}
	}
	if gone > 0 && d.coordinators-gone <= d.coordinators/2 {
		return nil, fmt.Errorf("--kill/--evict of %d coordinator(s) with --coordinators %d: no majority of them would be left to lead (give --coordinators %d or more)", gone, d.coordinators, 2*gone+1)
	}
	return sched, nil
}

func trainCmd() *cobra.Command {
	var a appFlags
	var d drillFlags
	var tiers tierTrainFlags
	var sf straggleFlags
	var servers, workers, partitions, replication, checkpointEvery, checkpointKeep int
	var checkpointDir, resumeDir, onCopiesLost string
	var reportPath, logLevel string
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Train an application on a local cluster (coordinator, servers, workers) that this command starts",
		Long: `Train starts a coordinator, --servers servers and --workers workers on loopback TCP
in this process, trains --app on --train, evaluates on --test after every pass,
prints progress and a summary, and writes a JSON report to --report.

With --processes every node is a process of its own, and --kill and --evict
inject faults: the resilience drill (docs/design/drill.md), e.g.

  terrace train --processes --servers 3 --workers 2 --kill server@1s --report drill.json

With no flags it trains sparse logistic regression on the a9a data the project ships.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			if err := sf.check(&d); err != nil {
				return err
			}
			sched, err := d.check()
			if err != nil {
				return err
			}
			if tiers.on() {
				// Every machine runs a server; --servers is refused below.
				// The default k on one machine is capped, as the cluster
				// caps it; a k asked for above the machines is refused.
				replication, err = tierReplication(cmd.Flags().Changed("replication"), replication, tiers.reliable, tiers.transient)
			} else {
				err = checkCluster(servers, workers, replication)
			}
			if err != nil {
				return err
			}
			if err := checkLocalCluster(servers, workers); err != nil {
				return err
			}
			if err := checkCoordination(partitions, d.failAfter); err != nil {
				return err
			}
			tcfg, add, err := tiers.check(cmd.Flags(), d.processes)
			if err != nil {
				return err
			}
			if d.processes {
				// Checkpoints of a cluster of processes are its
				// coordinators' (train_checkpoint.go).
				ck, err := newProcessCheckpoints(checkpointDir, checkpointEvery, checkpointKeep, resumeDir, onCopiesLost)
				if err != nil {
					return err
				}
				return trainProcesses(ctx, cmd, a, d, append(sched, add...).Sorted(), servers, workers, partitions, replication, logLevel, reportPath, tcfg, ck)
			}
			pout := &progressOut{w: out}
			job, err := a.job(pout)
			if err != nil {
				return err
			}
			var timeline *drill.Timeline
			if d.audit {
				timeline = &drill.Timeline{}
				job = audited(job, timeline.Record)
			}
			log := newLogger(logLevel)
			switch {
			case resumeDir != "" && checkpointDir == "":
				checkpointDir = resumeDir
			case resumeDir != "" && resumeDir != checkpointDir:
				// The cluster has one directory: it would resume from
				// --checkpoint-dir, not --resume.
				return fmt.Errorf("--resume %s and --checkpoint-dir %s: the cluster resumes from its checkpoint directory and goes on checkpointing there; give one of them", resumeDir, checkpointDir)
			}
			if err := checkCheckpointFlags(checkpointDir, checkpointEvery, checkpointKeep, false); err != nil {
				return err
			}
			policy, err := checkOnCopiesLost(onCopiesLost, checkpointDir)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "terrace: training %s on %d server(s) and %d worker(s), consistency %s\n", a.app, servers, workers, a.consistency)
			if a.app == "lr" && lrTestPath(a.train, a.test) == "" {
				fmt.Fprintf(out, "terrace: --train without --test: no held-out evaluation (pass --test to score the model)\n")
			}
			start := time.Now()
			l, err := node.StartLocal(ctx, node.LocalConfig{Servers: servers, Workers: workers, Partitions: partitions, Replication: replication, Account: d.account,
				CheckpointDir: checkpointDir, CheckpointEvery: checkpointEvery, CheckpointKeep: checkpointKeep, Resume: resumeDir != "", Logger: log,
				FailureTimeout: d.failAfter, OnCopiesLost: policy})
			if err != nil && resumeDir != "" {
				return fmt.Errorf("--resume %s: %w", resumeDir, err)
			}
			if err != nil {
				return err
			}
			job, run := sf.wrap(job, a.seed)
			// The job is the cluster's, as in a cluster of processes:
			// terrace status shows it, and results are kept with it.
			if j, jerr := a.toJob(); jerr == nil {
				if _, jerr := api.NewClient(l.CoordAddr, nil).SubmitJob(ctx, j); jerr != nil {
					l.Close()
					return jerr
				}
			}
			stopProgress := showProgress(ctx, pout, l.CoordAddr, a.totalPasses())
			reps, err := l.RunWorkers(ctx, job)
			stopProgress()
			var audit *drill.Report
			if err == nil && timeline != nil {
				audit, err = accountLocal(ctx, a, timeline, l.CoordAddr, workers, reps)
			}
			secs := time.Since(start).Seconds()
			events, history := l.Coord.Events(ctx, 0, false), l.Coord.History()
			account := drill.AccountOf(l.Coord.Status().Job)
			stats := map[string]server.Stats{}
			for i, s := range l.Servers {
				stats[fmt.Sprintf("server-%d", i)] = s.Stats()
			}
			if cerr := l.Close(); err == nil && cerr != nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			rep, err := buildReport(a, cmd, secs, reps, stats)
			if err != nil {
				return err
			}
			rep.Report = audit
			rep.Events, rep.History, rep.Account = events, history, account
			rep.straggleReport = sf.report(run)
			printSummary(out, rep)
			return writeReport(reportPath, rep)
		},
	}
	cmd.AddCommand(drillWorkerCmd())
	fs := cmd.Flags()
	a.register(fs)
	d.register(fs)
	tiers.register(fs)
	sf.register(fs, "; turns --audit on")
	fs.IntVar(&servers, "servers", 2, "number of servers")
	fs.IntVar(&workers, "workers", 2, "number of workers")
	fs.IntVar(&partitions, "partitions", 0, "data partitions (4 per worker if 0)")
	fs.IntVar(&replication, "replication", 2, "servers holding each key slot (k); a push is acknowledged once all k have it")
	fs.StringVar(&checkpointDir, "checkpoint-dir", "", "directory for durable cluster checkpoints")
	fs.IntVar(&checkpointEvery, "checkpoint-every", 0, "take a checkpoint after every N passes (0: never)")
	fs.IntVar(&checkpointKeep, "checkpoint-keep", defaultCheckpointKeep, "after each checkpoint, remove those older than the newest N (0: keep every one)")
	fs.StringVar(&resumeDir, "resume", "", "continue from the newest committed checkpoint in this directory (passes already done are skipped)")
	fs.StringVar(&onCopiesLost, "on-copies-lost", onCopiesLostAuto, onCopiesLostUsage)
	fs.StringVar(&reportPath, "report", "", "write the JSON report to this file")
	logLevelVar(fs, &logLevel, "warn")
	addConfigFlag(cmd)
	return cmd
}

// levelFlag is a --log-level that slog knows, refused when the flags are
// parsed: an unknown level was taken as warn, silently.
type levelFlag string

func (l *levelFlag) Set(s string) error {
	var v slog.Level
	if err := v.UnmarshalText([]byte(s)); err != nil {
		return errors.New("want debug, info, warn or error")
	}
	*l = levelFlag(s)
	return nil
}

func (l *levelFlag) String() string { return string(*l) }
func (l *levelFlag) Type() string   { return "string" }

// logLevelVar defines --log-level on fs, into p, defaulting to def.
func logLevelVar(fs *pflag.FlagSet, p *string, def string) {
	*p = def
	fs.Var((*levelFlag)(p), "log-level", "log level: debug, info, warn or error")
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelWarn
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

// buildReport merges the workers' reports: examples add up, and the test
// metrics are rank 0's.
func buildReport(a appFlags, cmd *cobra.Command, secs float64, reps map[int]json.RawMessage, stats map[string]server.Stats) (*trainReport, error) {
	rep := &trainReport{runInfo: newRunInfo(), App: a.app, Seconds: secs, Workers: reps, Servers: stats}
	if j, err := a.toJob(); err == nil {
		rep.Job = &j
	}
	processes, _ := cmd.Flags().GetBool("processes")
	audit, _ := cmd.Flags().GetBool("audit")
	rep.Config = flagValues(cmd.Flags(), func(name string) bool { return appliesToTrain(name, processes, audit) })
	for rank, raw := range reps {
		var w struct {
			Examples int64            `json:"examples"`
			Updates  int64            `json:"coordinate_updates"`
			Skipped  int64            `json:"coordinates_skipped"`
			Batch    int              `json:"batch"`
			Passes   []map[string]any `json:"passes"`
			UserIDs  *mf.Numbering    `json:"user_ids"`
			ItemIDs  *mf.Numbering    `json:"item_ids"`
		}
		if err := json.Unmarshal(raw, &w); err != nil {
			return nil, fmt.Errorf("report of rank %d: %w", rank, err)
		}
		if err := sameNumbering(&rep.UserIDs, w.UserIDs, "user", rank); err != nil {
			return nil, err
		}
		if err := sameNumbering(&rep.ItemIDs, w.ItemIDs, "item", rank); err != nil {
			return nil, err
		}
		if rep.Job != nil && rep.Job.Batch == 0 {
			rep.Job.Batch = w.Batch // the app chose it (lr's AutoBatch): say which
		}
		rep.Examples += w.Examples
		rep.CoordinateUpdates += w.Updates
		rep.CoordinatesSkipped += w.Skipped
		for _, p := range w.Passes {
			p["rank"] = rank
			rep.Passes = append(rep.Passes, p)
		}
	}
	// Each pass was evaluated by one worker: the last pass's figures are
	// the job's, whichever rank made them.
	slices.SortFunc(rep.Passes, func(x, y map[string]any) int { return cmp.Compare(passOf(x), passOf(y)) })
	if n := len(rep.Passes); n > 0 {
		last := rep.Passes[n-1]
		rep.TestAccuracy, rep.TestLogLoss, rep.TestAUC, rep.TestRMSE = metric(last, "test_accuracy"), metric(last, "test_logloss"), metric(last, "test_auc"), metric(last, "test_rmse")
		rep.TestPerplexity, rep.TrainLogLik = metric(last, "test_perplexity"), metric(last, "train_loglik_per_token")
		rep.Objective, rep.NonZero = metric(last, "objective"), metric(last, "nonzero")
	}
	rep.ExamplesPerSecond = float64(rep.Examples) / secs
	return rep, nil
}

// sameNumbering keeps in *job the numbering of a column of string ids
// the first worker reported, and returns an error if rank's differs:
// every worker numbers the training file's ids on its own, so workers
// that disagree read different files under one path.
func sameNumbering(job **mf.Numbering, w *mf.Numbering, what string, rank int) error {
	if w == nil {
		return nil
	}
	if *job == nil {
		*job = w
		return nil
	}
	if **job != *w {
		return fmt.Errorf("the workers numbered the training file's %s ids differently (%d ids, digest %s; rank %d: %d, %s): does every worker read the same file?",
			what, (*job).Distinct, (*job).Digest, rank, w.Distinct, w.Digest)
	}
	return nil
}

func passOf(m map[string]any) float64 {
	f, _ := m["pass"].(float64)
	return f
}

func metric(m map[string]any, k string) *float64 {
	if f, ok := m[k].(float64); ok {
		return &f
	}
	return nil
}

// appliesToTrain tells the flags of train that are not the job's (those
// are in the report's job) and apply to this run.
func appliesToTrain(name string, processes, audit bool) bool {
	if _, ok := jobFlags[name]; ok {
		return false
	}
	switch name {
	case "run-dir", "coordinators", "kill", "evict", "timeout", "audit-every":
		return processes
	case "audit":
		return processes || audit
	}
	return true
}

func printSummary(w io.Writer, r *trainReport) {
	if r.App == "lasso" {
		fmt.Fprintf(w, "terrace: lasso made %d coordinate updates in %.2fs (%d more skipped by its schedule)\n", r.CoordinateUpdates, r.Seconds, r.CoordinatesSkipped)
	} else {
		fmt.Fprintf(w, "terrace: %s trained %d examples in %.2fs (%.0f examples/s)\n", r.App, r.Examples, r.Seconds, r.ExamplesPerSecond)
		if r.Report != nil && r.Report.ExamplesAudited != nil && *r.Report.ExamplesAudited > r.Examples {
			// A killed worker never reports its count: a drill's summary
			// read as if it had trained a third of the passes less.
			fmt.Fprintf(w, "terrace: (counted by the workers that reported; the audit counts %d example trainings in all, killed workers' too)\n", *r.Report.ExamplesAudited)
		}
	}
	switch {
	case r.TestAUC != nil:
		fmt.Fprintf(w, "terrace: test accuracy %.4f  logloss %.4f  AUC %.4f\n", *r.TestAccuracy, *r.TestLogLoss, *r.TestAUC)
	case r.TestAccuracy != nil && r.TestLogLoss != nil: // mlr, nn
		fmt.Fprintf(w, "terrace: test accuracy %.4f  logloss %.4f\n", *r.TestAccuracy, *r.TestLogLoss)
	}
	if r.Objective != nil && r.NonZero != nil {
		fmt.Fprintf(w, "terrace: objective %.6f  nonzero weights %.0f\n", *r.Objective, *r.NonZero)
	}
	for _, c := range []struct {
		what string
		n    *mf.Numbering
	}{{"user", r.UserIDs}, {"item", r.ItemIDs}} {
		if c.n != nil {
			fmt.Fprintf(w, "terrace: %s ids are strings: %d distinct, numbered in the order they first occur in the training file (digest %s)\n", c.what, c.n.Distinct, c.n.Digest)
		}
	}
	if r.TestRMSE != nil {
		fmt.Fprintf(w, "terrace: test RMSE %.4f\n", *r.TestRMSE)
	}
	if r.TestPerplexity != nil && r.TrainLogLik != nil {
		fmt.Fprintf(w, "terrace: train log-likelihood/token %.4f  held-out perplexity %.1f\n", *r.TrainLogLik, *r.TestPerplexity)
	}
	if j := r.Job; j != nil && j.Model != "" {
		// The worker that evaluated the last pass wrote it; say so only if it is there.
		if _, err := os.Stat(j.Model); err == nil {
			fmt.Fprintf(w, "terrace: model written to %s\n", j.Model)
		}
	}
	for id, s := range r.Servers {
		fmt.Fprintf(w, "terrace: %s: %d keys, %d pushes, %d pulls, %d refused non-finite\n", id, s.Keys, s.Pushes, s.Pulls, s.Refused)
	}
	if a := r.Account; a != nil {
		fmt.Fprintf(w, "terrace: examples account: %d passes, %d examples repeated, %d skipped\n", a.Passes, a.Repeated, a.Skipped)
	}
	if s := r.straggleReport; s != nil {
		// --reassign said nothing on the terminal: whether a tail was
		// taken was in the report alone. Worker processes count their
		// own, and one killed or stopped reports none.
		by := ""
		if r.Report != nil && r.Report.RunDir != "" {
			by = " (counted by the workers that reported)"
		}
		fmt.Fprintf(w, "terrace: stragglers %s: %d reassignments, %d examples reassigned, %d splits refused%s\n",
			cmp.Or(s.Straggle, "none"), s.Reassignments, s.ExamplesReassigned, s.SplitsRefused, by)
	}
	if d := r.Report; d != nil {
		if d.RunDir != "" {
			fmt.Fprintf(w, "terrace: drill: %d fault(s) injected; logs in %s\n", len(d.Faults), d.RunDir)
		}
		for _, s := range d.FaultsNotInjected {
			fmt.Fprintf(w, "terrace: drill: %s %s planned at %gs not injected: %s\n", s.Action, s.Role, s.PlannedS, s.Reason)
		}
		if d.AckedUpdatesLost != nil {
			fmt.Fprintf(w, "terrace: audit: acked updates lost %d, applied twice %d; examples repeated %d, skipped %d\n",
				*d.AckedUpdatesLost, *d.AckedUpdatesDuplicated, *d.ExamplesRepeated, *d.ExamplesSkipped)
		}
		if d.MaxStallSeconds != nil {
			fmt.Fprintf(w, "terrace: audit: longest time without an acknowledged push %.3fs (at %.2fs)\n", *d.MaxStallSeconds, *d.MaxStallAtSeconds)
		}
		printTiers(w, d.TierReport)
		for _, n := range d.Notes {
			fmt.Fprintf(w, "terrace: note: %s\n", n)
		}
	}
}

func writeReport(path string, v any) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// trainProcesses runs the drill: every node its own process, faults on
// schedule, and the report with the drill's findings. The report is
// written even when the drill fails, as far as it got.
func trainProcesses(ctx context.Context, cmd *cobra.Command, a appFlags, d drillFlags, sched drill.Schedule,
	servers, workers, partitions, replication int, logLevel, reportPath string, tiers *drill.Tiers, ck processCheckpoints) error {
	out := cmd.OutOrStdout()
	if _, err := a.job(nil); err != nil { // the same checks as the workers', before anything starts
		return err
	}
	cfg := drill.Config{
		RunDir: d.runDir, Servers: servers, Workers: workers, Replication: replication, Partitions: partitions, Account: d.account,
		Coordinators: d.coordinators, Schedule: sched, Seed: a.seed, WorkerArgs: append(appArgs(cmd.Flags()), straggleArgs(cmd.Flags())...),
		LogLevel: logLevel, Out: out, FailureTimeout: d.failAfter, Tiers: tiers,
	}
	rows, passes, err := a.auditSize()
	if err != nil {
		return err
	}
	cfg.Audit = &drill.Audit{Rows: rows, Passes: passes, Every: d.auditEvery}
	if err := ck.apply(ctx, out, &cfg); err != nil {
		return err
	}
	if test := lrTestPath(a.train, a.test); a.app == "lr" && test != "" {
		train, err := data.ReadLIBSVM(or(a.train, defaultTrain))
		if err != nil {
			return err
		}
		cfg.Evaluate, cfg.EvaluateTables = evaluator(train, test), []string{lr.TableName}
	}
	if d.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.timeout)
		defer cancel()
	}
	if tiers != nil {
		fmt.Fprintf(out, "terrace: tiers: %d reliable and %d transient machine(s), stage %s, sync interval %v\n", tiers.Reliable, tiers.Transient, tiers.Stage, tiers.SyncInterval)
		servers, workers = tiers.Reliable+tiers.Transient, (tiers.Reliable+tiers.Transient)*max(1, tiers.WorkersPerMachine)
	}
	fmt.Fprintf(out, "terrace: training %s on %d server(s) and %d worker(s), each its own process, consistency %s\n", a.app, servers, workers, a.consistency)
	start := time.Now()
	drep, err := drill.Run(ctx, cfg)
	secs := time.Since(start).Seconds()
	if drep == nil {
		return err
	}
	if ctx.Err() != nil && d.timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("--timeout %v: %w", d.timeout, err)
	}
	stats := map[string]server.Stats{}
	for id, raw := range drep.ServerStats {
		var s server.Stats
		if json.Unmarshal(raw, &s) == nil {
			stats[id] = s
		}
	}
	rep, berr := buildReport(a, cmd, secs, drep.WorkerReports, stats)
	if berr != nil {
		return errors.Join(err, berr)
	}
	rep.Report = drep
	rep.Events, rep.History, rep.Account = drep.Events, drep.History, drep.Account // the train report's own fields hide the drill's
	rep.straggleReport = workersStraggle(cmd.Flags(), drep.WorkerReports)
	if rep.TestAUC == nil && drep.FinalEvaluation != nil {
		m := drep.FinalEvaluation
		acc, ll, auc := m["test_accuracy"], m["test_logloss"], m["test_auc"]
		rep.TestAccuracy, rep.TestLogLoss, rep.TestAUC = &acc, &ll, &auc
	}
	printSummary(out, rep)
	if werr := writeReport(reportPath, rep); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// appArgs are the application flags given to train (on the command line
// or in --config), to pass on to the drill's workers, and always --app: a
// worker given no job flags waits for the cluster's job instead of
// submitting its defaults, so the drill's workers must carry one.
func appArgs(fs *pflag.FlagSet) []string {
	names := pflag.NewFlagSet("app", pflag.ContinueOnError)
	(&appFlags{}).register(names)
	var args []string
	fs.Visit(func(f *pflag.Flag) {
		if names.Lookup(f.Name) != nil {
			args = append(args, "--"+f.Name+"="+f.Value.String())
		}
	})
	if f := fs.Lookup("app"); f != nil && !f.Changed {
		args = append(args, "--app="+f.Value.String())
	}
	return args
}

// evaluator scores the final lr model on the test file, for a drill whose
// rank 0 did not finish.
func evaluator(train *data.Sparse, testPath string) func(context.Context, *ps.Client) (map[string]float64, error) {
	return func(ctx context.Context, c *ps.Client) (map[string]float64, error) {
		test, err := data.ReadLIBSVM(testPath)
		if err != nil {
			return nil, err
		}
		tbl, err := c.Table(ctx, lr.TableName)
		if err != nil {
			return nil, err
		}
		nkeys := max(train.NumFeatures, test.NumFeatures) + 1 // key 0 is the bias
		acc, ll, auc, err := lr.Evaluate(ctx, tbl, test, nkeys)
		if err != nil {
			return nil, err
		}
		return map[string]float64{"test_accuracy": acc, "test_logloss": ll, "test_auc": auc}, nil
	}
}

// audited runs job with the drill's audit on its worker (drill.StartAudit),
// onAck seeing each acknowledged audit push.
func audited(job node.Job, onAck func(rank int, acked int64, at time.Time) error) node.Job {
	return func(ctx context.Context, c *ps.Client) (any, error) {
		a, err := drill.StartAudit(ctx, c, onAck)
		if err != nil {
			return nil, err
		}
		rep, err := job(ctx, c)
		a.Close()
		return rep, err
	}
}

// accountLocal reads the audit tables of an in-process run.
func accountLocal(ctx context.Context, a appFlags, t *drill.Timeline, coordAddr string, workers int, reps map[int]json.RawMessage) (*drill.Report, error) {
	rows, passes, err := a.auditSize()
	if err != nil {
		return nil, err
	}
	c, err := ps.Dial(ctx, coordAddr, ps.Options{Rank: -1, NodeID: "audit"})
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	defer c.Close()
	finished := map[int]bool{}
	for r := range reps {
		finished[r] = true
	}
	rep, err := t.Account(ctx, c, workers, drill.Audit{Rows: rows, Passes: passes}, finished)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return rep, nil
}

// drillWorkerCmd is the worker that `train --processes` starts: `terrace
// worker` (eviction notices and SIGTERM drain it) with the audit on and
// its log, printing the lines the drill reads (drill.MarkerRank,
// drill.MarkerFirstAck), and writing its report even when the coordinator
// is gone by the time it finishes.
func drillWorkerCmd() *cobra.Command {
	var w workerFlags
	var auditPath string
	var auditEvery int
	cmd := &cobra.Command{
		Use:    "drill-worker",
		Short:  "Run a worker for train --processes (terrace worker with the audit on)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if err := w.setup(); err != nil {
				return err
			}
			defer w.ports.Close()
			// The drill accounts one rank per process (its audit log,
			// its rank marker): a worker declared dead while alive exits,
			// as the drill's fencing expects.
			w.cfg.Rejoins = 0
			inner, err := w.workerJob(cmd.Context(), out)
			if err != nil {
				return err
			}
			var audit *drill.AuditLog
			if auditPath != "" {
				audit = drill.NewAuditLog(auditPath, auditEvery)
				inner = audited(inner, func(rank int, acked int64, at time.Time) error {
					if err := audit.Record(rank, acked, at); err != nil {
						return err
					}
					if acked == 1 {
						fmt.Fprintln(out, drill.MarkerFirstAck)
					}
					return nil
				})
			} else {
				// Without the audit nothing sees acknowledgements: the
				// drill's clock starts when the first worker starts its job.
				job := inner
				inner = func(ctx context.Context, c *ps.Client) (any, error) {
					fmt.Fprintln(out, drill.MarkerFirstAck)
					return job(ctx, c)
				}
			}
			job := func(ctx context.Context, c *ps.Client) (any, error) {
				fmt.Fprintf(out, "%s%d\n", drill.MarkerRank, c.Rank())
				return inner(ctx, c)
			}
			rep, err := w.run(cmd.Context(), job)
			if audit != nil {
				err = errors.Join(err, audit.Close())
			}
			if rep != nil {
				err = errors.Join(err, writeReport(w.reportPath, rep))
			}
			return err
		},
	}
	fs := cmd.Flags()
	w.register(fs)
	fs.StringVar(&auditPath, "audit-log", "", "turn the audit on and append acknowledged audit pushes to this file")
	fs.IntVar(&auditEvery, "audit-every", drill.DefaultAuditEvery, "acknowledged pushes held before appending them to --audit-log")
	// Like `terrace worker`, and unlike train, SIGTERM drains (notices.go):
	// this replaces the hook train passes on that would end the run.
	cmd.PersistentPreRunE = func(*cobra.Command, []string) error { return nil }
	return cmd
}
