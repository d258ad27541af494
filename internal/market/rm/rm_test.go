package rm

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/history"
)

var t0 = time.Date(2015, 3, 1, 0, 0, 0, 0, time.UTC)

// fakeProvider refuses requests whose bid is below 1 and records calls.
type fakeProvider struct {
	next     market.MachineID
	released []market.MachineID
}

func (f *fakeProvider) Acquire(_ context.Context, r market.Request) ([]market.MachineID, error) {
	if r.Bid < 1 && r.Class == market.Transient {
		return nil, fmt.Errorf("no: %w", market.ErrBidBelowPrice)
	}
	ids := make([]market.MachineID, r.Count)
	for i := range ids {
		f.next++
		ids[i] = f.next
	}
	return ids, nil
}

func (f *fakeProvider) Release(_ context.Context, id market.MachineID) error {
	f.released = append(f.released, id)
	return nil
}

func (f *fakeProvider) Past(context.Context) (history.View, error) { return history.View{Now: t0}, nil }
func (f *fakeProvider) Bill(context.Context) (market.Bill, error)  { return market.Bill{}, nil }

type fakeJob struct{ checkpoints int }

func (j *fakeJob) Status() JobStatus                { return JobStatus{Total: 1} }
func (j *fakeJob) Checkpoint(context.Context) error { j.checkpoints++; return nil }

// scripted returns its plans in turn.
type scripted struct {
	plans []Plan
	seen  []State
}

func (s *scripted) Name() string { return "scripted" }
func (s *scripted) Decide(st State) Plan {
	s.seen = append(s.seen, st)
	if len(s.plans) == 0 {
		return Plan{}
	}
	p := s.plans[0]
	s.plans = s.plans[1:]
	return p
}

func TestManager(t *testing.T) {
	ctx := context.Background()
	mk := market.Market{Zone: "z", Type: "t"}
	prov, job := &fakeProvider{}, &fakeJob{}
	pol := &scripted{plans: []Plan{
		{Acquire: []market.Request{{Market: mk, Class: market.Transient, Count: 2, Bid: 2}, {Market: mk, Class: market.Transient, Count: 1, Bid: 0.5}}, Wake: t0.Add(time.Hour)},
		{}, {}, {Release: []market.MachineID{2}, Checkpoint: true},
	}}
	m := NewManager(prov, pol, job)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if len(m.Held()) != 2 || m.Counts().Refused != 1 {
		t.Fatalf("held %d, refused %d; want 2 and 1 (a refused bid is not an error)", len(m.Held()), m.Counts().Refused)
	}
	ready := market.Machine{ID: 1, Market: mk, Class: market.Transient, Ready: t0.Add(time.Minute)}
	m.Handle(ctx, market.Event{Kind: market.Ready, Machine: ready})
	m.Handle(ctx, market.Event{Kind: market.Gone, Machine: ready, By: market.ByProvider})
	if c := m.Counts(); c.Acquisitions != 1 || c.Evictions != 1 || len(m.Held()) != 1 {
		t.Errorf("counts %+v, held %d", c, len(m.Held()))
	}
	if err := m.Tick(ctx, t0.Add(time.Minute)); err != nil || len(pol.seen) != 3 {
		t.Fatalf("a tick before the wake time asked the policy (%d decisions, %v)", len(pol.seen), err)
	}
	if err := m.Tick(ctx, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if len(prov.released) != 1 || prov.released[0] != 2 || job.checkpoints != 1 || len(m.Held()) != 0 {
		t.Errorf("released %v, checkpoints %d, held %d", prov.released, job.checkpoints, len(m.Held()))
	}
}

// TestManagerRelease: a machine given back leaves the holdings and goes
// to the provider; one no longer held (evicted meanwhile) is no error and
// no call.
func TestManagerRelease(t *testing.T) {
	ctx := context.Background()
	mk := market.Market{Zone: "z", Type: "t"}
	prov := &fakeProvider{}
	m := NewManager(prov, &scripted{plans: []Plan{{Acquire: []market.Request{{Market: mk, Class: market.Transient, Count: 2, Bid: 2}}}}}, &fakeJob{})
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Release(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := m.Release(ctx, 1); err != nil {
		t.Errorf("second release: %v", err)
	}
	if len(prov.released) != 1 || prov.released[0] != 1 || len(m.Held()) != 1 {
		t.Errorf("released %v, held %d; want [1] and 1", prov.released, len(m.Held()))
	}
}
