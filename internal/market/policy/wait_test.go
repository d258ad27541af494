package policy

import (
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/billing"
	"github.com/terrace-ml/terrace/internal/market/history"
	"github.com/terrace-ml/terrace/internal/market/rm"
	"github.com/terrace-ml/terrace/internal/market/trace"
)

var rev = market.Market{Zone: "r", Type: "c3.xlarge"}

// revSource: the only market of the type sits at 0.03 and stands at 0.10
// for the first half of every other hour, for 20 days; from stay on (if
// not zero) the price rises to 0.10 and stays there.
func revSource(stay time.Time) *history.Source {
	s := &trace.Series{Market: rev, OnDemand: 0.21}
	for h := 0; h < 24*20; h += 2 {
		at := t0.Add(time.Duration(h) * time.Hour)
		if !stay.IsZero() && !at.Before(stay) {
			break
		}
		s.Points = append(s.Points, trace.Point{At: at, Price: 0.10}, trace.Point{At: at.Add(30 * time.Minute), Price: 0.03})
	}
	if !stay.IsZero() {
		s.Points = append(s.Points, trace.Point{At: stay, Price: 0.10})
	}
	return &history.Source{Prices: &trace.Prices{Series: []*trace.Series{s}}}
}

func revState(src *history.Source, now time.Time) rm.State {
	return rm.State{View: src.Cut(now), Job: rm.JobStatus{Total: 1e9, Rate: 1e5, Working: true, CheckpointAt: now}}
}

// TestBidBrainWaitsForReversion: at the moment the price rises to 0.10,
// where it has always fallen back to 0.03 within half an hour, BidBrain
// would buy (the machines beat the reliable tier's cost per update) but
// waits, asks again within a step, and buys once the price is back:
// paying 0.03 for the hour instead of 0.10, for half an hour less work.
func TestBidBrainWaitsForReversion(t *testing.T) {
	src := revSource(time.Time{})
	p := &BidBrain{c: config()}
	rise := t0.Add(10 * 24 * time.Hour)
	s := revState(src, rise)
	rel, _ := reliableMarket(s.View, "c3.xlarge")
	fp := footprint{left: s.Job.Total}
	for _, u := range p.held(s, rel) {
		fp.add(u, 1)
	}
	cands := p.candidates(s)
	if _, runs := p.choose(fp, cands, 0); len(runs) == 0 {
		t.Fatal("without waiting nothing is bought at the rise: the test shows nothing")
	}
	if kept, waiting := p.wait(s.View, fp, cands, 0); !waiting || len(kept) != 0 {
		t.Fatalf("kept %d of %d candidates at the rise (waiting %v), want none", len(kept), len(cands), waiting)
	}
	plan := p.Decide(s)
	if n := count(plan, rev, market.Transient); n != 0 {
		t.Errorf("bought %d machines at the rise", n)
	}
	if plan.Wake.IsZero() || plan.Wake.After(rise.Add(p.c.Estimator.Step())) {
		t.Errorf("wake %v, want within a step of %v", plan.Wake, rise)
	}
	back := rise.Add(30 * time.Minute)
	if n := count(p.Decide(revState(src, back)), rev, market.Transient); n == 0 {
		t.Error("bought nothing once the price was back")
	}
	series := src.Prices.Series[0]
	atRise := billing.Bid2015{}.Charge(series, 0.21, rise, rise.Add(time.Hour-p.c.Drain), market.ByUser)
	waited := billing.Bid2015{}.Charge(series, 0.21, back, back.Add(time.Hour-p.c.Drain), market.ByUser)
	if !(waited < atRise) {
		t.Errorf("an hour bought after waiting costs %v, at the rise %v", waited, atRise)
	}
}

// TestBidBrainWaitIsBounded: the same past, but this time the price rises
// to 0.10 and stays. BidBrain waits while the past says it falls back,
// asking again every step, and buys within a period and a step of the
// rise, so the job goes on.
func TestBidBrainWaitIsBounded(t *testing.T) {
	rise := t0.Add(10 * 24 * time.Hour)
	src := revSource(rise)
	p := &BidBrain{c: config()}
	step := p.c.Estimator.Step()
	for now := rise; ; now = now.Add(step) {
		if now.After(rise.Add(p.c.Period + step)) {
			t.Fatalf("nothing bought %v after the rise", now.Sub(rise))
		}
		plan := p.Decide(revState(src, now))
		if n := count(plan, rev, market.Transient); n > 0 {
			if now.Equal(rise) {
				t.Error("bought at once, without waiting")
			}
			return
		}
		if plan.Wake.IsZero() || plan.Wake.After(now.Add(step)) {
			t.Fatalf("waiting at %v with wake %v: not asked again within a step", now, plan.Wake)
		}
	}
}

// TestRisen: how long the price has been at least what it is now.
func TestRisen(t *testing.T) {
	m := &history.Market{Prices: []trace.Point{{At: t0, Price: 1}, {At: t0.Add(time.Hour), Price: 3}, {At: t0.Add(70 * time.Minute), Price: 2}}}
	if got := risen(m, t0.Add(80*time.Minute), 2*time.Hour); got != 20*time.Minute {
		t.Errorf("risen %v, want 20m (at 2 or more since the rise from 1)", got)
	}
	if got := risen(m, t0.Add(80*time.Minute), 10*time.Minute); got != 10*time.Minute {
		t.Errorf("risen %v, want the limit", got)
	}
	m.Prices = m.Prices[:1]
	if got := risen(m, t0.Add(time.Minute), time.Hour); got != time.Hour {
		t.Errorf("never lower: %v, want the limit", got)
	}
}
