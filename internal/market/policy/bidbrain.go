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
//
// At the job's start it also chooses how the job survives evictions:
// with the reliable tier (Proteus's design), or without one, every
// machine a server and a worker that drains on notice, with periodic
// checkpoints for the case that no machine is left to drain to
// (docs/design/market.md, "BidBrain without a reliable tier"): whichever
// the objective expects to do an update for less.
type BidBrain struct {
	c      Config
	design design
}

// design is how a BidBrain job survives losing machines.
type design int

const (
	undecided design = iota
	tiered
	elastic
)

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
	evicted  float64   // P(an eviction notice within the period), of each machine
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
	// elastic: the job has no reliable tier; allGone is then the chance
	// that every transient allocation gets its eviction notice within
	// the period, read as that of the allocation least likely to (as if
	// evictions were perfectly correlated: it never under-states the
	// risk); 1 with none held.
	elastic bool
	allGone float64
	// unpaid is the part of cost an elastic footprint does not pay: the
	// tier it does without (BidBrain.footprint).
	unpaid float64
}

func (f *footprint) add(u unit, sign float64) {
	if f.elastic && u.class == market.Transient && sign > 0 {
		f.allGone = min(f.allGone, u.evicted)
	}
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
	el := p.Elastic(s)
	var plan rm.Plan
	if !el {
		plan.Acquire = topUp(s.Held, market.Reliable, p.c.Reliable, rel, 0)
	}
	units := p.held(s, rel, el)
	fp := p.footprint(s, units, el)
	cands := p.candidates(s, false)
	n := live(s.Held, market.Transient)
	var hold bool
	plan.Release, hold = p.release(s, units, &fp, cands, n)
	plan.Acquire = append(plan.Acquire, p.acquire(n-len(plan.Release), &fp, cands)...)
	plan.Wake = p.nextDue(s)
	if el && s.Job.Working {
		every := Daly(p.c.Checkpoint, p.untilAllGone(fp.allGone))
		next := s.Job.CheckpointAt.Add(every)
		if hold {
			// Ask again once the checkpoint is written, within the
			// release window.
			next = s.View.Now.Add(p.c.Checkpoint + (p.c.Drain-2*p.c.Checkpoint)/2)
		}
		if hold || !s.View.Now.Before(next) {
			plan.Checkpoint = true
			if !hold {
				next = s.View.Now.Add(every)
			}
		}
		if plan.Wake.IsZero() || next.Before(plan.Wake) {
			plan.Wake = next
		}
	}
	return plan
}

// footprint sums the units held.
//
// An elastic footprint carries the tier it does without as a cost it does
// not pay: the job's hours are worth what the tier would cost. Without
// it the cost per update would not fall with more machines (there is no
// fixed cost to spread), and one machine that needs no setup and is
// seldom evicted would do an update for less than any machine bought
// beside it: the job ran on it alone for sixteen hours (the 4-node
// us-east-2a trace). With it BidBrain sizes the job as it does with the
// tier, and the design choice compares the two on the same footing.
func (p *BidBrain) footprint(s rm.State, units []unit, el bool) footprint {
	fp := footprint{left: s.Job.Total - s.Job.Done, elastic: el, allGone: 1}
	if rel, ok := reliableMarket(s.View, p.c.Reference); el && ok {
		fp.unpaid = float64(p.c.Reliable) * rel.OnDemand * p.c.Period.Hours()
		fp.cost = fp.unpaid
	}
	for _, u := range units {
		fp.add(u, 1)
	}
	return fp
}

// Elastic says whether the job runs without the reliable tier, choosing
// once, at the first decision, the design whose footprint the objective
// expects to do an update for less (Config.Elastic nil or Config.Design
// DesignTiers: always tiered; DesignElastic: never). The choice is kept:
// a running job does not change how it holds its state.
//
// The designs are compared on the markets' prices and risks with their
// capacity set aside: at a start inside an outage (an availability trace
// at zero) neither design buys a transient machine until it ends, so
// what decides between them is what each does once it has. Compared on
// what can be bought at once, the elastic footprint was empty and the
// tier won by default: it then trained alone at on-demand's cost per
// update through the outage, where the elastic job waits as it does
// through any outage (the 4-node us-east-2a trace: 1.1-2.0 of
// checkpoint-restart's dollars on three starts of five, against 0.8-0.9
// elastic, in about the same hours).
func (p *BidBrain) Elastic(s rm.State) bool {
	if p.design == undecided {
		p.design = tiered
		switch {
		case p.c.Elastic == nil || p.c.Design == DesignTiers:
		case p.c.Design == DesignElastic:
			p.design = elastic
		default:
			rel, ok := reliableMarket(s.View, p.c.Reference)
			cands := p.candidates(s, true)
			n := live(s.Held, market.Transient)
			if ok {
				withTier, _ := p.choose(p.footprint(s, p.held(s, rel, false), false), cands, n)
				fp := p.footprint(s, p.held(s, rel, true), true)
				_, runs := p.choose(fp, cands, n)
				for _, r := range runs {
					fp.add(cands[r.cand].unit(float64(r.k)), 1)
				}
				// What the elastic footprint is expected to pay per
				// update, its unpaid tier left out.
				without := (fp.cost - fp.unpaid) / fp.work(p.c)
				if without < withTier || math.IsNaN(withTier) && !math.IsNaN(without) {
					p.design = elastic
				}
			}
		}
	}
	return p.design == elastic
}

// untilAllGone is the mean time until every machine of an elastic job is
// gone at once, from the chance allGone that it happens within the
// period; the checkpoint policy's long default when it is nil.
func (p *BidBrain) untilAllGone(allGone float64) time.Duration {
	if allGone <= 0 {
		return 2 * history.Window
	}
	return time.Duration(float64(time.Hour) / lossesPerHour(allGone, p.c.Period))
}

// lossesPerHour is the rate of a Poisson process of total losses that
// happens within period with chance allGone (capped below 1).
func lossesPerHour(allGone float64, period time.Duration) float64 {
	return -math.Log1p(-min(allGone, 0.999)) / period.Hours()
}

// kept is the share of its work an elastic job keeps: it loses, per
// total loss, the work since its last checkpoint and the time to read the
// checkpoint back, and pays for each checkpoint δ; at Young's interval
// √(2δM) the first and the checkpoints together cost √(2δ/M) of the time,
// the read back δ/M (M the mean time to a total loss).
func (f footprint) kept(c Config) float64 {
	if !f.elastic || f.allGone <= 0 {
		return 1
	}
	rate, d := lossesPerHour(f.allGone, c.Period), c.Checkpoint.Hours()
	return max(0, 1-math.Sqrt(2*d*rate)-d*rate)
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
	return min(f.left, f.rate(c, f.nT, f.wT)*c.Period.Hours()*f.up/(f.wR+f.wT)*f.kept(c))
}

// rate is the planner's throughput with the footprint's reliable
// machines and nT transient ones of summed worker rate wT.
func (f footprint) rate(c Config, nT, wT float64) float64 {
	if f.elastic {
		return c.Elastic(nT, wT)
	}
	return c.Throughput(f.nR, nT, f.wR, wT)
}

// held turns the machines held into units: the reliable tier as one
// (none when the job is elastic), each transient allocation as one, each
// machine read at its (fixed) bid against the current price.
func (p *BidBrain) held(s rm.State, rel *history.Market, el bool) []unit {
	var units []unit
	if !el {
		relRate, _ := p.c.Rate(p.c.Reference)
		n := float64(p.c.Reliable)
		units = append(units, unit{class: market.Reliable, count: n, rate: n * relRate, upRate: n * relRate, cost: n * rel.OnDemand * p.c.Period.Hours()})
	}
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
		u.evicted = o.evicted
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
// job can reach (dropping them lowers it), that a run of new machines in
// their place would beat (replacing them lowers it more), or whose
// updates would cost more than on demand (during a spike the footprint
// held is dear as a whole, and the ratio it reaches would keep them).
//
// An elastic job's last working machines hold its state: they go only
// from a checkpoint taken within their release window, so that little
// is rolled back (the job restarts from it on the machines bought in
// their place). When they are due and no such checkpoint exists, hold
// says so (the plan then checkpoints, and the policy is asked again
// once the checkpoint is written); when a checkpoint is too slow to fit
// in the window (Config.Checkpoint at least half the drain), they stay.
func (p *BidBrain) release(s rm.State, units []unit, fp *footprint, cands []candidate, held int) (out []market.MachineID, hold bool) {
	lambda := math.NaN()
	gone := make([]bool, len(units))
	running := map[market.MachineID]bool{} // what othersHold looks for
	for _, h := range s.Held {
		if fp.elastic && h.Class == market.Transient && h.Running() {
			running[h.ID] = true
		}
	}
	ceiling := p.ceiling(s.View)
	for i, u := range units {
		if u.class != market.Transient || !p.due(s.View.Now, u.since) {
			continue
		}
		last := fp.elastic && !p.othersHold(units, gone, i, running)
		if last && (2*p.c.Checkpoint >= p.c.Drain || hold) {
			continue
		}
		if math.IsNaN(lambda) {
			lambda, _ = p.choose(*fp, cands, held)
		}
		rest := *fp
		rest.add(u, -1)
		if rest.elastic {
			rest.allGone = 1
			for k, o := range units {
				if k != i && !gone[k] && o.class == market.Transient {
					rest.allGone = min(rest.allGone, o.evicted)
				}
			}
		}
		own := (lambda*(fp.work(p.c)-rest.work(p.c)) - u.cost) / u.count
		if _, _, best := p.bestRun(&rest, cands, held-int(u.count), lambda); own < 0 || best > own || u.cost > ceiling*u.upRate {
			if last && s.Job.CheckpointAt.Before(s.View.Now.Add(-p.c.Drain)) {
				hold = true // checkpoint first
				continue
			}
			*fp = rest
			held -= int(u.count)
			gone[i] = true
			out = append(out, u.machines...)
		}
	}
	return out, hold
}

// othersHold says whether, with unit i released (and those gone), an
// elastic job still has a working machine to take its slots.
func (p *BidBrain) othersHold(units []unit, gone []bool, i int, running map[market.MachineID]bool) bool {
	for k, u := range units {
		if k == i || gone[k] {
			continue
		}
		for _, id := range u.machines {
			if running[id] {
				return true
			}
		}
	}
	return false
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
//
// An elastic job has no fixed cost to spread over its machines: its cost
// per update is the same on one machine as on a hundred of a kind, and
// Dinkelbach's method, which adds only what lowers it, would stop at
// one. At equal cost per update the job is better off finishing sooner,
// so for an elastic footprint a run that saves nothing (within a
// rounding tolerance) is taken too.
func (p *BidBrain) bestRun(fp *footprint, cands []candidate, held int, lambda float64) (int, int, float64) {
	best, bestK, bestSave := -1, 0, math.Inf(-1)
	floor := 0.0
	if fp.elastic {
		floor = -1e-12
	}
	for i, c := range cands {
		for k := 1; k <= p.c.Max-held; k *= 2 {
			g := p.gain(fp, c, float64(k))
			if save := (lambda*g - float64(k)*c.cost) / float64(k); g > 0 && save > floor && save > bestSave+1e-12 {
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
	if fp.work(p.c) <= 0 && held < p.c.Max {
		// Nothing held works (an elastic job's start, or after a total
		// loss): start from the best lone machine, a footprint whose
		// ratio Dinkelbach's method can start from.
		lambda = math.Inf(1)
		for i, c := range cands {
			if g := p.gain(&fp, c, 1); g > 0 && (fp.cost+c.cost)/g < lambda {
				lambda, runs = (fp.cost+c.cost)/g, []run{{i, 1}}
			}
		}
	}
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
		if fp.elastic && len(chosen) > 0 && next <= lambda*(1+1e-9) && !(next < lambda*(1-1e-9)) {
			// Machines that keep the cost per update where it is
			// (bestRun): taken, and the search ends.
			return next, append(runs[:0:0], chosen...)
		}
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
	if fp.elastic {
		// No stage to switch: a machine joins and drains without
		// stopping the job.
		more := *fp
		more.add(c.unit(k), 1)
		return more.work(p.c) - fp.work(p.c)
	}
	now := p.c.Throughput(fp.nR, fp.nT, fp.wR, fp.wT)
	more := p.c.Throughput(fp.nR, fp.nT+k, fp.wR, fp.wT+k*c.rate)
	base := fp.work(p.c)
	replan := now * p.c.SwitchPause.Hours() * (1 + c.evicted)
	return min(fp.left, base+(more-now)*p.c.Period.Hours()*c.work) - base - replan
}

func (c candidate) unit(k float64) unit {
	return unit{class: market.Transient, count: k, rate: k * c.rate, upRate: k * c.rate * c.work, cost: k * c.cost, evicted: c.evicted}
}

// candidates lists every market with a known rate and enough past, at
// every bid of the grid (bid markets) or at the spot price, priced at
// most at its on-demand price and expected to do an update for no more
// than an on-demand machine does: during a spike a machine dearer than
// on demand is never worth buying, although the footprint held then may
// make the ratio the job can reach that high. A market with no capacity
// now is left out, unless anyCapacity (the design choice, Elastic).
func (p *BidBrain) candidates(s rm.State, anyCapacity bool) []candidate {
	var out []candidate
	ceiling := p.ceiling(s.View)
	for i := range s.View.Markets {
		m := &s.View.Markets[i]
		price, ok := m.Price()
		rate, err := p.c.Rate(m.Market.Type)
		if !ok || err != nil || price <= 0 || m.Available() == 0 && !anyCapacity || m.OnDemand > 0 && price > m.OnDemand {
			continue // a machine dearer than on demand is not bought
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
			if o := p.outlook(r, price, p.c.Setup, true); o.work > 0 && o.cost <= ceiling*rate*o.work {
				out = append(out, candidate{m: m, bid: bid, rate: rate, outlook: o})
			}
		}
	}
	return out
}

// ceiling is the dollars an update costs on demand, on the type with the
// lowest on-demand price per update: what no transient machine is bought
// or kept above.
func (p *BidBrain) ceiling(v history.View) float64 {
	c := math.Inf(1)
	for _, m := range v.Markets {
		if r, err := p.c.Rate(m.Market.Type); err == nil && r > 0 && m.OnDemand > 0 {
			c = min(c, m.OnDemand/r)
		}
	}
	return c
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
