package history

import (
	"sort"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/trace"
)

// View is the past of every market as seen at Now. Its slices are cut at
// Now with a full slice expression (s[:i:i]), so nothing reachable from a
// View was observed after Now: a policy that gets only Views cannot look
// ahead, whatever its code does.
type View struct {
	Now     time.Time
	Markets []Market
}

// Market is one market's past.
type Market struct {
	Market   market.Market
	OnDemand float64
	// Prices holds the price changes up to Now; the last is in force.
	Prices []trace.Point
	// Avail holds the availability counts up to Now (a per-second market
	// with a preemption trace), of a set of AvailSize machines.
	Avail     []Count
	AvailSize int
}

// Count is an availability count in force from At on.
type Count struct {
	At time.Time
	N  int
}

// Price returns the price in force at Now (false if the market has no
// price yet).
func (m *Market) Price() (float64, bool) {
	if len(m.Prices) == 0 {
		return 0, false
	}
	return m.Prices[len(m.Prices)-1].Price, true
}

// Available returns the availability count in force at Now, or -1 when
// the market has no availability trace.
func (m *Market) Available() int {
	if m.AvailSize == 0 {
		return -1
	}
	if len(m.Avail) == 0 {
		return 0
	}
	return m.Avail[len(m.Avail)-1].N
}

// Lookup returns market mk's past.
func (v View) Lookup(mk market.Market) (*Market, bool) {
	for i := range v.Markets {
		if v.Markets[i].Market == mk {
			return &v.Markets[i], true
		}
	}
	return nil, false
}

// Source is the whole recorded past and future of the markets, which only
// a provider holds: it hands out Views cut at its clock.
type Source struct {
	Prices *trace.Prices
	// Avail is each market's availability, already placed in time; nil
	// for a bid market.
	Avail map[market.Market]*Timeline
}

// Timeline is an availability trace placed at an absolute start.
type Timeline struct {
	Counts []Count
	Size   int
	End    time.Time
}

// Place puts an availability trace's first tick at start.
func Place(a *trace.Availability, start time.Time) *Timeline {
	tl := &Timeline{Size: a.Size, End: start.Add(a.End)}
	for i, off := range a.Offsets {
		tl.Counts = append(tl.Counts, Count{At: start.Add(off), N: a.Counts[i]})
	}
	return tl
}

// At returns the count in force at t.
func (tl *Timeline) At(t time.Time) int {
	i := sort.Search(len(tl.Counts), func(i int) bool { return tl.Counts[i].At.After(t) })
	if i == 0 {
		return 0
	}
	return tl.Counts[i-1].N
}

// Cut returns the View at now.
func (s *Source) Cut(now time.Time) View {
	v := View{Now: now, Markets: make([]Market, 0, len(s.Prices.Series))}
	for _, ser := range s.Prices.Series {
		n := sort.Search(len(ser.Points), func(i int) bool { return ser.Points[i].At.After(now) })
		m := Market{Market: ser.Market, OnDemand: ser.OnDemand, Prices: ser.Points[:n:n]}
		if tl := s.Avail[ser.Market]; tl != nil {
			k := sort.Search(len(tl.Counts), func(i int) bool { return tl.Counts[i].At.After(now) })
			m.Avail, m.AvailSize = tl.Counts[:k:k], tl.Size
		}
		v.Markets = append(v.Markets, m)
	}
	return v
}

// MeanTimeToExceed is how long, on average, a machine bid at bid in
// market m ran before the price rose above its bid, over the last Window
// of m's past: the time the price spent at or below the bid over the
// number of times it rose past it, plus half a rise (Jeffreys' prior, as
// for the availability traces), so that a market not seen above the bid
// is not taken for one that never will be.
func MeanTimeToExceed(v View, m *Market, bid float64) time.Duration {
	from := v.Now.Add(-Window)
	var below time.Duration
	rises := 0.5
	for i, p := range m.Prices {
		end := v.Now
		if i+1 < len(m.Prices) {
			end = m.Prices[i+1].At
		}
		if !end.After(from) || p.Price > bid {
			continue
		}
		start := p.At
		if start.Before(from) {
			start = from
		}
		below += end.Sub(start)
		if i+1 < len(m.Prices) && m.Prices[i+1].Price > bid {
			rises++
		}
	}
	return time.Duration(float64(below) / rises)
}
