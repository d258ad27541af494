package planner

import (
	"fmt"
	"math"
	"time"

	"github.com/terrace-ml/terrace/internal/placement/tier"
)

// Candidate is one stage's predicted figures.
type Candidate struct {
	Stage            tier.Stage `json:"stage"`
	UpdatesPerSecond float64    `json:"updates_per_second"`
	DollarsPerHour   float64    `json:"dollars_per_hour"`
	UpdatesPerDollar float64    `json:"updates_per_dollar"`
	// Bottleneck names the resources on the minimum cut nearest the
	// workers: raising one of their capacities is the only way to go
	// faster (when the cut has one edge).
	Bottleneck []string `json:"bottleneck"`
	// Resources are the network's resources, each with the total update
	// rate at which it alone would be saturated.
	Resources []Resource `json:"resources"`
}

// Resource is one edge of a candidate's network.
type Resource struct {
	Name  string  `json:"name"`
	Limit float64 `json:"limit_updates_per_second"`
}

// Evaluate predicts every stage the machines can form, in stage order.
func Evaluate(m Measurements) ([]Candidate, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	var out []Candidate
	for _, s := range tier.Stages {
		if s.Formable(m.Reliable, m.Transient) != nil {
			continue
		}
		out = append(out, evaluate(s, m))
	}
	return out, nil
}

func evaluate(s tier.Stage, m Measurements) Candidate {
	dollars := m.DollarsPerHour()
	m = m.forStage(s)
	alpha := shares(s, m)
	f, cut, res := solve(s, m, false)
	// The stream sends each key at most once per sync interval: above the
	// rate fx it is the whole model every interval, a fixed load, however
	// fast the updates come. At fx both forms load every resource alike,
	// so the linear form reaches fx exactly when the fixed one does, and
	// beyond fx only the fixed one is true.
	if s > tier.Stage1 && m.ModelStateBytes > 0 && m.StreamBytes > 0 {
		if fx := m.ModelStateBytes / m.SyncSeconds / m.StreamBytes; f >= fx {
			f, cut, res = solve(s, m, true)
		}
	}
	c := Candidate{Stage: s, UpdatesPerSecond: f, DollarsPerHour: dollars}
	c.UpdatesPerDollar = f * 3600 / c.DollarsPerHour
	for _, e := range cut {
		if !e.demand && e.name != "" {
			c.Bottleneck = append(c.Bottleneck, e.name)
		}
	}
	for _, r := range res {
		c.Resources = append(c.Resources, Resource{Name: r.name, Limit: math.Min(r.limit(alpha), unbounded)})
	}
	return c
}

// solve finds the stage's throughput and the cut that bounds it.
func solve(s tier.Stage, m Measurements, constStream bool) (float64, []flowEdge, []resource) {
	res := resources(s, m, constStream)
	alpha := shares(s, m)
	n := build(res, alpha, !m.Independent)
	if m.Independent {
		f, side := n.minCut(0)
		return f, n.cutEdges(side), res
	}
	upper := math.Inf(1)
	for _, r := range res {
		if r.compute {
			upper = math.Min(upper, r.limit(alpha))
		}
	}
	f, cut := n.lockstepMax(upper)
	return f, cut, res
}

// best is the candidate with the most updates per dollar; within relTol,
// the lower stage (fewer moving parts).
func best(cs []Candidate) Candidate {
	b := cs[0]
	for _, c := range cs[1:] {
		if c.UpdatesPerDollar > b.UpdatesPerDollar*(1+relTol) {
			b = c
		}
	}
	return b
}

// Options tune the hysteresis of a Planner; zero fields take the defaults.
type Options struct {
	// Margin is how much more work per dollar the best stage must promise
	// than the current one before the planner switches (0.15: 15%). A
	// measurement that oscillates around the boundary between two stages
	// by less than that never moves the cluster.
	Margin float64
	// Dwell is the least time between two switches (30 s): a switch
	// pauses pushes and moves state, so it must pay for itself.
	Dwell time.Duration
}

func (o Options) withDefaults() Options {
	if o.Margin == 0 {
		o.Margin = 0.15
	}
	if o.Dwell == 0 {
		o.Dwell = 30 * time.Second
	}
	return o
}

// Plan is the planner's decision.
type Plan struct {
	// Stage is the stage to run; Best the stage with the most work per
	// dollar, which hysteresis may have kept the cluster from.
	Stage, Best tier.Stage
	// Switch says Stage differs from the stage the planner held before.
	Switch bool
	// Reason says why, in words for the event timeline.
	Reason     string
	Candidates []Candidate
}

// Chosen returns the candidate of the stage to run.
func (p Plan) Chosen() Candidate {
	for _, c := range p.Candidates {
		if c.Stage == p.Stage {
			return c
		}
	}
	return Candidate{}
}

// Planner re-plans at every membership change and holds a stage until
// another is clearly better. It keeps only the current stage and the time
// of the last switch; the caller passes the time in.
type Planner struct {
	opts  Options
	stage tier.Stage
	since time.Time
}

// New returns a planner that holds no stage yet: its first plan takes the
// best.
func New(opts Options) *Planner { return &Planner{opts: opts.withDefaults()} }

// Stage is the stage the planner holds (0 before the first plan).
func (p *Planner) Stage() tier.Stage { return p.stage }

// Replan evaluates the stages under m at time now and decides whether to
// switch. It switches at once, whatever the margin and dwell, when the
// current stage can no longer be formed (every transient machine gone).
func (p *Planner) Replan(now time.Time, m Measurements) (Plan, error) {
	cs, err := Evaluate(m)
	if err != nil {
		return Plan{}, err
	}
	b := best(cs)
	plan := Plan{Stage: p.stage, Best: b.Stage, Candidates: cs}
	var cur *Candidate
	for i := range cs {
		if cs[i].Stage == p.stage {
			cur = &cs[i]
		}
	}
	switch {
	case p.stage == 0:
		plan.Reason = fmt.Sprintf("first plan: stage %d, %.0f updates/s, bottleneck %v", b.Stage, b.UpdatesPerSecond, b.Bottleneck)
	case cur == nil:
		plan.Reason = fmt.Sprintf("stage %d cannot be formed with %d reliable and %d transient machines", p.stage, m.Reliable, m.Transient)
	case b.Stage == p.stage:
		plan.Reason = fmt.Sprintf("stage %d is still the best", p.stage)
		return plan, nil
	case b.UpdatesPerDollar < cur.UpdatesPerDollar*(1+p.opts.Margin):
		plan.Reason = fmt.Sprintf("stage %d promises %.1f%% more work per dollar, under the %.0f%% margin",
			b.Stage, 100*(b.UpdatesPerDollar/cur.UpdatesPerDollar-1), 100*p.opts.Margin)
		return plan, nil
	case now.Sub(p.since) < p.opts.Dwell:
		plan.Reason = fmt.Sprintf("stage %d is better, but the last switch was %v ago (dwell %v)",
			b.Stage, now.Sub(p.since), p.opts.Dwell)
		return plan, nil
	default:
		plan.Reason = fmt.Sprintf("stage %d promises %.1f%% more work per dollar than stage %d; bottleneck %v",
			b.Stage, 100*(b.UpdatesPerDollar/cur.UpdatesPerDollar-1), p.stage, cur.Bottleneck)
	}
	plan.Switch = p.stage != 0 && p.stage != b.Stage
	p.stage, p.since = b.Stage, now
	plan.Stage = b.Stage
	return plan, nil
}
