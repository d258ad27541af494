package policy

import (
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/billing"
	"github.com/terrace-ml/terrace/internal/market/history"
	"github.com/terrace-ml/terrace/internal/market/jobsim"
	"github.com/terrace-ml/terrace/internal/market/rm"
	"github.com/terrace-ml/terrace/internal/market/trace"
)

// elasticConfig is config with the design without a reliable tier
// allowed.
func elasticConfig() Config {
	c := config()
	flow := jobsim.FlowOf(jobsim.DefaultCalibration())
	c.Elastic = func(n, rate float64) float64 { return flow.Stage(0, jobsim.Mix{Transient: n, TransientRate: rate}) }
	return c
}

// soaring is one zone at 0.03 whose price soars to 1.00, past every bid
// of the grid, for a minute at the half of every hour: every machine
// bought is evicted within the hour, all at once.
func soaring() *history.Source {
	s := &trace.Series{Market: spiky, OnDemand: 0.21}
	for h := 0; h < 24*20; h++ {
		at := t0.Add(time.Duration(h) * time.Hour)
		s.Points = append(s.Points, trace.Point{At: at, Price: 0.03}, trace.Point{At: at.Add(30 * time.Minute), Price: 1}, trace.Point{At: at.Add(31 * time.Minute), Price: 0.03})
	}
	return &history.Source{Prices: &trace.Prices{Series: []*trace.Series{s}}}
}

// TestBidBrainDesign: BidBrain drops the reliable tier where a market
// that seldom evicts can hold the state (zone a is flat), and keeps it
// where every machine it could buy goes at once every hour, its hour
// paid all the same, and each total loss costs the work since a
// checkpoint that takes 30 s; it keeps its choice; without
// Config.Elastic it always keeps the tier.
func TestBidBrainDesign(t *testing.T) {
	now := t0.Add(10 * 24 * time.Hour)
	if (&BidBrain{c: config()}).Elastic(state(now)) {
		t.Error("elastic without Config.Elastic")
	}
	p := &BidBrain{c: elasticConfig()}
	if !p.Elastic(state(now)) {
		t.Fatal("kept the reliable tier beside a flat market")
	}
	plan := p.Decide(state(now))
	if n := count(plan, cheap, market.Reliable) + count(plan, spiky, market.Reliable) + count(plan, dear, market.Reliable); n != 0 {
		t.Errorf("elastic: bought %d reliable machines", n)
	}
	if count(plan, cheap, market.Transient)+count(plan, spiky, market.Transient) == 0 {
		t.Errorf("elastic: bought nothing (%+v)", plan.Acquire)
	}
	s := state(now)
	s.View = soaring().Cut(now)
	if !p.Elastic(s) {
		t.Error("the choice changed once made")
	}
	paid := elasticConfig()
	paid.Terms.FreeEvicted = false
	if (&BidBrain{c: paid}).Elastic(s) {
		t.Error("dropped the reliable tier where every machine goes at once every hour")
	}
	paid.Design = DesignElastic
	if !(&BidBrain{c: paid}).Elastic(s) {
		t.Error("--design elastic kept the tier")
	}
	forced := elasticConfig()
	forced.Design = DesignTiers
	if (&BidBrain{c: forced}).Elastic(state(now)) {
		t.Error("--design tiers dropped the tier")
	}
}

// dearAllocation is eight machines of the dear zone bought together 90
// minutes before 10 days into the trace, the job's only machines, and
// the moment they are due for release (their drain before the end of
// their second hour).
func dearAllocation(c Config) ([]rm.Holding, time.Time) {
	now := t0.Add(10 * 24 * time.Hour)
	requested := now.Add(-90 * time.Minute)
	var held []rm.Holding
	for i := 0; i < 8; i++ {
		held = append(held, rm.Holding{Machine: market.Machine{ID: market.MachineID(10 + i), Market: dear, Class: market.Transient, Bid: 0.06, Alloc: 10, Requested: requested, Ready: requested.Add(2 * time.Minute)}})
	}
	return held, requested.Add(2*time.Hour - c.Drain)
}

// TestElasticKeepsAHolder: an elastic job's allocation due for release
// is kept if no other working machine would be left to take its slots
// (the last servers cannot drain), and released when one would.
func TestElasticKeepsAHolder(t *testing.T) {
	c := elasticConfig()
	held, due := dearAllocation(c)
	p := &BidBrain{c: c, design: elastic}
	if plan := p.Decide(state(due, held...)); len(plan.Release) != 0 {
		t.Errorf("released %d of the 8 machines that hold the job's state", len(plan.Release))
	}
	for i := 0; i < 4; i++ {
		at := due.Add(-5 * time.Hour)
		held = append(held, rm.Holding{Machine: market.Machine{ID: market.MachineID(30 + i), Market: cheap, Class: market.Transient, Bid: 0.21, Alloc: 30, Requested: at.Add(-30 * time.Minute), Ready: at}})
	}
	if plan := p.Decide(state(due, held...)); len(plan.Release) != 8 {
		t.Errorf("released %d of the 8 dear machines with four cheap ones working", len(plan.Release))
	}
}

// TestElasticCheckpoints: an elastic job is asked for a checkpoint once
// its interval has passed since the last, and woken for the next.
func TestElasticCheckpoints(t *testing.T) {
	now := t0.Add(10 * 24 * time.Hour)
	p := &BidBrain{c: elasticConfig(), design: elastic}
	s := state(now)
	if plan := p.Decide(s); plan.Checkpoint || plan.Wake.IsZero() || !plan.Wake.After(now) {
		t.Errorf("just checkpointed: checkpoint %v, wake %v", plan.Checkpoint, plan.Wake)
	}
	s.Job.CheckpointAt = now.Add(-24 * time.Hour)
	if plan := p.Decide(s); !plan.Checkpoint {
		t.Error("no checkpoint a day after the last")
	}
	tiered := &BidBrain{c: elasticConfig(), design: tiered}
	if plan := tiered.Decide(s); plan.Checkpoint {
		t.Error("a tiered job asked for a checkpoint")
	}
}

// TestBidBrainNotAboveOnDemand: a market whose spot price stands above
// its on-demand price is not bought from, however likely its hour is to
// end free: EC2's default maximum price is the on-demand price, and a
// spike's price is what a wrong free-hour forecast pays.
func TestBidBrainNotAboveOnDemand(t *testing.T) {
	now := t0.Add(10 * 24 * time.Hour)
	src := source()
	// Zone c at 0.25, above its 0.21, rising to 0.30 for a minute every
	// hour: at the price its hours are expected free.
	for i := range src.Prices.Series[2].Points {
		src.Prices.Series[2].Points[i].Price += 0.22
	}
	s := state(now)
	s.View = src.Cut(now)
	for _, c := range (&BidBrain{c: elasticConfig()}).candidates(s, false) {
		if c.m.Market == spiky {
			t.Fatalf("zone c at 0.25, above on-demand, is a candidate (bid %v, expected cost %v)", c.bid, c.cost)
		}
	}
}

// TestElasticFillsTheJob: with one market of one type, never evicted,
// an elastic job's cost per update is the same on one machine as on
// many; it takes many (it finishes sooner), where Dinkelbach's method
// alone stops at one.
func TestElasticFillsTheJob(t *testing.T) {
	now := t0.Add(10 * 24 * time.Hour)
	flat := &history.Source{Prices: &trace.Prices{Series: []*trace.Series{source().Prices.Series[0]}}}
	s := state(now)
	s.View = flat.Cut(now)
	plan := (&BidBrain{c: elasticConfig(), design: elastic}).Decide(s)
	if n := count(plan, cheap, market.Transient); n < 32 {
		t.Errorf("bought %d machines for a job of 1e9 updates in a flat market, want the job's parallelism", n)
	}
}

// TestElasticLastGoAfterACheckpoint: with a checkpoint short enough to
// fit in the release window, the last machines due for release are
// kept until a checkpoint is written (the plan asks for one and to be
// asked again within the window), then released.
func TestElasticLastGoAfterACheckpoint(t *testing.T) {
	c := elasticConfig()
	c.Checkpoint = time.Second
	held, due := dearAllocation(c)
	p := &BidBrain{c: c, design: elastic}
	s := state(due, held...)
	s.Job.CheckpointAt = due.Add(-time.Hour)
	plan := p.Decide(s)
	if len(plan.Release) != 0 || !plan.Checkpoint || !plan.Wake.After(due) || !plan.Wake.Before(due.Add(c.Drain)) {
		t.Fatalf("without a fresh checkpoint: released %d, checkpoint %v, wake %v; want none, a checkpoint, a wake within %v of %v", len(plan.Release), plan.Checkpoint, plan.Wake, c.Drain, due)
	}
	s = state(plan.Wake, held...)
	s.Job.CheckpointAt = due.Add(c.Checkpoint)
	if plan := p.Decide(s); len(plan.Release) != 8 {
		t.Errorf("after the checkpoint: released %d of 8", len(plan.Release))
	}
}

// TestElasticSizesAsTheTier: an elastic job holding one machine bought
// an hour ago (no setup left, seldom evicted) buys more beside it: the
// tier it does without is counted as the value of its hours, so the
// lone machine's lower cost per update does not hold the job to it.
func TestElasticSizesAsTheTier(t *testing.T) {
	now := t0.Add(10 * 24 * time.Hour)
	at := now.Add(-30 * time.Minute)
	held := []rm.Holding{{Machine: market.Machine{ID: 1, Market: cheap, Class: market.Transient, Bid: 0.21, Alloc: 1, Requested: at.Add(-5 * time.Minute), Ready: at}}}
	flat := &history.Source{Prices: &trace.Prices{Series: []*trace.Series{source().Prices.Series[0]}}}
	s := state(now, held...)
	s.View = flat.Cut(now)
	plan := (&BidBrain{c: elasticConfig(), design: elastic}).Decide(s)
	if n := count(plan, cheap, market.Transient); n < 32 {
		t.Errorf("bought %d machines beside the one held, want the job's parallelism", n)
	}
}

// TestElasticChosenInAnOutage: a per-second market with an availability
// trace, at a start inside an outage (no machine to be had for the last
// hour; two outages of an hour before). Neither design can buy a
// transient machine until it ends, so the choice is made on the market's
// price and risk: BidBrain drops the tier (the market seldom takes
// machines back, as where capacity is at hand) and buys nothing meanwhile.
// Compared on what could be bought at once, the elastic footprint was
// empty and the tier won by default, training alone at on-demand's cost
// per update through the outage.
func TestElasticChosenInAnOutage(t *testing.T) {
	now := t0.Add(10 * 24 * time.Hour)
	a := &trace.Availability{
		Offsets: []time.Duration{0, 3 * 24 * time.Hour, 3*24*time.Hour + time.Hour, 6 * 24 * time.Hour, 6*24*time.Hour + time.Hour, now.Sub(t0) - time.Hour},
		Counts:  []int{64, 0, 64, 0, 64, 0},
		Size:    64,
		End:     20 * 24 * time.Hour,
	}
	src := &history.Source{
		Prices: &trace.Prices{Series: []*trace.Series{{Market: cheap, OnDemand: 0.21, Points: []trace.Point{{At: t0, Price: 0.03}}}}},
		Avail:  map[market.Market]*history.Timeline{cheap: history.Place(a, t0)},
	}
	c := elasticConfig()
	c.BidEvicts, c.Terms = false, billing.PerSecond{}.Terms()
	s := rm.State{View: src.Cut(now), Job: rm.JobStatus{Total: 1e9, Rate: 1e5, Working: true, CheckpointAt: now}}
	p := &BidBrain{c: c}
	if !p.Elastic(s) {
		t.Fatal("kept the reliable tier at a start inside an outage of a market that seldom takes machines back")
	}
	if plan := p.Decide(s); len(plan.Acquire) != 0 {
		t.Errorf("bought %+v in an outage", plan.Acquire)
	}
	// Once it ends, the job buys.
	a.Offsets, a.Counts = append(a.Offsets, now.Sub(t0)+time.Hour), append(a.Counts, 64)
	src.Avail[cheap] = history.Place(a, t0)
	s.View = src.Cut(now.Add(time.Hour + time.Minute))
	if plan := p.Decide(s); count(plan, cheap, market.Transient) == 0 || count(plan, cheap, market.Reliable) != 0 {
		t.Errorf("after the outage: bought %+v, want transient machines of zone a only", plan.Acquire)
	}
}
