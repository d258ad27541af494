package drill

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/tier"
	"github.com/terrace-ml/terrace/internal/planner"
)

// AutoStage is Tiers.Stage for a cluster whose stage follows the planner.
const AutoStage = "auto"

// autoEvery is how often --stage auto re-plans (and at every change of
// the machines alive).
const autoEvery = 2 * time.Second

// autoPilot drives --stage auto: it re-plans from measurements of the
// running job and asks the coordinator for the stage the planner picks;
// the planner's hysteresis (margin and dwell) keeps it from flapping.
type autoPilot struct {
	p        *planner.Planner
	last     map[string]serverCounters // by node, at the previous plan
	lastAt   time.Time
	machines [2]int
	Plans    []string
	// startReason is why the planner picked the first stage.
	startReason string
}

type serverCounters struct {
	Pushes      int64 `json:"Pushes"`
	PushBytes   int64 `json:"push_bytes"`
	StreamBytes int64 `json:"stream_bytes"`
}

// autoDwell is the planner's dwell under the drill: runs last tens of
// seconds, not the hours the default 30 s is meant for.
const autoDwell = 5 * time.Second

// newAutoPilot plans the first stage from the planner's default
// measurements for the machines at the start.
func newAutoPilot(t *Tiers) (*autoPilot, tier.Stage, error) {
	a := &autoPilot{p: planner.New(planner.Options{Dwell: autoDwell}), machines: [2]int{t.Reliable, t.Transient}}
	plan, err := a.p.Replan(time.Now(), baseMeasurements(t, t.Reliable, t.Transient))
	if err != nil {
		return nil, 0, err
	}
	a.Plans = append(a.Plans, "start: "+plan.Reason)
	a.startReason = "planner: " + plan.Reason
	return a, plan.Stage, nil
}

// replan measures the job since the last plan, plans, and switches if the
// planner says so.
func (d *drill) replan(ctx context.Context) {
	a := d.auto
	if a == nil || d.started.IsZero() {
		return
	}
	now := time.Now()
	var alive [2]int
	cur := map[string]serverCounters{}
	for _, p := range d.sup.procs {
		if p.role != Server || p.faulted != "" || p.done() {
			continue
		}
		if p.class == Transient {
			alive[1]++
		} else {
			alive[0]++
		}
		p.mu.Lock()
		raw := p.lastStats
		p.mu.Unlock()
		var sc serverCounters
		if json.Unmarshal([]byte(raw), &sc) == nil {
			cur[p.name] = sc
		}
	}
	var pushes, pushBytes, streamBytes int64
	for name, sc := range cur {
		prev := a.last[name]
		pushes += sc.Pushes - prev.Pushes
		pushBytes += sc.PushBytes - prev.PushBytes
		streamBytes += sc.StreamBytes - prev.StreamBytes
	}
	secs := now.Sub(a.lastAt).Seconds()
	first := a.lastAt.IsZero()
	changed := alive != a.machines
	a.last, a.lastAt, a.machines = cur, now, alive
	if first || secs <= 0 || (pushes <= 0 && !changed) {
		return
	}
	m := baseMeasurements(d.cfg.Tiers, alive[0], alive[1])
	if d.cfg.Tiers.Measured != nil {
		// A calibration measured every stage of this job: the servers'
		// counters here count a push per table and server, not per
		// update, and the rate a stage runs at is not what bounds the
		// others. Re-plan with the machines alive.
		a.replanWith(ctx, d, now, m)
		return
	}
	m.WorkersPerMachine = d.cfg.Tiers.perMachine()
	m.Replication = max(1, d.cfg.Replication)
	if workers := (alive[0] + alive[1]) * m.WorkersPerMachine; workers > 0 && pushes > 0 {
		// Every worker pushes at the rate the job measured (lockstep under
		// SSP): measured, not the default.
		rate := float64(pushes) / secs / float64(workers)
		m.WorkerUpdates = tier.ByClass{Reliable: rate, Transient: rate}
		m.UpBytes = float64(pushBytes) / float64(pushes)
		if streamBytes > 0 {
			m.StreamBytes = float64(streamBytes) / float64(pushes)
		}
	}
	m.SyncSeconds = max(d.cfg.Tiers.SyncInterval, time.Second).Seconds()
	a.replanWith(ctx, d, now, m)
}

// replanWith plans with m and switches if the planner says so.
func (a *autoPilot) replanWith(ctx context.Context, d *drill, now time.Time, m planner.Measurements) {
	plan, err := a.p.Replan(now, m)
	if err != nil {
		a.Plans = append(a.Plans, fmt.Sprintf("%.1fs: %v", now.Sub(d.started).Seconds(), err))
		return
	}
	a.Plans = append(a.Plans, fmt.Sprintf("%.1fs: %s", now.Sub(d.started).Seconds(), plan.Reason))
	if !plan.Switch {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := api.NewClient(d.coord, nil).SwitchStage(cctx, plan.Best, "planner: "+plan.Reason); err != nil {
		a.Plans = append(a.Plans, fmt.Sprintf("%.1fs: switch to %d refused: %v", now.Sub(d.started).Seconds(), plan.Best, err))
	}
}

// baseMeasurements are what --stage auto plans from for the machines
// alive: the calibration's if given (Tiers.Measured), else the planner's
// defaults, with the emulated links.
func baseMeasurements(t *Tiers, reliable, transient int) planner.Measurements {
	if t.Measured != nil {
		m := *t.Measured
		m.Reliable, m.Transient = reliable, transient
		return withLinks(m, t)
	}
	return withLinks(planner.Defaults(reliable, transient), t)
}

// withLinks sets the emulated links' bandwidths in m.
func withLinks(m planner.Measurements, t *Tiers) planner.Measurements {
	if l := t.LinkMbps; l != nil {
		m.LinkBytes = tier.ByClass{Reliable: l.Reliable * 1e6 / 8, Transient: l.Transient * 1e6 / 8}
	}
	return m
}
