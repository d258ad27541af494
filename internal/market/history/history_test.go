package history

import (
	"math"
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

// TestBidRisk: a price that doubles for ten minutes at the start of every
// other hour evicts a bid at the price half of the time, and never a bid
// at three times the price.
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
	e := NewEstimator(time.Hour, 2*time.Minute)
	v := src.Cut(t0.Add(10 * 24 * time.Hour))
	m := &v.Markets[0]
	low := e.BidRisk(v, m, 1)
	// Windows starting in the half hour before a spike see it (12 of 24
	// samples per two hours); those starting inside one (2 of 24) see no
	// rise above the spike's price.
	if want := 11.0 / 24; math.Abs(low.P-want) > 0.01 {
		t.Errorf("P(evicted) at the price = %v, want %v", low.P, want)
	}
	if high := e.BidRisk(v, m, 3); high.P != 0 || high.Up != time.Hour {
		t.Errorf("at 3x: %+v, want never evicted", high)
	}
	if mid := e.BidRisk(v, m, 1.5); mid.P != low.P {
		t.Errorf("at 1.5x: %v, want %v (the spike doubles the price)", mid.P, low.P)
	}
	// Asking later after earlier gives the same as a fresh estimator.
	later := src.Cut(t0.Add(15 * 24 * time.Hour))
	if a, b := e.BidRisk(later, &later.Markets[0], 1), NewEstimator(time.Hour, 2*time.Minute).BidRisk(later, &later.Markets[0], 1); a != b {
		t.Errorf("cached %+v, fresh %+v", a, b)
	}
}

func TestAvailRisk(t *testing.T) {
	mk := market.Market{Zone: "z", Type: "t"}
	a := &trace.Availability{Offsets: []time.Duration{0, 10 * time.Hour, 11 * time.Hour}, Counts: []int{4, 2, 4}, Size: 4, End: 20 * time.Hour}
	src := &Source{
		Prices: &trace.Prices{Series: []*trace.Series{{Market: mk, Points: []trace.Point{{At: t0, Price: 1}}, OnDemand: 2}}},
		Avail:  map[market.Market]*Timeline{mk: Place(a, t0)},
	}
	e := NewEstimator(time.Hour, 2*time.Minute)
	v := src.Cut(t0.Add(20 * time.Hour))
	r := e.AvailRisk(v, &v.Markets[0])
	lambda := (0.5 + 0.5) / 20.0
	if want := 1 - math.Exp(-lambda); math.Abs(r.P-want) > 1e-9 {
		t.Errorf("P = %v, want %v", r.P, want)
	}
	if v.Markets[0].Available() != 4 {
		t.Errorf("available %d", v.Markets[0].Available())
	}
}
