package coord

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// memEvents is an EventStore in memory. Saves from concurrent calls may
// arrive out of order, so it keeps them by number, as etcd's keys do.
type memEvents struct {
	mu  sync.Mutex
	evs []api.Event
	put chan struct{}
}

func (s *memEvents) PutEvents(_ context.Context, evs []api.Event, kept api.EventsKept) error {
	s.mu.Lock()
	s.evs = append(s.evs, evs...)
	slices.SortFunc(s.evs, func(a, b api.Event) int { return cmp.Compare(a.Seq, b.Seq) })
	s.evs = slices.DeleteFunc(s.evs, func(e api.Event) bool {
		if api.RoutineEvent(e.Kind) {
			return e.Seq < kept.Routine
		}
		return e.Seq < kept.Other
	})
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

// timelineCluster serves a coordinator that keeps its timeline in store,
// and joins servers s0 and s1 (k = 2: s1's failure loses no slot; k = 1
// would, and say so).
func timelineCluster(t *testing.T, store EventStore) (*Coordinator, *api.Client) {
	t.Helper()
	c := New(Options{Servers: 2, Workers: 1, Partitions: 2, Replication: 2})
	if err := c.SetEventStore(t.Context(), store, "c0"); err != nil {
		t.Fatal(err)
	}
	cl := serve(t, c)
	for _, s := range []string{"s0", "s1"} {
		if _, err := cl.JoinServer(t.Context(), s, "127.0.0.1:1", ""); err != nil {
			t.Fatal(err)
		}
	}
	return c, cl
}

// TestTimeline: joins and a server's failure are on the timeline, in
// order, numbered, with the epoch each produced; a follower waiting for
// the next event gets it; status shows the dead server; the store has
// every event, and a successor that loads them goes on numbering after
// them and notes that it took over.
func TestTimeline(t *testing.T) {
	store := &memEvents{put: make(chan struct{}, 64)}
	c, cl := timelineCluster(t, store)
	ctx := t.Context()
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
	gen := c.m.st.PartsGen
	c.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Restore(Saved{State: blob, Gen: gen}, 0); err != nil {
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

// TestTimelineKeepsRareEvents: a busy job's grants do not push a server's
// failure out of the timeline, in memory or in the store a successor
// loads: each class keeps its newest MaxEvents. Before, one bound of
// MaxEvents for all kept the failure about 15 s on a busy job.
func TestTimelineKeepsRareEvents(t *testing.T) {
	store := &memEvents{put: make(chan struct{}, 8*MaxEvents)}
	c, cl := timelineCluster(t, store)
	ctx := t.Context()
	if _, err := c.call(ctx, func(m *Machine, id uint64) { m.ServerFailed(id, "s1", "") }); err != nil {
		t.Fatal(err)
	}
	const grants = 3 * MaxEvents
	for i := range grants {
		c.event(func(m *Machine) { m.note(api.EventGrant, "w0", fmt.Sprintf("piece %d", i)) })
	}
	count := func(evs []api.Event) (routine, failed int) {
		for _, e := range evs {
			if api.RoutineEvent(e.Kind) {
				routine++
			}
			if e.Kind == api.EventFailed && e.Node == "s1" {
				failed++
			}
		}
		return routine, failed
	}
	last := fmt.Sprintf("piece %d", grants-1)
	var evs []api.Event
	for deadline := time.Now().Add(10 * time.Second); ; {
		var err error
		if evs, err = cl.Events(ctx, 0, false); err != nil {
			t.Fatal(err)
		}
		if evs[len(evs)-1].Cause == last || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r, f := count(evs); r != MaxEvents || f != 1 || evs[len(evs)-1].Cause != last {
		t.Fatalf("the timeline kept %d grants and %d failures of s1 (want %d and 1), last %+v", r, f, MaxEvents, evs[len(evs)-1])
	}
	// The store holds the same once every write is in.
	for {
		got, _ := store.Events(ctx)
		if r, f := count(got); r == MaxEvents && f == 1 && len(got) == len(evs) && got[len(got)-1].Seq == evs[len(evs)-1].Seq {
			break
		}
		select {
		case <-store.put:
		case <-time.After(10 * time.Second):
			t.Fatalf("the store holds %d events, the timeline %d", len(got), len(evs))
		}
	}
}
