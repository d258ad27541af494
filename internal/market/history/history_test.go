package history

import (
	"math"
	"sort"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/trace"
)

var t0 = time.Date(2015, 3, 1, 0, 0, 0, 0, time.UTC)

func source(points []trace.Point) *Source {
	mk := market.Market{Zone: "z", Type: "t"}
	return &Source{Prices: &trace.Prices{Series: []*trace.Series{{Market: mk, Points: points, OnDemand: 1}}}}
}

// TestCutIsPastOnly: a View cannot reach a price after its Now, not even
// by reslicing up to the capacity.
func TestCutIsPastOnly(t *testing.T) {
	var pts []trace.Point
	for i := 0; i < 10; i++ {
		pts = append(pts, trace.Point{At: t0.Add(time.Duration(i) * time.Hour), Price: float64(i)})
	}
	v := source(pts).Cut(t0.Add(4*time.Hour + time.Minute))
	m := v.Markets[0]
	if len(m.Prices) != 5 || cap(m.Prices) != 5 {
		t.Fatalf("len %d cap %d, want 5 and 5", len(m.Prices), cap(m.Prices))
	}
	if p, _ := m.Price(); p != 4 {
		t.Errorf("price now %v, want 4", p)
	}
}

// TestBidRisk: a price that doubles for ten minutes at the half of
// every other hour evicts a bid at the price half of the time, and never a
// bid at three times the price; the distribution says when.
func TestBidRisk(t *testing.T) {
	var pts []trace.Point
	for h := 0; h < 24*20; h++ {
		at := t0.Add(time.Duration(h) * time.Hour)
		pts = append(pts, trace.Point{At: at, Price: 1})
		if h%2 == 1 {
			pts = append(pts, trace.Point{At: at.Add(30 * time.Minute), Price: 2}, trace.Point{At: at.Add(40 * time.Minute), Price: 1})
		}
	}
	src := source(pts)
	e := NewEstimator(time.Hour)
	v := src.Cut(t0.Add(10 * 24 * time.Hour))
	m := &v.Markets[0]
	low := e.BidRisk(v, m, 1)
	// The price now is 1, and has been for 20 minutes: of the 21 samples
	// per two hours that start at that level not within a step after a
	// change (of the other 3, 2 start inside a spike and one at its
	// end), those starting 5, 10, ..., 55 minutes before a spike see it
	// then (up to the window's ragged end).
	if want := 11.0 / 21; math.Abs(low.Evicted()-want) > 0.002 {
		t.Errorf("P(evicted) at the price = %v, want %v", low.Evicted(), want)
	}
	if got, want := low.Before(30*time.Minute), 5.0/21; math.Abs(got-want) > 0.002 {
		t.Errorf("P(notice before 30 min) = %v, want %v", got, want)
	}
	// E[min(T, 1 h)]: (5+10+...+55)/21 min for the evicted, 10/21 h for the rest.
	mins := (330.0 + 10*60) / 21
	if got, want := low.Clamped(0, time.Hour), time.Duration(mins*float64(time.Minute)); (got - want).Abs() > 5*time.Second {
		t.Errorf("E[min(T, h)] = %v, want %v", got, want)
	}
	// A machine that starts working 10 min in and is gone 2 min after its
	// notice works E[clamp(T+2−10, 0, 50)] minutes.
	var sum float64
	for m := 5; m <= 55; m += 5 {
		sum += min(max(float64(m)+2-10, 0), 50)
	}
	if got, want := low.Clamped(8*time.Minute, 50*time.Minute), time.Duration((sum+10*50)/21*float64(time.Minute)); (got - want).Abs() > 5*time.Second {
		t.Errorf("working time %v, want %v", got, want)
	}
	if high := e.BidRisk(v, m, 3); high.Evicted() != 0 || high.Clamped(0, time.Hour) != time.Hour {
		t.Errorf("at 3x: P %v, up %v; want never evicted", high.Evicted(), high.Clamped(0, time.Hour))
	}
	if mid := e.BidRisk(v, m, 1.5); mid.Evicted() != low.Evicted() {
		t.Errorf("at 1.5x: %v, want %v (the spike doubles the price)", mid.Evicted(), low.Evicted())
	}
	// Asking later, then earlier, then later again gives what a fresh
	// estimator gives: the window slides both ways.
	later := src.Cut(t0.Add(15 * 24 * time.Hour))
	fresh := NewEstimator(time.Hour).BidRisk(later, &later.Markets[0], 1)
	if a := e.BidRisk(later, &later.Markets[0], 1); a != fresh {
		t.Errorf("cached %+v, fresh %+v", a, fresh)
	}
	if a := e.BidRisk(v, m, 1); a != low {
		t.Errorf("back at 10 days: %+v, want %+v", a, low)
	}
}

// TestBidRiskByLevel: the price sits at 1 and stands at 2 for the first
// half of every other hour. Bid just above 1, a machine is evicted when
// the next half hour at 2 comes; bid just above 2, it never is (the price
// only falls from there), which the market's average would not say.
func TestBidRiskByLevel(t *testing.T) {
	var pts []trace.Point
	for h := 0; h < 24*20; h++ {
		at := t0.Add(time.Duration(h) * time.Hour)
		if h%2 == 1 {
			pts = append(pts, trace.Point{At: at, Price: 2}, trace.Point{At: at.Add(30 * time.Minute), Price: 1})
		} else if h == 0 {
			pts = append(pts, trace.Point{At: at, Price: 1})
		}
	}
	src := source(pts)
	e := NewEstimator(time.Hour)
	low := src.Cut(t0.Add(10 * 24 * time.Hour))               // at 1, an even hour
	high := src.Cut(t0.Add(10*24*time.Hour + 65*time.Minute)) // at 2
	if p, _ := high.Markets[0].Price(); p != 2 {
		t.Fatalf("price %v, want 2", p)
	}
	// At 1, half an hour after the fall: of the 17 starts in each two
	// hours that are at 1 and not within a step of the fall (0:35 to 1:55
	// after a rise), those after 1:00 (11) see the next rise within the
	// hour. (The start at the fall itself is fresh, and fresh starts,
	// fewer than a day of them, are read with the rest only when asked
	// about a fresh price.)
	if got, want := e.BidRisk(low, &low.Markets[0], 1).Evicted(), 11.0/17; math.Abs(got-want) > 0.002 {
		t.Errorf("bid at the low price: P(evicted) %v, want %v", got, want)
	}
	if got := e.BidRisk(high, &high.Markets[0], 1).Evicted(); got != 0 {
		t.Errorf("bid at the high price: P(evicted) %v, want 0", got)
	}
}

func TestAvailRisk(t *testing.T) {
	mk := market.Market{Zone: "z", Type: "t"}
	a := &trace.Availability{Offsets: []time.Duration{0, 10 * time.Hour, 11 * time.Hour}, Counts: []int{4, 2, 4}, Size: 4, End: 20 * time.Hour}
	src := &Source{
		Prices: &trace.Prices{Series: []*trace.Series{{Market: mk, Points: []trace.Point{{At: t0, Price: 1}}, OnDemand: 2}}},
		Avail:  map[market.Market]*Timeline{mk: Place(a, t0)},
	}
	e := NewEstimator(time.Hour)
	v := src.Cut(t0.Add(20 * time.Hour))
	r := e.AvailRisk(v, &v.Markets[0])
	lambda := (0.5 + 0.5) / 20.0
	if want := 1 - math.Exp(-lambda); math.Abs(r.Evicted()-want) > 1e-9 {
		t.Errorf("P = %v, want %v", r.Evicted(), want)
	}
	// E[min(T, h)] of an exponential: (1 − e^(−λh))/λ.
	if got, want := r.Clamped(0, time.Hour).Hours(), (1-math.Exp(-lambda))/lambda; math.Abs(got-want) > 1e-9 {
		t.Errorf("E[min(T, h)] = %v h, want %v", got, want)
	}
	if v.Markets[0].Available() != 4 {
		t.Errorf("available %d", v.Markets[0].Available())
	}
}

// TestBidRiskFresh: every other hour the price flickers between 1 and
// 1.2 for a quarter of an hour (up at 0, 6 and 12 minutes, down at 3,
// 9 and 15) and then stands at 1. Asked just after a move, the estimator
// reads the starts that followed a move (at 5, 10 and 15 minutes: two
// of three see the next rise within minutes); asked when the price has
// stood, the starts that had stood (20 to 115 minutes: 11 of 20 see the
// next burst, the nearest 5 minutes away).
func TestBidRiskFresh(t *testing.T) {
	var pts []trace.Point
	for h := 0; h < 24*20; h += 2 {
		at := t0.Add(time.Duration(h) * time.Hour)
		for i := 0; i < 3; i++ {
			pts = append(pts, trace.Point{At: at.Add(time.Duration(6*i) * time.Minute), Price: 1.2}, trace.Point{At: at.Add(time.Duration(6*i+3) * time.Minute), Price: 1})
		}
	}
	src := source(pts)
	e := NewEstimator(time.Hour)
	fresh := src.Cut(t0.Add(10*24*time.Hour + 5*time.Minute))
	stale := src.Cut(t0.Add(10*24*time.Hour + 40*time.Minute))
	if !justMoved(&fresh.Markets[0], fresh.Now, e.step) || justMoved(&stale.Markets[0], stale.Now, e.step) {
		t.Fatal("freshness misread")
	}
	f, s := e.BidRisk(fresh, &fresh.Markets[0], 1), e.BidRisk(stale, &stale.Markets[0], 1)
	if got, want := f.Evicted(), 2.0/3; math.Abs(got-want) > 0.01 {
		t.Errorf("just moved: P(evicted) %v, want %v", got, want)
	}
	if got := f.Before(5 * time.Minute); got < 0.6 {
		t.Errorf("just moved: P(notice within 5 min) %v, want 2/3", got)
	}
	if got, want := s.Evicted(), 11.0/20; math.Abs(got-want) > 0.01 {
		t.Errorf("stood: P(evicted) %v, want %v", got, want)
	}
	if got := s.Before(5 * time.Minute); got > 0.06 {
		t.Errorf("stood: P(notice within 5 min) %v, want at most 1/20", got)
	}
}

// TestBidRiskNoLookahead: a risk read at T, just after a move, is the
// same whether or not the price flickers after T, and whether or not the
// estimator has seen a later View: neither a sample's freshness nor the
// current one is read past T.
func TestBidRiskNoLookahead(t *testing.T) {
	var pts, spiked []trace.Point
	for h := 0; h < 24*20; h++ {
		at := t0.Add(time.Duration(h) * time.Hour)
		pts = append(pts, trace.Point{At: at, Price: 1}, trace.Point{At: at.Add(20 * time.Minute), Price: 1.5})
	}
	T := t0.Add(10*24*time.Hour + 22*time.Minute)
	spiked = append(spiked, pts...)
	for i := 1; i < 30; i++ {
		spiked = append(spiked, trace.Point{At: T.Add(time.Duration(i) * time.Minute), Price: float64(1 + i%2)})
	}
	sort.Slice(spiked, func(i, j int) bool { return spiked[i].At.Before(spiked[j].At) })
	e, f := NewEstimator(time.Hour), NewEstimator(time.Hour)
	later := source(spiked).Cut(T.Add(5 * time.Hour))
	f.BidRisk(later, &later.Markets[0], 1)
	v, w := source(pts).Cut(T), source(spiked).Cut(T)
	if !justMoved(&w.Markets[0], T, f.step) {
		t.Fatal("want a fresh price at T")
	}
	for _, ratio := range []float64{1, 1.25, 2} {
		if a, b := e.BidRisk(v, &v.Markets[0], ratio), f.BidRisk(w, &w.Markets[0], ratio); a != b {
			t.Errorf("at %vx: risk at T %+v, with flickers after T %+v", ratio, a, b)
		}
	}
}
