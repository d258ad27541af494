package localprov

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/billing"
	"github.com/terrace-ml/terrace/internal/market/history"
	"github.com/terrace-ml/terrace/internal/market/trace"
	"github.com/terrace-ml/terrace/internal/market/traceprov"
)

var (
	t0 = time.Date(2015, 3, 1, 0, 0, 0, 0, time.UTC)
	mk = market.Market{Zone: "z", Type: "c3.xlarge"}
)

// fakeMachines records what the provider asked of the processes, with
// the events the handler had seen by then.
type fakeMachines struct {
	n     map[market.Class]int
	calls []string
	seen  *[]market.Event
}

func (f *fakeMachines) Start(_ context.Context, c market.Class) (string, error) {
	name := fmt.Sprintf("%s-%d", c, f.n[c])
	f.n[c]++
	f.calls = append(f.calls, fmt.Sprintf("start %s (handler saw %d)", name, len(*f.seen)))
	return name, nil
}

func (f *fakeMachines) Notice(_ context.Context, name string) error {
	f.calls = append(f.calls, "notice "+name)
	return nil
}

func (f *fakeMachines) Kill(_ context.Context, name string) error {
	f.calls = append(f.calls, "kill "+name)
	return nil
}

func (f *fakeMachines) Drain(_ context.Context, name string) error {
	f.calls = append(f.calls, "drain "+name)
	return nil
}

// TestEventsOntoProcesses: a machine's processes start when the trace
// says it is ready (not at the request, and before the handler hears of
// it), a price above the bid sends the notice, the deadline kills, a
// release drains; the bill is the trace's.
func TestEventsOntoProcesses(t *testing.T) {
	ctx := context.Background()
	var seen []market.Event
	fm := &fakeMachines{n: map[market.Class]int{}, seen: &seen}
	src := &history.Source{Prices: &trace.Prices{Series: []*trace.Series{{Market: mk, OnDemand: 0.21,
		Points: []trace.Point{{At: t0, Price: 0.05}, {At: t0.Add(90 * time.Minute), Price: 0.30}}}}}}
	p := New(ctx, Config{Trace: traceprov.Config{Source: src, Model: billing.Bid2015{}, Boot: 2 * time.Minute, Start: t0},
		Machines: fm, Handler: func(ev market.Event) {
			if ev.Kind != market.PriceChange {
				seen = append(seen, ev)
			}
		}})
	spot, err := p.Acquire(ctx, market.Request{Market: mk, Class: market.Transient, Count: 1, Bid: 0.10})
	if err != nil {
		t.Fatal(err)
	}
	od, err := p.Acquire(ctx, market.Request{Market: mk, Class: market.Reliable, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(fm.calls) != 0 {
		t.Fatalf("processes started at the request: %v", fm.calls)
	}
	p.Trace().AdvanceTo(t0.Add(time.Minute))
	if len(fm.calls) != 0 {
		t.Fatalf("processes started while booting: %v", fm.calls)
	}
	p.Trace().AdvanceTo(t0.Add(3 * time.Hour))
	if err := p.Release(ctx, od[0]); err != nil {
		t.Fatal(err)
	}
	want := []string{"start transient-0 (handler saw 0)", "start reliable-0 (handler saw 1)", "notice transient-0", "kill transient-0", "drain reliable-0"}
	if !slices.Equal(fm.calls, want) {
		t.Fatalf("calls %q, want %q", fm.calls, want)
	}
	if p.Machine(spot[0]) != "transient-0" || p.Machine(od[0]) != "reliable-0" {
		t.Errorf("machines %q and %q", p.Machine(spot[0]), p.Machine(od[0]))
	}
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	b, _ := p.Bill(ctx)
	// The spot machine: its first hour at 0.05, the interrupted second
	// free; the reliable one: 3 started hours at 0.21.
	if want := 0.05 + 3*0.21; b.Dollars < want-1e-9 || b.Dollars > want+1e-9 {
		t.Errorf("bill %v, want %v", b.Dollars, want)
	}
}
