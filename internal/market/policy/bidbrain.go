package policy

import (
	"math"
	"sort"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/history"
	"github.com/terrace-ml/terrace/internal/market/rm"
)

// BidBrain (Proteus, EuroSys '17) holds the reliable tier and buys
// transient machines from every market whose type has a work rate,
// choosing markets, bids and counts to minimise the expected cost per
// update over the next billing period, from each market's eviction risk
// estimated from its past; it counts what scaling costs (a new machine's
// boot and join, the stage switch it causes) and releases allocations,
// at their billing boundaries, whose work per dollar falls below the rest
// (docs/design/market.md, "BidBrain's objective").
type BidBrain struct{ c Config }

func (p *BidBrain) Name() string { return "bidbrain" }

// minSamples is one day of the estimator's samples (every period/12): a
// market with less past is not bought from.
const minSamples = 12 * 24

// priceStep is the smallest price increment on EC2's spot market.
const priceStep = 0.0001

// unit is one allocation (or the reliable tier) and what it is expected
// to cost and contribute over the horizon.
type unit struct {
	alloc    int64
	class    market.Class
	since    time.Time // when the allocation was requested: its billing hours start there
	count    float64   // machines
	rate     float64   // their worker updates per hour
	upRate   float64   // the same, weighted by each machine's expected working share
	cost     float64   // expected dollars over the horizon
	machines []market.MachineID
}

// footprint sums units into the planner's inputs (machines as held) and
// the expected cost and working share.
type footprint struct {
	nR, nT, wR, wT, up, cost float64
	// left is the job's remaining work: no footprint can do more.
	left float64
}

func (f *footprint) add(u unit, sign float64) {
	if u.class == market.Reliable {
		f.nR += sign * u.count
		f.wR += sign * u.rate
	} else {
		f.nT += sign * u.count
		f.wT += sign * u.rate
	}
	f.up += sign * u.upRate
	f.cost += sign * u.cost
}

func (p *BidBrain) Decide(s rm.State) rm.Plan {
	if done(s) {
		return rm.Plan{}
	}
	rel, ok := reliableMarket(s.View, p.c.Reference)
	if !ok {
		return rm.Plan{}
	}
	plan := rm.Plan{Acquire: topUp(s.Held, market.Reliable, p.c.Reliable, rel, 0)}
	h := p.c.Period
	units := p.held(s, rel, h)
	fp := footprint{left: s.Job.Total - s.Job.Done}
	for _, u := range units {
		fp.add(u, 1)
	}
	cands := p.candidates(s, h)
	plan.Release = p.release(s, units, &fp, h, p.bestRatio(&fp, cands, live(s.Held, market.Transient), h))
	plan.Acquire = append(plan.Acquire, p.acquire(live(s.Held, market.Transient)-len(plan.Release), &fp, cands, h)...)
	plan.Wake = p.nextBoundary(s)
	return plan
}

// work is the expected updates over the horizon: the planner's throughput
// with the machines held, scaled by the share of their compute expected
// to be working (machines leave on eviction and are paid before they
// work), and no more than the job has left. The cap is what trims the
// footprint at the end of a job: capacity that would idle through a paid
// hour is worth nothing.
func (f footprint) work(c Config, h time.Duration) float64 {
	if f.wR+f.wT <= 0 {
		return 0
	}
	return min(f.left, c.Throughput(f.nR, f.nT, f.wR, f.wT)*h.Hours()*f.up/(f.wR+f.wT))
}

// held turns the machines held into units: the reliable tier as one, each
// transient allocation as one, weighted by its risk at its (fixed) bid.
func (p *BidBrain) held(s rm.State, rel *history.Market, h time.Duration) []unit {
	relRate, _ := p.c.Rate(p.c.Reference)
	n := float64(p.c.Reliable)
	units := []unit{{alloc: -1, class: market.Reliable, count: n, rate: n * relRate, upRate: n * relRate, cost: n * rel.OnDemand * h.Hours()}}
	byAlloc := map[int64]*unit{}
	for _, m := range s.Held {
		if m.Class != market.Transient || m.Noticed {
			continue
		}
		mk, ok := s.View.Lookup(m.Market)
		price, okp := mk.Price()
		rate, err := p.c.Rate(m.Market.Type)
		if !ok || !okp || err != nil {
			continue
		}
		u := byAlloc[m.Alloc]
		if u == nil {
			u = &unit{alloc: m.Alloc, class: market.Transient, since: m.Requested}
			byAlloc[m.Alloc] = u
		}
		r := risk(p.c, s.View, mk, m.Bid)
		u.count++
		u.rate += rate
		u.upRate += rate * min(r.Up, h).Hours() / h.Hours()
		u.cost += p.cost(price, r, h)
		u.machines = append(u.machines, m.ID)
	}
	allocs := make([]int64, 0, len(byAlloc))
	for a := range byAlloc {
		allocs = append(allocs, a)
	}
	sort.Slice(allocs, func(i, j int) bool { return allocs[i] < allocs[j] })
	for _, a := range allocs {
		units = append(units, *byAlloc[a])
	}
	return units
}

// cost is a transient machine's expected dollars over the horizon.
func (p *BidBrain) cost(price float64, r history.Risk, h time.Duration) float64 {
	if p.c.FreeIfEvicted {
		return (1 - r.P) * price * h.Hours() // the hour is paid unless it ends in an eviction
	}
	return price * min(r.Up, h).Hours()
}

// release drops, at their billing boundaries, the allocations whose
// dollars per update exceed the rest's (dropping them lowers the cost per
// update) or the best new machine's (replacing them does).
func (p *BidBrain) release(s rm.State, units []unit, fp *footprint, h time.Duration, best float64) []market.MachineID {
	var out []market.MachineID
	for _, u := range units {
		if u.class != market.Transient || !p.atBoundary(s.View.Now, u.since) {
			continue
		}
		rest := *fp
		rest.add(u, -1)
		w := rest.work(p.c, h)
		if w <= 0 {
			continue
		}
		own := u.cost / (fp.work(p.c, h) - w)
		if own > rest.cost/w || own > best {
			*fp = rest
			out = append(out, u.machines...)
		}
	}
	return out
}

// bestRatio is the lowest dollars per update a new run of machines would
// add, and the run: the greedy step of acquire.
func (p *BidBrain) bestRatio(fp *footprint, cands []candidate, held int, h time.Duration) float64 {
	_, _, r := p.bestRun(fp, cands, held, h)
	return r
}

func (p *BidBrain) bestRun(fp *footprint, cands []candidate, held int, h time.Duration) (int, int, float64) {
	best, bestK, bestRatio := -1, 0, math.Inf(1)
	for i, c := range cands {
		for k := 1; k <= p.c.Max-held; k *= 2 {
			if g := p.gain(fp, c, float64(k), h); g > 0 && float64(k)*c.cost/g < bestRatio*0.999 {
				best, bestK, bestRatio = i, k, float64(k)*c.cost/g
			}
		}
	}
	return best, bestK, bestRatio
}

// atBoundary says a paid hour of an allocation requested at since ends
// now.
func (p *BidBrain) atBoundary(now, since time.Time) bool {
	into := now.Sub(since) % p.c.Period
	return now.After(since) && (into < time.Second || p.c.Period-into < time.Second)
}

// nextBoundary is the earliest end of a paid hour among the allocations.
func (p *BidBrain) nextBoundary(s rm.State) time.Time {
	var next time.Time
	for _, m := range s.Held {
		if m.Class != market.Transient || m.Noticed {
			continue
		}
		k := s.View.Now.Sub(m.Requested)/p.c.Period + 1
		b := m.Requested.Add(k * p.c.Period)
		if next.IsZero() || b.Before(next) {
			next = b
		}
	}
	return next
}

// candidate is one way to buy a transient machine.
type candidate struct {
	m    *history.Market
	bid  float64
	rate float64 // worker updates per hour when working
	frac float64 // expected working fraction of the horizon, setup deducted
	cost float64 // expected dollars over the horizon
}

// acquire adds, greedily, the candidate run of machines with the lowest
// marginal cost per update while that is below the footprint's. Runs of
// 1, 2, 4, ... machines are tried because the planner's throughput is not
// concave: a stage that pays only past a number of machines is reached by
// a run, never by one machine at a time.
func (p *BidBrain) acquire(held int, fp *footprint, cands []candidate, h time.Duration) []market.Request {
	var out []market.Request
	for held < p.c.Max {
		best, bestK, bestRatio := p.bestRun(fp, cands, held, h)
		if best < 0 || bestRatio >= fp.cost/fp.work(p.c, h) {
			break
		}
		c := cands[best]
		fp.add(c.unit(float64(bestK)), 1)
		held += bestK
		out = append(out, market.Request{Market: c.m.Market, Class: market.Transient, Count: bestK, Bid: c.bid})
	}
	return out
}

// gain is the expected updates over the horizon that k more machines of
// candidate c add: the planner's marginal throughput with the machines
// held (so that nothing is bought past the job's bottleneck) over their
// expected working share, less the stage switch their arrival may cause.
func (p *BidBrain) gain(fp *footprint, c candidate, k float64, h time.Duration) float64 {
	now := p.c.Throughput(fp.nR, fp.nT, fp.wR, fp.wT)
	more := p.c.Throughput(fp.nR, fp.nT+k, fp.wR, fp.wT+k*c.rate)
	base := fp.work(p.c, h)
	return min(fp.left, base+(more-now)*h.Hours()*c.frac) - base - now*p.c.SwitchPause.Hours()
}

func (c candidate) unit(k float64) unit {
	return unit{class: market.Transient, count: k, rate: k * c.rate, upRate: k * c.rate * c.frac, cost: k * c.cost}
}

// candidates lists every market with a known rate and enough past, at
// every bid of the grid (bid markets) or at the spot price.
func (p *BidBrain) candidates(s rm.State, h time.Duration) []candidate {
	var out []candidate
	for i := range s.View.Markets {
		m := &s.View.Markets[i]
		price, ok := m.Price()
		rate, err := p.c.Rate(m.Market.Type)
		if !ok || err != nil || price <= 0 || m.Available() == 0 {
			continue
		}
		bids := []float64{0}
		if p.c.BidEvicts {
			bids = bids[:0]
			for _, r := range history.Ratios {
				bids = append(bids, math.Ceil(r*price/priceStep-1e-9)*priceStep)
			}
		}
		for _, bid := range bids {
			r := risk(p.c, s.View, m, bid)
			if r.Samples < minSamples && p.c.BidEvicts || r.Samples == 0 {
				continue
			}
			work := min(r.Up, h) - p.c.Setup
			if work <= 0 {
				continue
			}
			out = append(out, candidate{m: m, bid: bid, rate: rate, frac: work.Hours() / h.Hours(), cost: p.cost(price, r, h)})
		}
	}
	return out
}

// risk is a machine's eviction risk in market m at bid (bid markets) or
// from the market's availability trace.
func risk(c Config, v history.View, m *history.Market, bid float64) history.Risk {
	if !c.BidEvicts {
		return c.Estimator.AvailRisk(v, m)
	}
	price, ok := m.Price()
	if !ok || price <= 0 {
		return history.Risk{}
	}
	return c.Estimator.BidRisk(v, m, bid/price)
}
