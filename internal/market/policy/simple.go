package policy

import (
	"math"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
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
// on-demand price; periodic checkpoints every √(2·δ·M) (Young), M the
// mean time between evictions at that bid estimated from the past; the
// job restarts from its last checkpoint once its machines are back.
type Checkpoint struct{ c Config }

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

// interval is Young's checkpoint interval for the market the job is in.
func (p *Checkpoint) interval(s rm.State) time.Duration {
	mtbf := time.Duration(0)
	for _, h := range s.Held {
		m, ok := s.View.Lookup(h.Market)
		if !ok {
			continue
		}
		r := risk(p.c, s.View, m, h.Bid)
		if r.P > 0 {
			mtbf = time.Duration(float64(p.c.Period) / r.P)
		}
		break
	}
	if mtbf == 0 {
		mtbf = 24 * time.Hour * 90 // no eviction seen: the whole window
	}
	return time.Duration(math.Sqrt(2 * float64(p.c.Checkpoint) * float64(mtbf)))
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
