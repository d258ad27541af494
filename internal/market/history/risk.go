package history

import (
	"math"
	"sort"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/trace"
)

// Ratios are the bids, as multiples of the price when the bid is placed,
// at which the bid-market estimator keeps statistics: from "evicted at any
// rise" to "rarely evicted". A search grid for BidBrain, not a fitted
// value; other ratios are interpolated.
var Ratios = []float64{1, 1.1, 1.25, 1.5, 2, 3, 5, 10, 20}

// Window is how far back the estimators look: the 90 days of history that
// EC2's DescribeSpotPriceHistory returns.
const Window = 90 * 24 * time.Hour

// Level is the width of the price levels the bid estimator conditions
// on: a sample's start price and the price now fall in the same level
// when they are within a factor of Level (counted from the on-demand
// price). It is the bid grid's finest step.
const Level = 1.1

// Estimator estimates eviction risks from Views. For each market it
// keeps, per sample start (every Horizon/12 of the past) and bid ratio,
// the time to the first price above the bid, and, over the window of the
// last View it was asked about, the histograms of those times by the
// price level the sample started at and whether the price had just
// moved then, moved sample by sample as the View
// moves, so that many decisions (and many replays of one trace) do not
// recompute the past. It only ever reads the Views it is given, and a
// sample enters its statistics only once its whole horizon is in the past
// of the View that computed it.
type Estimator struct {
	Horizon time.Duration
	step    time.Duration

	mu   sync.Mutex
	bids map[market.Market]*bidStats
}

// NewEstimator returns an estimator over horizon h (the billing period).
func NewEstimator(h time.Duration) *Estimator {
	return &Estimator{Horizon: h, step: h / 12, bids: map[market.Market]*bidStats{}}
}

// bidStats holds, for sample starts origin + k·step, the start price's
// level and the first passages at each ratio, and their histograms over
// samples [lo, hi) by level.
type bidStats struct {
	origin   time.Time
	onDemand float64
	level    []int16   // [k]
	fresh    []bool    // [k]: the price changed within a step before the start
	first    [][]int32 // [ratio][k]: seconds to the first passage, or -1 (none within the horizon)
	lo, hi   int
	levels   map[cell]*levelStats
	total    [2]int            // samples in [lo, hi) by freshness (stale, fresh)
	read     map[readKey]*Risk // histograms read as Risks, until the window moves
}

// cell is a price level and whether the price had just changed.
type cell struct {
	level int16
	fresh bool
}

func fi(fresh bool) int {
	if fresh {
		return 1
	}
	return 0
}

// levelStats is the histograms of the samples that started at one level.
type levelStats struct {
	n    int
	hist [][Bins]tally // [ratio]
}

type readKey struct {
	cell
	ratio int
}

// tally counts first passages in a bin and sums them (seconds).
type tally struct{ n, sum int64 }

// BidRisk is the risk, over the horizon from v.Now, of a machine bid at
// ratio times the current price in market m: the distribution of the
// first passage of the price above that ratio of its start, over the
// sample windows of the last Window of m's past that started at the
// current price's level. Spot prices return to their usual level, so a
// bid just above a high price is safer, and one just above a low price
// riskier, than the market's average says. Of those, it reads the
// windows that started just after a move if the price has just moved
// (within a step), the others if not: prices move in bursts. A level
// with less than a day of samples borrows its nearest levels' until it
// has a day; a kind (just moved or not) with less than a day of samples
// in all is read together with the other.
func (e *Estimator) BidRisk(v View, m *Market, ratio float64) Risk {
	price, ok := m.Price()
	if !ok {
		return Risk{Horizon: e.Horizon}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.bids[m.Market]
	if st == nil {
		st = &bidStats{origin: m.Prices[0].At, onDemand: m.OnDemand, first: make([][]int32, len(Ratios)), levels: map[cell]*levelStats{}, read: map[readKey]*Risk{}}
		e.bids[m.Market] = st
	}
	hi := 0 // samples whose horizon ended by Now
	if d := v.Now.Sub(st.origin.Add(e.Horizon)); d >= 0 {
		hi = int(d/e.step) + 1
	}
	e.extend(st, m, hi)
	hi = min(hi, len(st.level))
	lo := int(math.Ceil(float64(v.Now.Add(-Window).Sub(st.origin)) / float64(e.step)))
	lo = max(0, min(lo, hi))
	e.slide(st, lo, hi)
	if hi == lo {
		return Risk{Horizon: e.Horizon}
	}
	c := cell{st.levelOf(price), justMoved(m, v.Now, e.step)}
	j := sort.SearchFloat64s(Ratios, ratio)
	switch {
	case j >= len(Ratios):
		return e.risk(st, c, len(Ratios)-1)
	case Ratios[j] == ratio || j == 0:
		return e.risk(st, c, j)
	}
	f := (ratio - Ratios[j-1]) / (Ratios[j] - Ratios[j-1])
	return mix(e.risk(st, c, j-1), e.risk(st, c, j), f)
}

func (st *bidStats) levelOf(price float64) int16 {
	ref := st.onDemand
	if !(ref > 0) {
		ref = 1
	}
	if !(price > 0) {
		return math.MinInt16
	}
	return int16(max(math.MinInt16, min(math.MaxInt16, math.Floor(math.Log(price/ref)/math.Log(Level)))))
}

// risk reads ratio j's histograms in cell c (its level, and whether the
// price has just moved), with its nearest levels until they hold a day
// of samples, as a Risk.
func (e *Estimator) risk(st *bidStats, c cell, j int) Risk {
	key := readKey{c, j}
	if r := st.read[key]; r != nil {
		return *r
	}
	day := int(24 * time.Hour / e.step)
	// Samples of the same freshness only, unless there is less than a
	// day of them: a class less than a day deep is not trusted alone.
	classes, most := []bool{c.fresh}, st.total[fi(c.fresh)]
	if most < day {
		classes, most = []bool{false, true}, st.hi-st.lo
	}
	var sum [Bins]tally
	n := 0
	add := func(l int) {
		if l < math.MinInt16 || l > math.MaxInt16 {
			return
		}
		for _, f := range classes {
			if ls := st.levels[cell{int16(l), f}]; ls != nil {
				n += ls.n
				for i, t := range ls.hist[j] {
					sum[i].n += t.n
					sum[i].sum += t.sum
				}
			}
		}
	}
	lv := c.level
	add(int(lv))
	for d := 1; n < day && n < most; d++ {
		add(int(lv) - d)
		add(int(lv) + d)
	}
	r := &Risk{Horizon: e.Horizon, Samples: n}
	for i, t := range sum {
		if t.n > 0 {
			r.bin[i] = bin{p: float64(t.n) / float64(n), mean: float64(t.sum) / float64(t.n)}
		}
	}
	st.read[key] = r
	return *r
}

// slide moves the histograms' window to [lo, hi), adding and removing
// the samples at its edges, or starting over when the windows do not
// overlap.
func (e *Estimator) slide(st *bidStats, lo, hi int) {
	if lo == st.lo && hi == st.hi {
		return
	}
	clear(st.read)
	if lo >= st.hi || hi <= st.lo {
		clear(st.levels)
		st.total = [2]int{}
		st.lo, st.hi = lo, lo
	}
	for ; st.lo < lo; st.lo++ {
		e.count(st, st.lo, -1)
	}
	for ; st.lo > lo; st.lo-- {
		e.count(st, st.lo-1, 1)
	}
	for ; st.hi < hi; st.hi++ {
		e.count(st, st.hi, 1)
	}
	for ; st.hi > hi; st.hi-- {
		e.count(st, st.hi-1, -1)
	}
}

func (e *Estimator) count(st *bidStats, k int, sign int64) {
	key := cell{st.level[k], st.fresh[k]}
	ls := st.levels[key]
	if ls == nil {
		ls = &levelStats{hist: make([][Bins]tally, len(Ratios))}
		st.levels[key] = ls
	}
	ls.n += int(sign)
	st.total[fi(key.fresh)] += int(sign)
	w := e.Horizon.Seconds() / Bins
	for j := range st.first {
		t := st.first[j][k]
		if t < 0 {
			continue
		}
		i := min(int(float64(t)/w), Bins-1)
		ls.hist[j][i].n += sign
		ls.hist[j][i].sum += sign * int64(t)
	}
}

// extend computes samples up to (not including) hi from m's past, which
// covers their whole horizons.
func (e *Estimator) extend(st *bidStats, m *Market, hi int) {
	pts := m.Prices
	for k := len(st.level); k < hi; k++ {
		s := st.origin.Add(time.Duration(k) * e.step)
		end := s.Add(e.Horizon)
		i := sort.Search(len(pts), func(i int) bool { return pts[i].At.After(s) })
		p0 := pts[max(i-1, 0)].Price
		st.level = append(st.level, st.levelOf(p0))
		st.fresh = append(st.fresh, moved(pts[:i], s.Add(-e.step)))
		for j := range Ratios {
			st.first[j] = append(st.first[j], -1)
		}
		for ; i < len(pts) && pts[i].At.Before(end); i++ {
			for j, r := range Ratios {
				if st.first[j][k] < 0 && pts[i].Price > r*p0 {
					st.first[j][k] = int32(pts[i].At.Sub(s) / time.Second)
				}
			}
		}
	}
}

// justMoved says whether m's price changed within step before now: a
// price that has just moved is more likely to move again within the
// hour than one that has stood (spot prices move in bursts), which the
// level alone does not say.
func justMoved(m *Market, now time.Time, step time.Duration) bool {
	return moved(m.Prices, now.Add(-step))
}

// moved says whether the price of pts changed after from (a point that
// repeats the price before it is no change, and the first is none).
func moved(pts []trace.Point, from time.Time) bool {
	for j := len(pts) - 1; j > 0 && pts[j].At.After(from); j-- {
		if pts[j].Price != pts[j-1].Price {
			return true
		}
	}
	return false
}

// AvailRisk is the risk, over the horizon from v.Now, of a machine in a
// market whose evictions come from its availability trace: a Poisson
// process of rate λ = (fraction of a fleet evicted + ½) / (hours the
// market had capacity), over the last Window; the ½ is Jeffreys' prior,
// so that a market with no eviction seen yet is not taken for a safe one.
func (e *Estimator) AvailRisk(v View, m *Market) Risk {
	if m.AvailSize == 0 || len(m.Avail) == 0 {
		return Risk{Horizon: e.Horizon}
	}
	from := v.Now.Add(-Window)
	var lost, hours float64
	for i, c := range m.Avail {
		end := v.Now
		if i+1 < len(m.Avail) {
			end = m.Avail[i+1].At
			if c.N > 0 && m.Avail[i+1].N < c.N && end.After(from) {
				lost += float64(c.N-m.Avail[i+1].N) / float64(c.N)
			}
		}
		if c.N > 0 && end.After(from) {
			start := c.At
			if start.Before(from) {
				start = from
			}
			hours += end.Sub(start).Hours()
		}
	}
	if hours == 0 {
		return Risk{Horizon: e.Horizon}
	}
	return exponential((lost+0.5)/hours/3600, e.Horizon, len(m.Avail))
}
