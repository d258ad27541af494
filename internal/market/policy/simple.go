package policy

import (
	"math"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/history"
	"github.com/terrace-ml/terrace/internal/market/rm"
)

// OnDemand is the reference: on-demand machines of the type with the
// lowest on-demand price per update, as many as give the reference
// footprint's compute, held to the end.
type OnDemand struct {
	c     Config
	typ   string
	count int
}

func (p *OnDemand) Name() string { return "ondemand" }

func (p *OnDemand) Decide(s rm.State) rm.Plan {
	if done(s) {
		return rm.Plan{}
	}
	if p.typ == "" {
		ref, _ := p.c.Rate(p.c.Reference)
		best := math.Inf(1)
		for _, m := range s.View.Markets {
			r, err := p.c.Rate(m.Market.Type)
			if err == nil && m.OnDemand/r < best {
				best, p.typ = m.OnDemand/r, m.Market.Type
				p.count = int(math.Ceil(float64(p.c.Machines) * ref / r))
			}
		}
	}
	m, _ := reliableMarket(s.View, p.typ)
	return rm.Plan{Acquire: topUp(s.Held, market.Reliable, p.count, m, 0)}
}

// Checkpoint is the papers' previous approach: every machine transient,
// of the job's type, in the zone with the lowest price, bid at the
// on-demand price; periodic checkpoints at Daly's optimum interval for
// the checkpoint's time and the mean time between evictions at that bid
// estimated from the past; the job restarts from its last checkpoint
// once its machines are back.
type Checkpoint struct {
	c Config
	// The interval last computed, for the market and bid it was computed
	// for, and when.
	market market.Market
	bid    float64
	at     time.Time
	every  time.Duration
}

func (p *Checkpoint) Name() string { return "checkpoint" }

func (p *Checkpoint) Decide(s rm.State) rm.Plan {
	if done(s) {
		return rm.Plan{}
	}
	var plan rm.Plan
	od := 0.0
	if m, ok := reliableMarket(s.View, p.c.Reference); ok {
		od = m.OnDemand
	}
	bid := fixedBid(p.c, od)
	if zone, ok := cheapestZone(s.View, p.c.Reference, bid, p.c.BidEvicts); ok {
		plan.Acquire = topUp(s.Held, market.Transient, p.c.Machines, zone, bidOf(p.c, bid))
	}
	if !s.Job.Working {
		return plan
	}
	next := s.Job.CheckpointAt.Add(p.interval(s))
	if !s.View.Now.Before(next) {
		plan.Checkpoint = true
		next = s.View.Now.Add(p.interval(s))
	}
	plan.Wake = next
	return plan
}

// interval is Daly's checkpoint interval for the market the job is in,
// at its bid. It is recomputed once a billing period at most: the mean
// time between evictions moves slowly, and reading the whole window at
// every event would cost more than the rest of the replay.
func (p *Checkpoint) interval(s rm.State) time.Duration {
	for _, h := range s.Held {
		m, ok := s.View.Lookup(h.Market)
		if !ok {
			continue
		}
		if h.Market != p.market || h.Bid != p.bid || s.View.Now.Sub(p.at) >= p.c.Period {
			p.market, p.bid, p.at, p.every = h.Market, h.Bid, s.View.Now, Daly(p.c.Checkpoint, p.mtbe(s.View, m, h.Bid))
		}
		return p.every
	}
	return Daly(p.c.Checkpoint, 2*history.Window)
}

// mtbe is the mean time between evictions of a machine bid at bid in
// market m: how long the price stayed at or below the bid between rises
// past it (bid markets), or the mean of the availability trace's
// exponential (exposure per eviction, with its prior).
func (p *Checkpoint) mtbe(v history.View, m *history.Market, bid float64) time.Duration {
	if p.c.BidEvicts {
		return history.MeanTimeToExceed(v, m, bid)
	}
	r := risk(p.c, v, m, 0)
	if e := r.Evicted(); e > 0 {
		return time.Duration(float64(r.Clamped(0, r.Horizon)) / e)
	}
	return 2 * history.Window
}

// Daly is the checkpoint interval that minimises the expected run time
// for a checkpoint taking delta and failures every m on average (J. T.
// Daly, "A higher order estimate of the optimum checkpoint interval for
// restart dumps", FGCS 2006): Young's √(2δM) with Daly's higher-order
// terms, less δ; M itself when δ ≥ 2M.
func Daly(delta, m time.Duration) time.Duration {
	d, mm := delta.Seconds(), m.Seconds()
	if d >= 2*mm {
		return m
	}
	x := d / (2 * mm)
	return time.Duration((math.Sqrt(2*d*mm)*(1+math.Sqrt(x)/3+x/9) - d) * float64(time.Second))
}

// Tiers is a few reliable machines and the reference footprint of
// transient ones of the job's type in the cheapest zone, bid at the
// on-demand price and replaced as the market allows; the job switches
// stage as the mix changes.
type Tiers struct{ c Config }

func (p *Tiers) Name() string { return "tiers" }

func (p *Tiers) Decide(s rm.State) rm.Plan {
	if done(s) {
		return rm.Plan{}
	}
	var plan rm.Plan
	rel, ok := reliableMarket(s.View, p.c.Reference)
	if !ok {
		return plan
	}
	plan.Acquire = topUp(s.Held, market.Reliable, p.c.Reliable, rel, 0)
	bid := fixedBid(p.c, rel.OnDemand)
	if zone, ok := cheapestZone(s.View, p.c.Reference, bid, p.c.BidEvicts); ok {
		plan.Acquire = append(plan.Acquire, topUp(s.Held, market.Transient, p.c.Machines, zone, bidOf(p.c, bid))...)
	}
	return plan
}

// bidOf is the bid placed for a wanted bid in a market with bids, zero
// (pay the spot price) in one without.
func bidOf(c Config, bid float64) float64 {
	if !c.BidEvicts {
		return 0
	}
	return bid
}

func fixedBid(c Config, onDemand float64) float64 {
	if c.Bid > 0 {
		return c.Bid
	}
	return onDemand
}
