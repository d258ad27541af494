package history

import (
	"math"
	"sort"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
)

// Ratios are the bids, as multiples of the price when the bid is placed,
// at which the bid-market estimator keeps statistics: from "evicted at any
// rise" to "rarely evicted". A search grid for BidBrain, not a fitted
// value; other ratios are interpolated.
var Ratios = []float64{1, 1.1, 1.25, 1.5, 2, 3, 5, 10, 20}

// Window is how far back the estimators look: the 90 days of history that
// EC2's DescribeSpotPriceHistory returns.
const Window = 90 * 24 * time.Hour

// Risk is a market's estimated eviction risk over one horizon.
type Risk struct {
	// P is the probability of an eviction within the horizon.
	P float64
	// Up is the expected time a machine is there within the horizon:
	// until its eviction plus the notice, or the whole horizon.
	Up time.Duration
	// Samples is how many past windows the estimate rests on (0: none).
	Samples int
}

// Estimator estimates eviction risks from Views, caching what it computed
// per market so that many decisions (and many replays of one trace) do
// not recompute the past. It only ever reads the Views it is given, and a
// sample enters its statistics only once its whole horizon is in the past
// of the View that computed it.
type Estimator struct {
	Horizon time.Duration
	Notice  time.Duration
	step    time.Duration

	mu   sync.Mutex
	bids map[market.Market]*bidStats
}

// NewEstimator returns an estimator over horizon h (the billing period)
// for a market whose notice is notice. Samples start every h/12.
func NewEstimator(h, notice time.Duration) *Estimator {
	return &Estimator{Horizon: h, Notice: notice, step: h / 12, bids: map[market.Market]*bidStats{}}
}

// bidStats holds, for sample starts origin + k·step, prefix sums over k of
// evictions and uptimes at each ratio.
type bidStats struct {
	origin  time.Time
	evicted [][]float64 // [ratio][k+1]
	up      [][]float64 // [ratio][k+1], hours
}

// BidRisk is the risk, over the horizon from v.Now, of a machine bid at
// ratio times the current price in market m, from the first passages of
// the price above that ratio in the last Window of m's past.
func (e *Estimator) BidRisk(v View, m *Market, ratio float64) Risk {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.bids[m.Market]
	if st == nil {
		if len(m.Prices) == 0 {
			return Risk{}
		}
		st = &bidStats{origin: m.Prices[0].At, evicted: make([][]float64, len(Ratios)), up: make([][]float64, len(Ratios))}
		for j := range Ratios {
			st.evicted[j], st.up[j] = []float64{0}, []float64{0}
		}
		e.bids[m.Market] = st
	}
	hi := 0 // samples whose horizon ended by Now
	if d := v.Now.Sub(st.origin.Add(e.Horizon)); d >= 0 {
		hi = int(d/e.step) + 1
	}
	e.extend(st, m, hi)
	if hi > len(st.evicted[0])-1 {
		hi = len(st.evicted[0]) - 1
	}
	lo := int(math.Ceil(float64(v.Now.Add(-Window).Sub(st.origin)) / float64(e.step)))
	lo = max(0, min(lo, hi))
	n := hi - lo
	if n == 0 {
		return Risk{}
	}
	j := sort.SearchFloat64s(Ratios, ratio)
	at := func(j int) (float64, float64) {
		return (st.evicted[j][hi] - st.evicted[j][lo]) / float64(n), (st.up[j][hi] - st.up[j][lo]) / float64(n)
	}
	var p, up float64
	switch {
	case j >= len(Ratios):
		p, up = at(len(Ratios) - 1)
	case Ratios[j] == ratio || j == 0:
		p, up = at(j)
	default:
		p0, u0 := at(j - 1)
		p1, u1 := at(j)
		f := (ratio - Ratios[j-1]) / (Ratios[j] - Ratios[j-1])
		p, up = p0+f*(p1-p0), u0+f*(u1-u0)
	}
	return Risk{P: p, Up: time.Duration(up * float64(time.Hour)), Samples: n}
}

// extend computes samples up to (not including) hi from m's past, which
// covers their whole horizons.
func (e *Estimator) extend(st *bidStats, m *Market, hi int) {
	pts := m.Prices
	for k := len(st.evicted[0]) - 1; k < hi; k++ {
		s := st.origin.Add(time.Duration(k) * e.step)
		end := s.Add(e.Horizon)
		i := sort.Search(len(pts), func(i int) bool { return pts[i].At.After(s) })
		p0 := pts[max(i-1, 0)].Price
		first := make([]time.Duration, len(Ratios))
		for j := range first {
			first[j] = -1
		}
		for ; i < len(pts) && pts[i].At.Before(end); i++ {
			for j, r := range Ratios {
				if first[j] < 0 && pts[i].Price > r*p0 {
					first[j] = pts[i].At.Sub(s)
				}
			}
		}
		for j := range Ratios {
			ev, up := 0.0, e.Horizon
			if first[j] >= 0 {
				ev, up = 1, min(first[j]+e.Notice, e.Horizon)
			}
			st.evicted[j] = append(st.evicted[j], st.evicted[j][k]+ev)
			st.up[j] = append(st.up[j], st.up[j][k]+up.Hours())
		}
	}
}

// AvailRisk is the risk, over the horizon from v.Now, of a machine in a
// market whose evictions come from its availability trace: a Poisson
// rate λ = (fraction of a fleet evicted + ½) / (hours the market had
// capacity), over the last Window; the ½ is Jeffreys' prior, so that a
// market with no eviction seen yet is not taken for a safe one.
func (e *Estimator) AvailRisk(v View, m *Market) Risk {
	if m.AvailSize == 0 || len(m.Avail) == 0 {
		return Risk{}
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
		return Risk{P: 1, Samples: 0}
	}
	lambda := (lost + 0.5) / hours
	h := e.Horizon.Hours()
	n := min(e.Notice.Hours(), h)
	p := 1 - math.Exp(-lambda*h)
	up := n + (1-math.Exp(-lambda*(h-n)))/lambda
	return Risk{P: p, Up: time.Duration(up * float64(time.Hour)), Samples: len(m.Avail)}
}
