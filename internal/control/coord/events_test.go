package coord

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// memEvents is an EventStore in memory. Saves from concurrent calls may
// arrive out of order, so it keeps them by number, as etcd's keys do.
type memEvents struct {
	mu  sync.Mutex
	evs []api.Event
	put chan struct{}
}

func (s *memEvents) PutEvents(_ context.Context, evs []api.Event) error {
	s.mu.Lock()
	s.evs = append(s.evs, evs...)
	slices.SortFunc(s.evs, func(a, b api.Event) int { return cmp.Compare(a.Seq, b.Seq) })
	s.mu.Unlock()
	s.put <- struct{}{}
	return nil
}

func (s *memEvents) Events(context.Context) ([]api.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.evs), nil
}

func kinds(evs []api.Event) []string {
	var ks []string
	for _, e := range evs {
		ks = append(ks, e.Kind+" "+e.Node)
	}
	return ks
}

// TestTimeline: joins and a server's failure are on the timeline, in
// order, numbered, with the epoch each produced; a follower waiting for
// the next event gets it; status shows the dead server; the store has
// every event, and a successor that loads them goes on numbering after
// them and notes that it took over.
func TestTimeline(t *testing.T) {
	store := &memEvents{put: make(chan struct{}, 64)}
	// k = 2: s1's failure loses no slot (k = 1 would, and say so).
	c := New(Options{Servers: 2, Workers: 1, Partitions: 2, Replication: 2})
	if err := c.SetEventStore(t.Context(), store, "c0"); err != nil {
		t.Fatal(err)
	}
	cl := serve(t, c)
	ctx := t.Context()
	for _, s := range []string{"s0", "s1"} {
		if _, err := cl.JoinServer(ctx, s, "127.0.0.1:1", ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.JoinWorker(ctx, "w0", ""); err != nil {
		t.Fatal(err)
	}
	evs, err := cl.Events(ctx, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"join s0", "join s1", "join w0"}; !slices.Equal(kinds(evs), want) {
		t.Fatalf("events %v, want %v", kinds(evs), want)
	}
	for i, e := range evs {
		if e.Seq != uint64(i+1) || e.Time.IsZero() {
			t.Errorf("event %d: %+v", i, e)
		}
	}
	if evs[1].Epoch <= evs[0].Epoch {
		t.Errorf("the second server's join produced epoch %d after %d", evs[1].Epoch, evs[0].Epoch)
	}
	next := make(chan []api.Event, 1)
	go func() {
		evs, _ := cl.Events(ctx, 3, true)
		next <- evs
	}()
	if _, err := c.call(ctx, func(m *Machine, id uint64) { m.ServerFailed(id, "s1", "") }); err != nil {
		t.Fatal(err)
	}
	got := <-next
	if len(got) != 1 || got[0].Kind != api.EventFailed || got[0].Node != "s1" || got[0].Epoch <= evs[1].Epoch {
		t.Fatalf("follower got %+v, want s1's failure under a new epoch", got)
	}
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, n := range st.Nodes {
		states[n.ID] = n.State
	}
	if states["s0"] != "serving" || states["s1"] != "dead" || states["w0"] != "idle" || st.Events != 4 {
		t.Fatalf("status %+v", st)
	}
	for range 4 {
		<-store.put
	}

	// A successor restores the state and loads the timeline.
	c2 := New(Options{Servers: 2, Workers: 1, Partitions: 2, Replication: 2})
	c.mu.Lock()
	blob, err := json.Marshal(c.m.st)
	c.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Restore(blob, 0); err != nil {
		t.Fatal(err)
	}
	if err := c2.SetEventStore(ctx, store, "c1"); err != nil {
		t.Fatal(err)
	}
	cl2 := serve(t, c2)
	all, err := cl2.Events(ctx, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 5 || all[4].Kind != api.EventLeader || all[4].Node != "c1" || all[4].Seq != 5 {
		t.Fatalf("successor's timeline %v", kinds(all))
	}
}
