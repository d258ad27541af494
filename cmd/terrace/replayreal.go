package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/terrace-ml/terrace/internal/harness/drill"
	"github.com/terrace-ml/terrace/internal/harness/realreplay"
	"github.com/terrace-ml/terrace/internal/market/policy"
	"github.com/terrace-ml/terrace/internal/market/replay"
)

// realFlags are replay's flags for the real replay (without --simulate).
type realFlags struct {
	maxWall    time.Duration
	runDir     string
	perMachine int
	trainData  string
	testData   string
}

func (r *realFlags) register(fs *pflag.FlagSet) {
	fs.DurationVar(&r.maxWall, "max-wall", defaultMaxWall, "without --simulate: refuse a segment (--for) that takes longer than this in wall time at --speedup")
	fs.StringVar(&r.runDir, "run-dir", "", "without --simulate: directory for each node's log (a temporary one if empty)")
	fs.IntVar(&r.perMachine, "workers-per-machine", 1, "without --simulate: worker processes on each machine")
	fs.StringVar(&r.trainData, "train", "", "without --simulate: the job's training data (the app's default if empty)")
	fs.StringVar(&r.testData, "test", "", "without --simulate: the job's test data (the app's default if empty)")
}

// defaultMaxWall is --max-wall's default.
const defaultMaxWall = 10 * time.Minute

// given names the first of these flags set to other than its default, or
// "": with --simulate they would be ignored.
func (r *realFlags) given() string {
	for _, f := range []struct {
		name string
		set  bool
	}{{"max-wall", r.maxWall != defaultMaxWall}, {"run-dir", r.runDir != ""}, {"workers-per-machine", r.perMachine != 1},
		{"train", r.trainData != ""}, {"test", r.testData != ""}} {
		if f.set {
			return f.name
		}
	}
	return ""
}

// checkReal refuses, before any trace is read, a real replay that cannot
// run: a policy not wired to processes, a segment too long for --max-wall,
// several starts. Errors name the flag.
func (f replayFlags) checkReal() error {
	names := []string{f.policy}
	if f.policy == "all" {
		names = policy.Names
	}
	for _, n := range names {
		if err := realreplay.Check(n); errors.Is(err, realreplay.ErrNotReal) {
			return fmt.Errorf("--policy %s without --simulate: %w", f.policy, err)
		} else if err != nil {
			return err
		}
	}
	switch {
	case f.span == "":
		return fmt.Errorf("--for is required without --simulate: a real replay runs a segment of the trace in compressed time, each trace hour %v of wall time at --speedup %g", time.Duration(float64(time.Hour)/f.speedup).Round(time.Millisecond), f.speedup)
	case f.starts != 1:
		return fmt.Errorf("--starts %d without --simulate: a real replay runs one start", f.starts)
	case f.plot != "":
		return fmt.Errorf("--plot %s without --simulate: the plot is drawn from the simulation's timelines, and a real replay writes none", f.plot)
	case f.passes != math.Trunc(f.passes):
		return fmt.Errorf("--passes %g without --simulate: the real job runs whole passes", f.passes)
	case f.real.perMachine < 1:
		return fmt.Errorf("--workers-per-machine %d: want at least 1", f.real.perMachine)
	}
	d, _ := parseSpan(f.span) // its form checked by check
	if wall := time.Duration(float64(d) / f.speedup); wall > f.real.maxWall {
		return fmt.Errorf("--for %s at --speedup %g is %v of wall time, more than --max-wall %v: shorten --for or raise --speedup", f.span, f.speedup, wall.Round(time.Second), f.real.maxWall)
	}
	return nil
}

// runRealReplay runs each policy on real processes, one after another,
// and writes the report.
func runRealReplay(cmd *cobra.Command, f replayFlags, cfg replay.Config, names []string, start time.Time) error {
	out := cmd.ErrOrStderr()
	d, _ := parseSpan(f.span) // checked by check
	for _, name := range names {
		if err := realreplay.CheckBound(name, cfg.Design, cfg.Cal); err != nil {
			example := "local-lr-a9a.json"
			if name == "bidbrain" {
				example = "local-lr-a9a-bidbrain.json"
			}
			return fmt.Errorf("--calibration without --simulate: %w; e.g. internal/harness/realreplay/testdata/%s", err, example)
		}
	}
	for _, name := range names {
		if end, what := cfg.Horizon(start, name != "ondemand"); start.Add(d).After(end) {
			return fmt.Errorf("--for %s: the segment ends at %s, after %s ends (at %s)", f.span, start.Add(d).Format(time.RFC3339), what, end.Format(time.RFC3339))
		}
	}
	args := []string{"--app", f.app, "--passes", strconv.Itoa(int(f.passes))}
	for _, d := range []struct{ flag, path, def string }{{"train", f.real.trainData, defaultTrain}, {"test", f.real.testData, defaultTest}} {
		path, err := dataPath(d.flag, d.path, d.def, f.app)
		if err != nil {
			return err
		}
		if path != "" {
			args = append(args, "--"+d.flag, path)
		}
	}
	rep := realReport{Market: f.marketName, Provider: f.providerName(), Prices: f.prices, Preemptions: f.preemptions, App: f.app, Passes: f.passes, Speedup: f.speedup,
		Start: start, Segment: f.span, Calibration: cfg.Cal, Policies: map[string]realreplay.Result{}, PreemptionsAt: cfg.Positions()}
	if len(rep.PreemptionsAt) > 0 {
		fmt.Fprintf(out, "replay: the start sits in the preemption traces at %s\n", replay.PositionList(rep.PreemptionsAt))
	}
	for _, name := range names {
		rc := realreplay.Config{Replay: cfg, Speedup: f.speedup, End: start.Add(d), Passes: int(f.passes), Progress: out,
			Cluster: drill.ClusterConfig{WorkersPerMachine: f.real.perMachine, WorkerArgs: args, Out: out,
				RunDir: runDirOf(f.real.runDir, name), CoordArgs: []string{"--failure-timeout", replayFailureTimeout.String()}}}
		fmt.Fprintf(out, "replay: %s for real from %s, %s of trace at %gx (%v of wall time at most)\n", name, start.Format(time.RFC3339), f.span,
			f.speedup, time.Duration(float64(d)/f.speedup).Round(time.Second))
		res, err := realreplay.Run(cmd.Context(), rc, name, start)
		if errors.Is(err, realreplay.ErrSegmentEnded) {
			return fmt.Errorf("--for %s: real replay of %s: %w (lengthen --for)", f.span, name, err)
		}
		if err != nil {
			return fmt.Errorf("real replay of %s: %w", name, err)
		}
		rep.Policies[name] = res
		fmt.Fprintf(cmd.OutOrStdout(), "%-9s $%.2f  %.2f h  %d evictions  %d acquisitions  %d stage switches  %s updates lost  test accuracy %s  AUC %s  (%.1f s wall, at most %d machines running at once; logs in %s)\n",
			name, res.Dollars, res.Hours, res.Evictions, res.Acquisitions, res.StageSwitches, fmtCount(res.UpdatesLost), fmtOpt(res.TestAccuracy), fmtOpt(res.TestAUC), res.WallSeconds, res.PeakMachines, res.RunDir)
		if res.Design == "checkpoint" || res.Design == policy.DesignElastic {
			fmt.Fprintf(cmd.OutOrStdout(), "%-9s %d restarts, %d checkpoint requests at the policy's interval, newest committed checkpoint %d\n",
				"", res.Restarts, len(res.CheckpointRequests), res.CheckpointsCommitted)
		}
	}
	if od, ok := rep.Policies["ondemand"]; ok {
		for name, res := range rep.Policies {
			res.OnDemandDollars = od.Dollars
			rep.Policies[name] = res
		}
	}
	return writeReport(f.report, rep)
}

// dataPath is the absolute path of the job's data given with --flag (or
// lr's default), checked before any process starts: the workers run in
// their own directory.
func dataPath(flag, path, def, app string) (string, error) {
	if path == "" && app == "lr" {
		path = def
		if _, err := os.Stat(path); err != nil {
			return "", fmt.Errorf("--%s not given, and its default %s: %w (run from the repository root, or pass --%s)", flag, def, err, flag)
		}
	}
	if path == "" {
		return "", nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("--%s %s: %w", flag, path, err)
	}
	if _, err := os.Stat(abs); err != nil {
		return "", fmt.Errorf("--%s: %w", flag, err)
	}
	return abs, nil
}

// replayFailureTimeout is the real replay's coordinator --failure-timeout:
// the 1 s its local calibrations' revocation_seconds were measured at
// (internal/harness/realreplay/testdata), not today's 3 s default
// (docs/design/resilience.md, "A failure timeout for loaded hosts"), which
// at 900x would stand for 45 minutes of trace per silent machine. The
// replay's machines are processes on one host, whose deaths their closed
// connections mostly tell at once.
const replayFailureTimeout = time.Second

func runDirOf(dir, name string) string {
	if dir == "" {
		return ""
	}
	return dir + "/" + name
}

func fmtCount(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', 0, 64)
}

func fmtOpt(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', 4, 64)
}

// realReport is the JSON report of a real replay: per policy what the
// simulated replay reports, and the job's test metric.
type realReport struct {
	Market      string `json:"market"`
	Provider    string `json:"provider,omitempty"`
	Prices      string `json:"prices"`
	Preemptions string `json:"preemptions,omitempty"`
	// PreemptionsAt is where the start sat in each preemption trace in
	// use: at its Lead, as a single simulated run.
	PreemptionsAt []replay.Position            `json:"preemptions_at,omitempty"`
	App           string                       `json:"app"`
	Passes        float64                      `json:"passes"`
	Speedup       float64                      `json:"speedup"`
	Start         time.Time                    `json:"start"`
	Segment       string                       `json:"segment"`
	Simulated     bool                         `json:"simulated"`
	Calibration   any                          `json:"calibration"`
	Policies      map[string]realreplay.Result `json:"policies"`
}
