package policy

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/billing"
	"github.com/terrace-ml/terrace/internal/market/history"
	"github.com/terrace-ml/terrace/internal/market/jobsim"
	"github.com/terrace-ml/terrace/internal/market/rm"
	"github.com/terrace-ml/terrace/internal/market/trace"
)

var t0 = time.Date(2015, 3, 1, 0, 0, 0, 0, time.UTC)

var (
	cheap = market.Market{Zone: "a", Type: "c3.xlarge"}
	dear  = market.Market{Zone: "b", Type: "c3.xlarge"}
	spiky = market.Market{Zone: "c", Type: "c3.xlarge"}
)

// source: zone a at 0.03 and zone b at 0.06, both flat for 20 days; zone
// c at 0.03 but rising to 0.05 for a minute at the half of every hour.
func source() *history.Source {
	flat := func(m market.Market, p float64) *trace.Series {
		return &trace.Series{Market: m, OnDemand: 0.21, Points: []trace.Point{{At: t0, Price: p}}}
	}
	s := &trace.Series{Market: spiky, OnDemand: 0.21}
	for h := 0; h < 24*20; h++ {
		at := t0.Add(time.Duration(h) * time.Hour)
		s.Points = append(s.Points, trace.Point{At: at, Price: 0.03}, trace.Point{At: at.Add(30 * time.Minute), Price: 0.05}, trace.Point{At: at.Add(31 * time.Minute), Price: 0.03})
	}
	return &history.Source{Prices: &trace.Prices{Series: []*trace.Series{flat(cheap, 0.03), flat(dear, 0.06), s}}}
}

func config() Config {
	cal := jobsim.DefaultCalibration()
	return Config{Reference: "c3.xlarge", Machines: 32, Reliable: 2, Max: 128, Rate: cal.Rate, Throughput: jobsim.FlowOf(cal).BestRate,
		Estimator: history.NewEstimator(time.Hour), BidEvicts: true, Period: time.Hour, Terms: billing.Bid2015{}.Terms(), Notice: 2 * time.Minute,
		Setup: 2 * time.Minute, Drain: 10 * time.Second, SwitchPause: time.Second, Checkpoint: 30 * time.Second}
}

func state(now time.Time, held ...rm.Holding) rm.State {
	return rm.State{View: source().Cut(now), Held: held, Job: rm.JobStatus{Total: 1e9, Rate: 1e5, Working: true, CheckpointAt: now}}
}

func count(plan rm.Plan, m market.Market, class market.Class) int {
	n := 0
	for _, r := range plan.Acquire {
		if r.Market == m && r.Class == class {
			n += r.Count
		}
	}
	return n
}

// TestBidBrainPrefersFreeHours: of two zones at the same price, BidBrain
// buys in the one whose price rises every hour, at a bid at the price:
// its hours end in evictions and are free. It never buys the dearer zone.
func TestBidBrainPrefersFreeHours(t *testing.T) {
	p := &BidBrain{c: config()}
	plan := p.Decide(state(t0.Add(10 * 24 * time.Hour)))
	if n := count(plan, market.Market{Zone: "a", Type: "c3.xlarge"}, market.Reliable) + count(plan, spiky, market.Reliable) + count(plan, dear, market.Reliable); n != 2 {
		t.Errorf("%d reliable machines, want 2", n)
	}
	if count(plan, spiky, market.Transient) == 0 || count(plan, dear, market.Transient) != 0 {
		t.Fatalf("plan %+v: want transient machines in the spiky zone only", plan.Acquire)
	}
	for _, r := range plan.Acquire {
		if r.Class == market.Transient && r.Market == spiky && math.Abs(r.Bid-0.03) > 1e-9 {
			t.Errorf("bid %v, want the price 0.03", r.Bid)
		}
	}
	if total := count(plan, cheap, market.Transient) + count(plan, spiky, market.Transient); total > 128 {
		t.Errorf("%d transient machines, more than the job's parallelism", total)
	}
}

// TestBidBrainCountsFreeHours: in the zone whose price rises for a minute
// at the half of every hour, a machine bid at the price is evicted (and
// gone) within every hour it could start in at that price, so BidBrain
// expects to pay nothing; bid above the rise, or in the flat zone at the
// same price, it expects to pay every hour, for more work.
func TestBidBrainCountsFreeHours(t *testing.T) {
	p := &BidBrain{c: config()}
	cost := map[string]outlook{}
	for _, c := range p.candidates(state(t0.Add(10*24*time.Hour)), false) {
		cost[fmt.Sprintf("%s@%.2f", c.m.Market.Zone, c.bid)] = c.outlook
	}
	atPrice, above, flat := cost["c@0.03"], cost["c@0.06"], cost["a@0.03"]
	if math.Abs(atPrice.cost) > 1e-9 {
		t.Errorf("bid at the price in the rising zone: expected $%.5f an hour, want none", atPrice.cost)
	}
	if above.cost != 0.03 || flat.cost != 0.03 {
		t.Errorf("bid above the rise: $%v, flat zone: $%v; want 0.03 each", above.cost, flat.cost)
	}
	if !(atPrice.work < above.work) || math.Abs(above.work-flat.work) > 1e-9 {
		t.Errorf("working shares %v (at the price), %v (above), %v (flat): evictions and re-setup cost work", atPrice.work, above.work, flat.work)
	}
}

// TestBidBrainReleasesBeforeBoundary: an allocation in the dear zone is
// let go just before the end of its paid hour (its drain before it), not
// earlier, and not once the next hour has begun; released then, it is
// charged the hours it used and not one more.
func TestBidBrainReleasesBeforeBoundary(t *testing.T) {
	c := config()
	p := &BidBrain{c: c}
	now := t0.Add(10 * 24 * time.Hour)
	requested := now.Add(-90 * time.Minute)
	var held []rm.Holding
	for i := 0; i < 2; i++ {
		held = append(held, rm.Holding{Machine: market.Machine{ID: market.MachineID(i + 1), Market: cheap, Class: market.Reliable, Alloc: 1, Requested: now.Add(-5 * time.Hour), Ready: now.Add(-5 * time.Hour)}})
	}
	for i := 0; i < 8; i++ {
		held = append(held, rm.Holding{Machine: market.Machine{ID: market.MachineID(10 + i), Market: dear, Class: market.Transient, Bid: 0.06, Alloc: 10, Requested: requested, Ready: requested.Add(2 * time.Minute)}})
	}
	boundary := requested.Add(2 * time.Hour)
	due := boundary.Add(-c.Drain)
	if plan := p.Decide(state(now, held...)); len(plan.Release) != 0 {
		t.Errorf("released %d machines mid-hour", len(plan.Release))
	} else if !plan.Wake.Equal(due) {
		t.Errorf("wake %v, want the drain before the boundary, %v", plan.Wake, due)
	}
	if plan := p.Decide(state(due.Add(-time.Second), held...)); len(plan.Release) != 0 {
		t.Errorf("released %d machines before the drain", len(plan.Release))
	}
	plan := p.Decide(state(due, held...))
	if len(plan.Release) != 8 {
		t.Fatalf("released %d of 8 dear machines before their boundary", len(plan.Release))
	}
	if plan := p.Decide(state(boundary.Add(time.Second), held...)); len(plan.Release) != 0 {
		t.Errorf("released %d machines just after the boundary, with a new hour paid", len(plan.Release))
	} else if want := boundary.Add(time.Hour - c.Drain); !plan.Wake.Equal(want) {
		t.Errorf("wake %v after the boundary, want %v", plan.Wake, want)
	}
	dear := source().Prices.Series[1]
	if got, want := (billing.Bid2015{}).Charge(dear, 0.21, requested, due, market.ByUser), 2*0.06; math.Abs(got-want) > 1e-12 {
		t.Errorf("released at the drain before the boundary: charged %v, want two hours, %v", got, want)
	}
}

// TestCheckpointDaly: with evictions about once an hour, the interval is
// about √(2·30 s·1 h) ≈ 7.7 min (Daly's terms take off about 20 s); the
// policy bids the on-demand price.
func TestCheckpointDaly(t *testing.T) {
	p := &Checkpoint{c: config()}
	now := t0.Add(10 * 24 * time.Hour)
	held := []rm.Holding{{Machine: market.Machine{ID: 1, Market: spiky, Class: market.Transient, Bid: 0.04, Requested: now, Ready: now}}}
	s := state(now, held...)
	got := p.interval(s)
	if want := time.Duration(math.Sqrt(2 * float64(30*time.Second) * float64(time.Hour))); got < want*9/10 || got > want*12/10 {
		t.Errorf("interval %v, want about %v", got, want)
	}
	plan := p.Decide(state(now))
	if count(plan, cheap, market.Transient)+count(plan, spiky, market.Transient) != 32 {
		t.Fatalf("plan %+v", plan.Acquire)
	}
	if plan.Acquire[0].Bid != 0.21 {
		t.Errorf("bid %v, want the on-demand price", plan.Acquire[0].Bid)
	}
}

// TestOnDemandAndTiers: the reference buys its footprint on demand; tiers
// its reliable tier and the footprint of transient machines.
func TestOnDemandAndTiers(t *testing.T) {
	now := t0.Add(10 * 24 * time.Hour)
	od := (&OnDemand{c: config()}).Decide(state(now))
	if len(od.Acquire) != 1 || od.Acquire[0].Class != market.Reliable || od.Acquire[0].Count != 32 {
		t.Errorf("ondemand %+v", od.Acquire)
	}
	ti := (&Tiers{c: config()}).Decide(state(now))
	rel, tr := 0, 0
	for _, r := range ti.Acquire {
		if r.Class == market.Reliable {
			rel += r.Count
		} else {
			tr += r.Count
		}
	}
	if rel != 2 || tr != 32 {
		t.Errorf("tiers: %d reliable, %d transient", rel, tr)
	}
	if s := state(now); true {
		s.Job.Done = s.Job.Total
		if plan := (&BidBrain{c: config()}).Decide(s); len(plan.Acquire) != 0 {
			t.Error("bidbrain buys for a finished job")
		}
	}
}

// TestBidBrainTrimsTheEnd: with a few minutes of work left for the
// machines held, BidBrain buys nothing more and lets allocations go
// before their boundary rather than pay an hour that would idle.
func TestBidBrainTrimsTheEnd(t *testing.T) {
	p := &BidBrain{c: config()}
	now := t0.Add(10 * 24 * time.Hour)
	var held []rm.Holding
	for i := 0; i < 2; i++ {
		held = append(held, rm.Holding{Machine: market.Machine{ID: market.MachineID(i + 1), Market: cheap, Class: market.Reliable, Alloc: 1, Requested: now.Add(-5 * time.Hour), Ready: now.Add(-5 * time.Hour)}})
	}
	for a := 0; a < 4; a++ {
		for i := 0; i < 16; i++ {
			held = append(held, rm.Holding{Machine: market.Machine{ID: market.MachineID(100*a + 10 + i), Market: cheap, Class: market.Transient, Bid: 0.03, Alloc: int64(100*a + 10), Requested: now.Add(-2*time.Hour + p.c.Drain), Ready: now.Add(-2 * time.Hour)}})
		}
	}
	s := state(now, held...)
	s.Job.Done = s.Job.Total - 1e5 // a few minutes for 64 c3.xlarge
	plan := p.Decide(s)
	if n := count(plan, cheap, market.Transient) + count(plan, spiky, market.Transient) + count(plan, dear, market.Transient); n != 0 {
		t.Errorf("bought %d machines for the last minutes", n)
	}
	if len(plan.Release) < 16 {
		t.Errorf("released %d of 64 machines at the boundary with %v updates left", len(plan.Release), 1e5)
	}
	// With the whole job ahead, what it lets go it replaces (here by the
	// zone whose hours end free).
	s.Job.Done = 0
	if plan := p.Decide(s); count(plan, spiky, market.Transient) < len(plan.Release) {
		t.Errorf("released %d machines with the whole job ahead and bought %d", len(plan.Release), count(plan, spiky, market.Transient))
	}
}
