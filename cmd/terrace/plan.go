package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/terrace-ml/terrace/internal/placement/tier"
	"github.com/terrace-ml/terrace/internal/planner"
)

// planReport is the JSON report of `terrace plan`.
type planReport struct {
	// Stage is the stage to run: --stage, or the planner's best.
	Stage            tier.Stage          `json:"stage"`
	Best             tier.Stage          `json:"best_stage"`
	Bottleneck       []string            `json:"bottleneck"`
	UpdatesPerSecond float64             `json:"updates_per_second"`
	DollarsPerHour   float64             `json:"dollars_per_hour"`
	UpdatesPerDollar float64             `json:"updates_per_dollar"`
	Candidates       []planner.Candidate `json:"candidates"`
	// Measured says whether the figures came from a calibration job
	// (--measure) or are the documented defaults.
	Measured     bool                 `json:"measured"`
	Measurements planner.Measurements `json:"measurements"`
	// Calibration is what --measure's job measured in each stage.
	Calibration *calibrationReport `json:"calibration,omitempty"`
}

// planFlags are plan's flags as given.
type planFlags struct {
	reliable, transient int
	links, prices       string
	stage               string
	measure             bool
	replication         int
	sync                time.Duration
	workersPerMachine   int
	consistency         string
	report              string
	measureFlags
}

func planCmd() *cobra.Command {
	var f planFlags
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Recommend a stage for reliable and transient machines: each stage's updates/s, dollars/hour and bottleneck",
		Long: `Plan models each stage the machines can form (1: servers on reliable machines only;
2: ActivePS on transient machines in front of BackupPS on reliable ones; 3: as 2, with
no worker on reliable machines) as a flow network of the job's measured rates, and
recommends the stage with the most updates per dollar, naming its bottleneck (the
minimum cut). See docs/design/tiers.md.

Without --measure it uses default measurements of sparse logistic regression on a9a
taken on the development machine (listed in the report under "measurements").
With --measure it first runs a short calibration job of --app (train's application
flags) on the machines given, every node a process on this host with the emulated
links of --link-mbps, a few seconds in each stage, and plans from what it measured
(the report's "calibration").

  terrace plan --reliable 2 --transient 6 --link-mbps reliable=50,transient=1000 --report plan.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// A k asked for above the machines planned as the machines'
			// count; the default 2 on one machine is capped, as the
			// cluster caps it.
			k, err := tierReplication(cmd.Flags().Changed("replication"), f.replication, f.reliable, f.transient)
			if err != nil {
				return err
			}
			f.replication = k
			var cal *calibrationReport
			if f.measure {
				// Every flag is checked before the job runs.
				if _, err := runPlan(f, nil); err != nil {
					return err
				}
			}
			if err := f.measureFlags.check(cmd.Flags(), f.measure, f.consistency); err != nil {
				return err
			}
			if f.measure {
				var err error
				if cal, err = measureJob(cmd.Context(), f, cmd.Flags(), cmd.OutOrStdout()); err != nil {
					return err
				}
			}
			rep, err := runPlan(f, cal)
			if err != nil {
				return err
			}
			printPlan(cmd.OutOrStdout(), rep)
			return writeReport(f.report, rep)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&f.reliable, "reliable", 1, "reliable (on-demand) machines; at least one runs the coordinator and the authoritative copy")
	fs.IntVar(&f.transient, "transient", 0, "transient (spot) machines")
	fs.StringVar(&f.links, "link-mbps", "", "each class's link bandwidth per direction in Mbit/s, e.g. reliable=100,transient=1000 (0: no limit; default 1000 each)")
	fs.StringVar(&f.prices, "price", "", "dollars per machine-hour by class, e.g. reliable=0.21,transient=0.0364 (the defaults: c3.xlarge, us-east-1, 2015)")
	fs.StringVar(&f.stage, "stage", "auto", "stage to report: 1, 2, 3, or auto (the planner's choice)")
	fs.BoolVar(&f.measure, "measure", false, "run a short calibration job first and plan with its measurements")
	fs.IntVar(&f.replication, "replication", 2, "copies of every slot (k): chains of servers, of ActivePS, of BackupPS")
	fs.DurationVar(&f.sync, "sync-interval", time.Second, "how often an ActivePS streams its aggregated state to the BackupPS")
	fs.IntVar(&f.workersPerMachine, "workers-per-machine", 1, "workers on every machine that runs workers")
	fs.StringVar(&f.consistency, "consistency", "ssp", "bsp or ssp (workers in lockstep) or asp (independent workers); with --measure also the job's (ssp: ssp:2)")
	fs.StringVar(&f.report, "report", "", "write the JSON report to this file")
	f.measureFlags.register(fs)
	return cmd
}

// runPlan checks the flags, naming the first that is wrong, and plans:
// from the calibration's measurements if cal is set.
func runPlan(f planFlags, cal *calibrationReport) (*planReport, error) {
	if f.reliable < 1 {
		return nil, fmt.Errorf("--reliable %d: need at least one reliable machine (the coordinator and the BackupPS run there)", f.reliable)
	}
	if f.transient < 0 {
		return nil, fmt.Errorf("--transient %d: cannot be negative", f.transient)
	}
	if f.replication < 1 {
		return nil, fmt.Errorf("--replication %d: must be at least 1", f.replication)
	}
	if f.workersPerMachine < 1 {
		// Named with --replication before, which was not given.
		return nil, fmt.Errorf("--workers-per-machine %d: must be at least 1", f.workersPerMachine)
	}
	if f.sync <= 0 {
		return nil, fmt.Errorf("--sync-interval %v: must be positive", f.sync)
	}
	var stage tier.Stage
	if f.stage != "auto" {
		s, err := tier.ParseStage(f.stage)
		if err != nil {
			return nil, fmt.Errorf("--stage %q: want 1, 2, 3 or auto", f.stage)
		}
		if err := s.Formable(f.reliable, f.transient); err != nil {
			return nil, fmt.Errorf("--stage %d with --reliable %d --transient %d: %w", s, f.reliable, f.transient, err)
		}
		stage = s
	}
	m, err := planMeasurements(f)
	if err != nil {
		return nil, err
	}
	if cal != nil {
		if m, err = planner.Calibrate(m, cal.Samples); err != nil {
			return nil, fmt.Errorf("--measure: %w", err)
		}
	}
	p, err := planner.New(planner.Options{}).Replan(time.Time{}, m)
	if err != nil {
		return nil, err
	}
	rep := &planReport{Stage: p.Stage, Best: p.Best, Candidates: p.Candidates, Measurements: m, Measured: cal != nil, Calibration: cal}
	if stage != 0 {
		rep.Stage = stage
	}
	for _, c := range p.Candidates {
		if c.Stage == rep.Stage {
			rep.Bottleneck, rep.UpdatesPerSecond, rep.DollarsPerHour, rep.UpdatesPerDollar =
				c.Bottleneck, c.UpdatesPerSecond, c.DollarsPerHour, c.UpdatesPerDollar
		}
	}
	return rep, nil
}

// planMeasurements are the default measurements with the flags' links,
// prices, replication, workers and consistency.
func planMeasurements(f planFlags) (planner.Measurements, error) {
	m := planner.Defaults(f.reliable, f.transient)
	mbps, err := tier.ParseByClass("--link-mbps", f.links, tier.ByClass{Reliable: m.LinkBytes.Reliable * 8 / 1e6, Transient: m.LinkBytes.Transient * 8 / 1e6})
	if err != nil {
		return m, err
	}
	m.LinkBytes = tier.ByClass{Reliable: mbps.Reliable * 1e6 / 8, Transient: mbps.Transient * 1e6 / 8}
	if m.Price, err = tier.ParseByClass("--price", f.prices, m.Price); err != nil {
		return m, err
	}
	for _, c := range tier.Classes {
		if m.Price.Of(c) <= 0 && (c == tier.Reliable || f.transient > 0) {
			return m, fmt.Errorf("--price %s=%g: machines that are used must cost more than 0", c, m.Price.Of(c))
		}
	}
	switch {
	case f.consistency == "asp":
		m.Independent = true
	case f.consistency == "bsp", f.consistency == "ssp", strings.HasPrefix(f.consistency, "ssp:"):
	default:
		return m, fmt.Errorf("--consistency %q: want bsp, ssp, ssp:S or asp", f.consistency)
	}
	m.Replication, m.WorkersPerMachine, m.SyncSeconds = f.replication, f.workersPerMachine, f.sync.Seconds()
	return m, nil
}

func printPlan(w io.Writer, rep *planReport) {
	m := rep.Measurements
	fmt.Fprintf(w, "terrace plan: %d reliable and %d transient machines; links %s Mbit/s; $/machine-hour %s; %s\n",
		m.Reliable, m.Transient,
		tier.ByClass{Reliable: m.LinkBytes.Reliable * 8 / 1e6, Transient: m.LinkBytes.Transient * 8 / 1e6}, m.Price, measuredWords(rep))
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stage\tupdates/s\t$/hour\tupdates/$\t  bottleneck\t")
	for _, c := range rep.Candidates {
		fmt.Fprintf(tw, "%d\t%.0f\t%.3f\t%.3g\t  %s\t\n", c.Stage, c.UpdatesPerSecond, c.DollarsPerHour, c.UpdatesPerDollar, strings.Join(c.Bottleneck, ", "))
	}
	tw.Flush()
	how := "the most updates per dollar"
	if rep.Stage != rep.Best {
		how = fmt.Sprintf("as asked; stage %d would do more per dollar", rep.Best)
	}
	fmt.Fprintf(w, "stage %d (%s): %.0f updates/s, bottleneck %s\n", rep.Stage, how, rep.UpdatesPerSecond, strings.Join(rep.Bottleneck, ", "))
}
