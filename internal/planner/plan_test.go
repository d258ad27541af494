package planner

import (
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/placement/tier"
)

var t0 = time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)

// ratio is stage 2's work per dollar over stage 1's.
func ratio(t *testing.T, m Measurements) float64 {
	cs, err := Evaluate(m)
	if err != nil {
		t.Fatal(err)
	}
	return candidate(t, cs, tier.Stage2).UpdatesPerDollar / candidate(t, cs, tier.Stage1).UpdatesPerDollar
}

// boundary finds the transient link bandwidth at which stages 1 and 2
// are worth the same, with 2 reliable and 2 transient machines and
// reliable links slow enough to bound stage 1: below it stage 1 is
// better, above it stage 2.
func boundary(t *testing.T) Measurements {
	m := Defaults(2, 2)
	m.LinkBytes.Reliable = mbps(100)
	lo, hi := mbps(1), mbps(10000)
	for range 60 {
		m.LinkBytes.Transient = (lo + hi) / 2
		if ratio(t, m) > 1 {
			hi = m.LinkBytes.Transient
		} else {
			lo = m.LinkBytes.Transient
		}
	}
	if r := ratio(t, m); r < 0.999 || r > 1.001 {
		t.Fatalf("no boundary: ratio %g at %g B/s", r, m.LinkBytes.Transient)
	}
	return m
}

// TestNoFlapping re-plans every minute (twice the dwell) while the
// transient links' bandwidth oscillates 10% around the bandwidth at which
// stages 1 and 2 are worth the same: the best stage changes at every
// step, and the planner must not follow it.
func TestNoFlapping(t *testing.T) {
	m := boundary(t)
	if n := oscillate(t, m, New(Options{})); n != 0 {
		t.Errorf("%d switches while the measurements oscillated around the boundary", n)
	}
	// Without hysteresis the same sequence flaps: the test can see it.
	if n := oscillate(t, m, New(Options{Margin: 1e-9, Dwell: time.Nanosecond})); n < 50 {
		t.Errorf("without hysteresis only %d switches: the sequence does not cross the boundary", n)
	}
}

// oscillate re-plans 100 times, a minute apart, with the transient links
// alternately 10% above and below m's, and counts the switches.
func oscillate(t *testing.T, m Measurements, p *Planner) int {
	b := m.LinkBytes.Transient
	switches, bestChanges := 0, 0
	var lastBest tier.Stage
	for i := range 100 {
		m.LinkBytes.Transient = b * (1 + 0.1*float64(1-2*(i%2)))
		plan, err := p.Replan(t0.Add(time.Duration(i)*time.Minute), m)
		if err != nil {
			t.Fatal(err)
		}
		if plan.Switch {
			switches++
		}
		if i > 0 && plan.Best != lastBest {
			bestChanges++
		}
		lastBest = plan.Best
	}
	if bestChanges < 50 {
		t.Fatalf("the best stage changed only %d times: the measurements do not cross the boundary", bestChanges)
	}
	return switches
}

// TestSwitchesOnARealChange: a lasting change beyond the margin switches
// once, after the dwell, and not back.
func TestSwitchesOnARealChange(t *testing.T) {
	m := boundary(t)
	b := m.LinkBytes.Transient
	p := New(Options{Dwell: 30 * time.Second})
	m.LinkBytes.Transient = b / 2 // stage 1 clearly better
	if plan, _ := p.Replan(t0, m); plan.Stage != tier.Stage1 || plan.Switch {
		t.Fatalf("first plan %+v: want stage 1, no switch", plan)
	}
	m.LinkBytes.Transient = b * 2 // stage 2 clearly better from now on
	if plan, _ := p.Replan(t0.Add(10*time.Second), m); plan.Switch || plan.Best != tier.Stage2 {
		t.Fatalf("within the dwell: %+v; want no switch, best 2", plan)
	}
	plan, _ := p.Replan(t0.Add(31*time.Second), m)
	if !plan.Switch || plan.Stage != tier.Stage2 {
		t.Fatalf("after the dwell: %+v; want a switch to 2", plan)
	}
	for i := range 10 {
		if plan, _ := p.Replan(t0.Add(time.Duration(40+i*60)*time.Second), m); plan.Switch {
			t.Fatalf("switched again: %+v", plan)
		}
	}
}

// TestForcedFallback: when every transient machine is gone, stage 2 can
// no longer be formed and the planner falls back to stage 1 at once,
// within the dwell.
func TestForcedFallback(t *testing.T) {
	m := Defaults(2, 6)
	m.LinkBytes.Reliable = mbps(20)
	p := New(Options{})
	if plan, _ := p.Replan(t0, m); plan.Stage == tier.Stage1 {
		t.Fatalf("slow reliable links: %+v, want stage 2 or 3", plan)
	}
	m.Transient = 0
	plan, err := p.Replan(t0.Add(time.Second), m)
	if err != nil || !plan.Switch || plan.Stage != tier.Stage1 {
		t.Fatalf("every transient machine gone: %+v, %v; want a switch to stage 1", plan, err)
	}
}

// BenchmarkEvaluate is one re-plan: every stage of 2 reliable and 6
// transient machines.
func BenchmarkEvaluate(b *testing.B) {
	m := Defaults(2, 6)
	m.LinkBytes.Reliable = mbps(50)
	for range b.N {
		if _, err := Evaluate(m); err != nil {
			b.Fatal(err)
		}
	}
}
