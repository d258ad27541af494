package traceprov

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/billing"
	"github.com/terrace-ml/terrace/internal/market/history"
	"github.com/terrace-ml/terrace/internal/market/trace"
)

var (
	t0 = time.Date(2015, 3, 1, 0, 0, 0, 0, time.UTC)
	mk = market.Market{Zone: "z", Type: "c3.xlarge"}
)

func prices(pts ...trace.Point) *history.Source {
	return &history.Source{Prices: &trace.Prices{Series: []*trace.Series{{Market: mk, Points: pts, OnDemand: 0.21}}}}
}

func at(d time.Duration, p float64) trace.Point { return trace.Point{At: t0.Add(d), Price: p} }

type recorder struct{ events []market.Event }

func (r *recorder) handle(ev market.Event) {
	if ev.Kind != market.PriceChange {
		r.events = append(r.events, ev)
	}
}

// TestBidEviction: a price rise above the bid gives a two-minute notice,
// then the machine is gone, and its interrupted hour is free.
func TestBidEviction(t *testing.T) {
	ctx := context.Background()
	var rec recorder
	p := New(Config{Source: prices(at(0, 0.05), at(90*time.Minute, 0.30)), Model: billing.Bid2015{}, Boot: 2 * time.Minute, Start: t0, Handler: rec.handle})
	if _, err := p.Acquire(ctx, market.Request{Market: mk, Class: market.Transient, Count: 1, Bid: 0.04}); !errors.Is(err, market.ErrBidBelowPrice) {
		t.Fatalf("bid below price: %v", err)
	}
	if _, err := p.Acquire(ctx, market.Request{Market: mk, Class: market.Transient, Count: 1, Bid: -1}); !errors.Is(err, market.ErrBadBid) {
		t.Fatalf("negative bid: %v", err)
	}
	ids, err := p.Acquire(ctx, market.Request{Market: mk, Class: market.Transient, Count: 2, Bid: 0.10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Acquire(ctx, market.Request{Market: mk, Class: market.Reliable, Count: 1}); err != nil {
		t.Fatal(err)
	}
	p.AdvanceTo(t0.Add(4 * time.Hour))
	var kinds []string
	for _, ev := range rec.events {
		kinds = append(kinds, ev.Kind.String()+"@"+ev.At.Sub(t0).String())
	}
	want := []string{"ready@2m0s", "ready@2m0s", "ready@2m0s", "notice@1h30m0s", "notice@1h30m0s", "gone@1h32m0s", "gone@1h32m0s"}
	if len(kinds) != len(want) {
		t.Fatalf("events %v, want %v", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("events %v, want %v", kinds, want)
		}
	}
	if rec.events[3].Deadline != t0.Add(92*time.Minute) || rec.events[6].By != market.ByProvider {
		t.Errorf("notice %+v, gone %+v", rec.events[3], rec.events[6])
	}
	b, _ := p.Bill(ctx)
	// Each spot machine: first hour at 0.05, the interrupted second hour
	// free; the reliable one: 4 started hours at 0.21.
	if want := 2*0.05 + 4*0.21; math.Abs(b.Dollars-want) > 1e-9 || b.Usage[ids[0]].Dollars != 0.05 || b.Usage[ids[0]].Free != 32*time.Minute {
		t.Errorf("bill %+v, want %v", b, want)
	}
}

// TestAvailabilityEviction: a trace falling from 4 to 3 of 4 takes a
// quarter of the fleet, the fraction carried across falls.
func TestAvailabilityEviction(t *testing.T) {
	ctx := context.Background()
	var rec recorder
	src := prices(at(0, 0.05))
	a := &trace.Availability{Offsets: []time.Duration{0, time.Hour, 2 * time.Hour, 3 * time.Hour}, Counts: []int{4, 3, 2, 0}, Size: 4, End: 4 * time.Hour}
	src.Avail = map[market.Market]*history.Timeline{mk: history.Place(a, t0)}
	p := New(Config{Source: src, Model: billing.GCP, Boot: time.Minute, Start: t0.Add(time.Second), Handler: rec.handle})
	if _, err := p.Acquire(ctx, market.Request{Market: mk, Class: market.Transient, Count: 6}); err != nil {
		t.Fatal(err)
	}
	notices := func() (n int) {
		for _, ev := range rec.events {
			if ev.Kind == market.Notice {
				n++
			}
		}
		return n
	}
	p.AdvanceTo(t0.Add(time.Hour)) // 6 · 1/4 = 1.5: one evicted, 0.5 carried
	if n := notices(); n != 1 {
		t.Errorf("after 4→3: %d notices, want 1", n)
	}
	p.AdvanceTo(t0.Add(2 * time.Hour)) // 0.5 + 5 · 1/3 = 2.17: two more
	if n := notices(); n != 3 {
		t.Errorf("after 3→2: %d notices, want 3", n)
	}
	p.AdvanceTo(t0.Add(3 * time.Hour)) // 2→0: all
	if n := notices(); n != 6 {
		t.Errorf("after 2→0: %d notices, want 6", n)
	}
	if _, err := p.Acquire(ctx, market.Request{Market: mk, Class: market.Transient, Count: 1}); !errors.Is(err, market.ErrNoCapacity) {
		t.Errorf("acquire with no capacity: %v", err)
	}
	for _, ev := range rec.events {
		if ev.Kind == market.Notice && ev.Deadline.Sub(ev.At) != 30*time.Second {
			t.Errorf("GCP notice of %v", ev.Deadline.Sub(ev.At))
		}
	}
}

// TestOnDemandCap: on EC2 today a spot price above the on-demand price
// (the default maximum) interrupts the machine, and none can be had while
// it lasts.
func TestOnDemandCap(t *testing.T) {
	ctx := context.Background()
	var rec recorder
	p := New(Config{Source: prices(at(0, 0.05), at(time.Hour, 0.50), at(2*time.Hour, 0.05)), Model: billing.AWS, Boot: time.Minute, Start: t0, Handler: rec.handle})
	if _, err := p.Acquire(ctx, market.Request{Market: mk, Class: market.Transient, Count: 1}); err != nil {
		t.Fatal(err)
	}
	p.AdvanceTo(t0.Add(time.Hour))
	if n := len(rec.events); n != 2 || rec.events[1].Kind != market.Notice {
		t.Fatalf("events %+v, want ready and a notice", rec.events)
	}
	if _, err := p.Acquire(ctx, market.Request{Market: mk, Class: market.Transient, Count: 1}); !errors.Is(err, market.ErrBidBelowPrice) {
		t.Errorf("acquire above the on-demand price: %v", err)
	}
}

// fakeClock jumps to whatever time is waited for.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }
func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.now = c.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

// TestRunCompressed: at speedup 3600 an hour of trace passes in a second
// of the injected clock.
func TestRunCompressed(t *testing.T) {
	var seen []time.Duration
	clock := &fakeClock{now: time.Unix(0, 0)}
	var p *Provider
	p = New(Config{Source: prices(at(0, 0.05), at(time.Hour, 0.06), at(3*time.Hour, 0.07)), Model: billing.Bid2015{}, Start: t0,
		Handler: func(ev market.Event) { seen = append(seen, clock.Now().Sub(time.Unix(0, 0))) }})
	if err := p.Run(context.Background(), clock, 3600); err != nil {
		t.Fatal(err)
	}
	// The price at Start is in force already; the changes at 1 h and 3 h
	// come after 1 s and 3 s.
	if len(seen) != 2 || seen[0] != time.Second || seen[1] != 3*time.Second {
		t.Errorf("events at wall %v, want [1s 3s]", seen)
	}
}

// TestHandlerNotReentered: a handler that releases machines while other
// notices wait in the queue gets those notices after it returns, never
// inside its own call; every event still arrives, in order.
func TestHandlerNotReentered(t *testing.T) {
	ctx := context.Background()
	var p *Provider
	depth, maxDepth := 0, 0
	var got []string
	released := false
	p = New(Config{Source: prices(at(0, 0.05), at(time.Hour, 0.30)), Model: billing.Bid2015{}, Boot: time.Minute, Start: t0,
		Handler: func(ev market.Event) {
			depth++
			maxDepth = max(maxDepth, depth)
			defer func() { depth-- }()
			if ev.Kind == market.PriceChange {
				return
			}
			got = append(got, fmt.Sprintf("%s %d", ev.Kind, ev.Machine.ID))
			if ev.Kind == market.Notice && !released {
				released = true
				for id := market.MachineID(1); id <= 3; id++ {
					if err := p.Release(ctx, id); err != nil {
						t.Error(err)
					}
				}
			}
		}})
	if _, err := p.Acquire(ctx, market.Request{Market: mk, Class: market.Transient, Count: 3, Bid: 0.10}); err != nil {
		t.Fatal(err)
	}
	p.AdvanceTo(t0.Add(2 * time.Hour))
	if maxDepth != 1 {
		t.Errorf("handler re-entered (depth %d)", maxDepth)
	}
	want := "[ready 1 ready 2 ready 3 notice 1 notice 2 notice 3 gone 1 gone 2 gone 3]"
	if fmt.Sprint(got) != want {
		t.Errorf("events %v, want %s", got, want)
	}
}
