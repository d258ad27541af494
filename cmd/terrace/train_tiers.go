package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/terrace-ml/terrace/internal/harness/drill"
	"github.com/terrace-ml/terrace/internal/placement/tier"
	"github.com/terrace-ml/terrace/internal/planner"
)

// tierTrainFlags are train's flags for tiers of reliability (issue 11).
type tierTrainFlags struct {
	reliable, transient, perMachine int
	stage                           string
	syncInterval                    time.Duration
	add, linkMbps, price            string
	plan                            string
}

func (t *tierTrainFlags) register(fs *pflag.FlagSet) {
	fs.IntVar(&t.reliable, "reliable", 0, "with --processes: reliable (on-demand) machines, each a server and --workers-per-machine workers; turns tiers on (docs/design/tiers.md)")
	fs.IntVar(&t.transient, "transient", 0, "with --processes: transient (spot) machines, each a server and --workers-per-machine workers")
	fs.IntVar(&t.perMachine, "workers-per-machine", 1, "with --reliable/--transient: worker processes on each machine")
	fs.StringVar(&t.stage, "stage", "", "with --reliable/--transient: the stage to run (1, 2 or 3; 2 if empty), or auto: the planner's pick, re-planned every 2 s from the running job's measurements")
	fs.DurationVar(&t.syncInterval, "sync-interval", time.Second, "with --reliable/--transient: how often an ActivePS streams its aggregated updates to its BackupPS")
	fs.StringVar(&t.linkMbps, "link-mbps", "", "with --reliable/--transient: emulate each machine's link, e.g. reliable=50,transient=500 (Mbit/s each way; each machine binds its own 127.0.0.N)")
	fs.StringVar(&t.price, "price", "", "with --reliable/--transient: dollars per machine-hour by class, e.g. reliable=0.21,transient=0.0364, for the coordinator's cost so far (status, dashboard, metrics, report); empty: no cost")
	fs.StringVar(&t.plan, "plan", "", "with --stage auto: plan from the measurements in this report of terrace plan --measure (its calibration of this job) instead of the planner's defaults")
	fs.StringVar(&t.add, "add", "", "with --reliable/--transient: start new machines of a class while training runs, e.g. transient@2@5s")
}

// on reports whether tiers were asked for.
func (t *tierTrainFlags) on() bool { return t.reliable > 0 || t.transient > 0 }

// check refuses what the machines cannot run; errors name the flag. It
// returns the drill's tiers, nil without them, and the --add faults.
func (t *tierTrainFlags) check(fs *pflag.FlagSet, processes bool) (*drill.Tiers, drill.Schedule, error) {
	if !t.on() {
		for _, name := range []string{"stage", "sync-interval", "add", "workers-per-machine", "link-mbps", "price", "plan"} {
			if fs.Changed(name) {
				return nil, nil, fmt.Errorf("--%s needs --reliable and --transient", name)
			}
		}
		return nil, nil, nil
	}
	switch {
	case !processes:
		return nil, nil, errors.New("--reliable and --transient need --processes: each machine's nodes are processes of their own")
	case fs.Changed("servers") || fs.Changed("workers"):
		return nil, nil, errors.New("--servers and --workers cannot be given with --reliable/--transient: every machine runs a server and --workers-per-machine workers")
	case t.reliable < 1:
		return nil, nil, fmt.Errorf("--reliable %d: need at least one reliable machine (the coordinator and the authoritative copy live there)", t.reliable)
	case t.transient < 0:
		return nil, nil, fmt.Errorf("--transient %d: must be >= 0", t.transient)
	case t.perMachine < 1:
		return nil, nil, fmt.Errorf("--workers-per-machine %d: must be >= 1", t.perMachine)
	case t.syncInterval <= 0:
		return nil, nil, fmt.Errorf("--sync-interval %v: must be positive", t.syncInterval)
	case t.reliable+t.transient > maxLocalNodes || (t.reliable+t.transient)*t.perMachine > maxLocalNodes:
		return nil, nil, fmt.Errorf("--reliable %d --transient %d --workers-per-machine %d: a cluster on this host takes at most %d servers and %d workers", t.reliable, t.transient, t.perMachine, maxLocalNodes, maxLocalNodes)
	}
	var links *tier.ByClass
	if t.linkMbps != "" {
		l, err := tier.ParseByClass("--link-mbps", t.linkMbps, tier.ByClass{})
		if err != nil {
			return nil, nil, err
		}
		links = &l
	}
	if _, err := tier.ParseByClass("--price", t.price, tier.ByClass{}); err != nil {
		return nil, nil, err
	}
	stage := tier.Stage2
	if t.stage == drill.AutoStage {
		add, err := drill.ParseSchedule("", "", t.add)
		if err != nil {
			return nil, nil, err
		}
		measured, err := readPlanMeasurements(t.plan)
		if err != nil {
			return nil, nil, err
		}
		return &drill.Tiers{Reliable: t.reliable, Transient: t.transient, WorkersPerMachine: t.perMachine,
			Stage: drill.AutoStage, SyncInterval: t.syncInterval, LinkMbps: links, Price: t.price, Measured: measured}, add, nil
	}
	if t.plan != "" {
		return nil, nil, fmt.Errorf("--plan needs --stage auto: it is what the planner plans from")
	}
	if t.stage != "" {
		s, err := tier.ParseStage(t.stage)
		if err != nil {
			return nil, nil, fmt.Errorf("--stage: %w", err)
		}
		stage = s
	}
	if err := stage.Formable(t.reliable, t.transient); err != nil {
		return nil, nil, fmt.Errorf("--stage %d with --reliable %d --transient %d: %w", stage, t.reliable, t.transient, err)
	}
	add, err := drill.ParseSchedule("", "", t.add)
	if err != nil {
		return nil, nil, err
	}
	return &drill.Tiers{Reliable: t.reliable, Transient: t.transient, WorkersPerMachine: t.perMachine,
		Stage: stage.String(), SyncInterval: t.syncInterval, LinkMbps: links, Price: t.price}, add, nil
}

// printTiers prints a drill's tier figures.
func printTiers(w io.Writer, t *drill.TierReport) {
	if t == nil {
		return
	}
	fmt.Fprintf(w, "terrace: tiers: stage %d at the end, %d switch(es), longest switch pause %.3fs\n", t.Stage, len(t.StageHistory), t.MaxSwitchPauseSeconds)
	for _, s := range t.StageHistory {
		fmt.Fprintf(w, "terrace: tiers: %.2fs: stage %d -> %d in %.3fs, pause %.3fs: %s\n", s.AtSeconds, s.From, s.To, s.DurationSeconds, s.PauseSeconds, s.Reason)
	}
	if t.UpdatesLost != nil && t.UpdatesLostBound != nil {
		fmt.Fprintf(w, "terrace: tiers: updates lost %d by the ledgers' count (at risk: %d, one sync interval's worth)\n", *t.UpdatesLost, *t.UpdatesLostBound)
	}
	if t.LedgersUnreported > 0 {
		fmt.Fprintf(w, "terrace: tiers: %d BackupPS ledger(s) died or left before reporting: the updates lost are at least the count above\n", t.LedgersUnreported)
	}
	if t.UpdatesLostAudit != nil && t.UpdatesLostLedgerAudit != nil {
		fmt.Fprintf(w, "terrace: tiers: audit pushes lost %d by the audit's count, %d by the ledgers' (%d in flight)\n", *t.UpdatesLostAudit, *t.UpdatesLostLedgerAudit, *t.UpdatesLostInFlight)
	}
	if t.StreamBytesPerPushByte != nil {
		fmt.Fprintf(w, "terrace: tiers: %.3f bytes streamed to BackupPS per byte pushed\n", *t.StreamBytesPerPushByte)
	}
}

// readPlanMeasurements reads the measurements of a `terrace plan` report
// (nil for no file); errors name the flag.
func readPlanMeasurements(path string) (*planner.Measurements, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--plan: %w", err)
	}
	var rep struct {
		Measurements *planner.Measurements `json:"measurements"`
		Measured     bool                  `json:"measured"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("--plan %s: not a report of terrace plan: %w", path, err)
	}
	if rep.Measurements == nil {
		return nil, fmt.Errorf("--plan %s: no measurements: want the report of terrace plan --measure", path)
	}
	// A plan made without --measure lists the planner's defaults: taken
	// as a calibration, --stage auto planned from them alone, where
	// without --plan it plans from the rates the job runs at.
	if !rep.Measured {
		return nil, fmt.Errorf("--plan %s: the planner's default measurements (a plan made without --measure): want the report of terrace plan --measure, or no --plan to plan from the job's own rates", path)
	}
	if err := rep.Measurements.Validate(); err != nil {
		return nil, fmt.Errorf("--plan %s: %w", path, err)
	}
	return rep.Measurements, nil
}
