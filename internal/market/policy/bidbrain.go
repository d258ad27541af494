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
// estimated from its past: the expected cost counts the chance that the
// period ends in an eviction and is then free, the expected work what
// scaling costs (a new machine's boot and handoff, the drain of a leaving
// one, the re-plan either causes). Just before an allocation's billing
// hour ends it releases the allocation if its work per dollar has fallen
// below the rest's or a new machine's (docs/design/market.md, "BidBrain's
// objective").
type BidBrain struct{ c Config }

func (p *BidBrain) Name() string { return "bidbrain" }

// minSamples is one day of the estimator's samples (every period/12): a
// market with less past is not bought from.
const minSamples = 12 * 24

// priceStep is the smallest price increment on EC2's spot market.
const priceStep = 0.0001

// outlook is what one machine is expected to cost and do over the next
// billing period.
type outlook struct {
	cost    float64 // dollars
	work    float64 // the share of the period it works
	evicted float64 // P(an eviction notice within the period)
}

// outlook reads a machine's risk r at price into its expected dollars and
// working share over the period. setupLeft is what remains of its setup
// (all of it for a new machine); young says it is in its first hour.
func (p *BidBrain) outlook(r history.Risk, price float64, setupLeft time.Duration, young bool) outlook {
	h, t := p.c.Period, p.c.Terms
	// Gone (the notice run out) before the period ends: the period is
	// free where an eviction makes it so.
	gone := r.Before(h - p.c.Notice)
	o := outlook{evicted: r.Evicted()}
	switch {
	case t.Hourly && t.FreeEvicted, !t.Hourly && t.FreeFirstHour && young:
		o.cost = (1 - gone) * price * h.Hours()
	case t.Hourly:
		o.cost = price * h.Hours()
	default: // per second until it is gone
		o.cost = price * r.Clamped(-p.c.Notice, h).Hours()
	}
	// It works from the end of its setup until its drain starts, a notice
	// (or the period's end) later.
	o.work = r.Clamped(p.c.Drain+setupLeft-p.c.Notice, h-setupLeft).Hours() / h.Hours()
	return o
}

// unit is one allocation (or the reliable tier) and what it is expected
// to cost and contribute over the period.
type unit struct {
	class    market.Class
	since    time.Time // when the allocation was requested: its billing hours start there
	count    float64   // machines
	rate     float64   // their worker updates per hour
	upRate   float64   // the same, weighted by each machine's expected working share
	cost     float64   // expected dollars over the period
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
	units := p.held(s, rel)
	fp := footprint{left: s.Job.Total - s.Job.Done}
	for _, u := range units {
		fp.add(u, 1)
	}
	cands := p.candidates(s)
	n := live(s.Held, market.Transient)
	plan.Release = p.release(s, units, &fp, cands, n)
	plan.Acquire = append(plan.Acquire, p.acquire(n-len(plan.Release), &fp, cands)...)
	plan.Wake = p.nextDue(s)
	return plan
}

// work is the expected updates over the period: the planner's throughput
// with the machines held, scaled by the share of their compute expected
// to be working (machines leave on eviction and are paid before they
// work), and no more than the job has left. The cap is what trims the
// footprint at the end of a job: capacity that would idle through a paid
// hour is worth nothing.
func (f footprint) work(c Config) float64 {
	if f.wR+f.wT <= 0 {
		return 0
	}
	return min(f.left, c.Throughput(f.nR, f.nT, f.wR, f.wT)*c.Period.Hours()*f.up/(f.wR+f.wT))
}

// held turns the machines held into units: the reliable tier as one, each
// transient allocation as one, each machine read at its (fixed) bid
// against the current price.
func (p *BidBrain) held(s rm.State, rel *history.Market) []unit {
	relRate, _ := p.c.Rate(p.c.Reference)
	n := float64(p.c.Reliable)
	units := []unit{{class: market.Reliable, count: n, rate: n * relRate, upRate: n * relRate, cost: n * rel.OnDemand * p.c.Period.Hours()}}
	byAlloc := map[int64]*unit{}
	// Machines of one market, bid and request time look alike: read each
	// such group's risk once.
	type look struct {
		mk        market.Market
		bid       float64
		requested time.Time
	}
	seen := map[look]outlook{}
	for _, m := range s.Held {
		if m.Class != market.Transient || m.Noticed {
			continue
		}
		mk, ok := s.View.Lookup(m.Market)
		if !ok {
			continue
		}
		price, okp := mk.Price()
		rate, err := p.c.Rate(m.Market.Type)
		if !okp || err != nil {
			continue
		}
		u := byAlloc[m.Alloc]
		if u == nil {
			u = &unit{class: market.Transient, since: m.Requested}
			byAlloc[m.Alloc] = u
		}
		k := look{m.Market, m.Bid, m.Requested}
		o, ok := seen[k]
		if !ok {
			age := s.View.Now.Sub(m.Requested)
			o = p.outlook(risk(p.c, s.View, mk, m.Bid), price, max(p.c.Setup-age, 0), age < time.Hour)
			seen[k] = o
		}
		u.count++
		u.rate += rate
		u.upRate += rate * o.work
		u.cost += o.cost
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

// release drops the allocations that are due (their charged time about
// to be extended) that no longer pay their way at the cost per update the
// job can reach (dropping them lowers it), or that a run of new machines
// in their place would beat (replacing them lowers it more).
func (p *BidBrain) release(s rm.State, units []unit, fp *footprint, cands []candidate, held int) []market.MachineID {
	var out []market.MachineID
	lambda := math.NaN()
	for _, u := range units {
		if u.class != market.Transient || !p.due(s.View.Now, u.since) {
			continue
		}
		if math.IsNaN(lambda) {
			lambda, _ = p.choose(*fp, cands, held)
		}
		rest := *fp
		rest.add(u, -1)
		own := (lambda*(fp.work(p.c)-rest.work(p.c)) - u.cost) / u.count
		if _, _, best := p.bestRun(&rest, cands, held-int(u.count), lambda); own < 0 || best > own {
			*fp = rest
			held -= int(u.count)
			out = append(out, u.machines...)
		}
	}
	return out
}

// due says an allocation requested at since may be released now without
// paying for time it would not use: in an hourly market, within the
// drain before the end of its billing hour (the drain is done and the
// machine terminated before the next hour starts); per second, at any
// time, but not within the first hour where an eviction then would make
// the hour free.
func (p *BidBrain) due(now, since time.Time) bool {
	h, age := p.c.Period, now.Sub(since)
	switch {
	case p.c.Terms.Hourly:
		return age > 0 && h-age%h <= p.c.Drain
	case p.c.Terms.FreeFirstHour:
		return age >= time.Hour-p.c.Drain
	}
	return true
}

// nextDue is the earliest time an allocation becomes due.
func (p *BidBrain) nextDue(s rm.State) time.Time {
	var next time.Time
	h, now := p.c.Period, s.View.Now
	for _, m := range s.Held {
		if m.Class != market.Transient || m.Noticed {
			continue
		}
		var at time.Time
		switch age := now.Sub(m.Requested); {
		case p.c.Terms.Hourly:
			at = m.Requested.Add((age/h+1)*h - p.c.Drain)
			if !at.After(now) {
				at = at.Add(h)
			}
		case p.c.Terms.FreeFirstHour && age < time.Hour-p.c.Drain:
			at = m.Requested.Add(time.Hour - p.c.Drain)
		default:
			continue
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}

// bestRun is the run of new machines that saves the most per machine
// over doing its work at lambda dollars per update, with held machines
// already held: the candidate, the run's length and the saving per
// machine (-Inf if no run saves anything). Ranking by the saving per
// machine rather than by dollars per update is Dinkelbach's form of the
// ratio objective under the job's parallelism: when machines are what is
// short, a machine that does much work a little dearer beats one that
// does little work a little cheaper.
func (p *BidBrain) bestRun(fp *footprint, cands []candidate, held int, lambda float64) (int, int, float64) {
	best, bestK, bestSave := -1, 0, math.Inf(-1)
	for i, c := range cands {
		for k := 1; k <= p.c.Max-held; k *= 2 {
			g := p.gain(fp, c, float64(k))
			if save := (lambda*g - float64(k)*c.cost) / float64(k); g > 0 && save > 0 && save > bestSave+1e-12 {
				best, bestK, bestSave = i, k, save
			}
		}
	}
	return best, bestK, bestSave
}

// candidate is one way to buy a transient machine.
type candidate struct {
	m    *history.Market
	bid  float64
	rate float64 // worker updates per hour when working
	outlook
}

// acquire buys the runs choose picks.
func (p *BidBrain) acquire(held int, fp *footprint, cands []candidate) []market.Request {
	if held >= p.c.Max {
		return nil
	}
	_, runs := p.choose(*fp, cands, held)
	out := make([]market.Request, 0, len(runs))
	for _, r := range runs {
		c := cands[r.cand]
		fp.add(c.unit(float64(r.k)), 1)
		out = append(out, market.Request{Market: c.m.Market, Class: market.Transient, Count: r.k, Bid: c.bid})
	}
	return out
}

// run is k machines of candidate cand.
type run struct{ cand, k int }

// choose finds the cost per update lambda the job can reach from
// footprint fp and the runs of new machines that reach it, by
// Dinkelbach's method for a ratio objective: at a trial lambda, add
// greedily the run that saves the most per machine over doing its work
// at lambda, while one saves anything and machines are left; the
// footprint's cost per update with those runs is the next lambda; stop
// when lambda no longer falls. Starting from the footprint's own cost
// per update, lambda only falls, and the runs chosen at the last lambda
// are the answer. Runs of 1, 2, 4, ... machines are tried because the
// planner's throughput is not concave: a stage that pays only past a
// number of machines is reached by a run, never by one machine at a time.
func (p *BidBrain) choose(fp footprint, cands []candidate, held int) (float64, []run) {
	lambda := fp.cost / fp.work(p.c)
	var runs []run
	// Lambda falls strictly from pass to pass, so no choice of runs comes
	// back; the bound is only a guard.
	for range 2 * (len(cands) + 1) {
		trial, n := fp, held
		var chosen []run
		for n < p.c.Max {
			best, k, _ := p.bestRun(&trial, cands, n, lambda)
			if best < 0 {
				break
			}
			trial.add(cands[best].unit(float64(k)), 1)
			n += k
			chosen = append(chosen, run{best, k})
		}
		next := trial.cost / trial.work(p.c)
		if !(next < lambda*(1-1e-9)) {
			break
		}
		lambda, runs = next, chosen
	}
	return lambda, runs
}

// gain is the expected updates over the period that k more machines of
// candidate c add: the planner's marginal throughput with the machines
// held (so that nothing is bought past the job's bottleneck) over their
// expected working share, less the re-plans their arrival causes and
// their eviction may cause (each a stage-switch pause of the whole job).
func (p *BidBrain) gain(fp *footprint, c candidate, k float64) float64 {
	now := p.c.Throughput(fp.nR, fp.nT, fp.wR, fp.wT)
	more := p.c.Throughput(fp.nR, fp.nT+k, fp.wR, fp.wT+k*c.rate)
	base := fp.work(p.c)
	replan := now * p.c.SwitchPause.Hours() * (1 + c.evicted)
	return min(fp.left, base+(more-now)*p.c.Period.Hours()*c.work) - base - replan
}

func (c candidate) unit(k float64) unit {
	return unit{class: market.Transient, count: k, rate: k * c.rate, upRate: k * c.rate * c.work, cost: k * c.cost}
}

// candidates lists every market with a known rate and enough past, at
// every bid of the grid (bid markets) or at the spot price.
func (p *BidBrain) candidates(s rm.State) []candidate {
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
			if o := p.outlook(r, price, p.c.Setup, true); o.work > 0 {
				out = append(out, candidate{m: m, bid: bid, rate: rate, outlook: o})
			}
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
		return history.Risk{Horizon: c.Period}
	}
	return c.Estimator.BidRisk(v, m, bid/price)
}
