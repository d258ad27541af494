package coord

import (
	"slices"
	"strings"
	"testing"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/ring"
)

// TestRestartedServer: a ring server whose process restarted (a new
// incarnation under its ID) holds nothing, so it leaves the ring, its slots
// falling to their chains' next servers, and joins again to be copied to;
// the same incarnation joining again (a retried join) changes nothing.
// When the last server on the ring restarts every copy is lost, and an
// event says so. A restarted server used to stay on the ring, serving its
// slots empty: after the whole cluster was killed and started again,
// training went on from zero without a word.
func TestRestartedServer(t *testing.T) {
	r := &jobRig{t: t, m: NewMachine(Config{Servers: 2, Workers: 1, Partitions: 2, Replication: 2}, t0)}
	join := func(id, inc string) {
		r.step(func(m *Machine, rid uint64) {
			m.Join(rid, api.Join{Role: api.RoleServer, ID: id, Addr: id + ":1", Incarnation: inc})
		})
	}
	ids := func(ss []ring.Server) []string {
		var out []string
		for _, s := range ss {
			out = append(out, s.ID)
		}
		return out
	}
	join("s0", "a")
	join("s1", "a")
	r.step(func(m *Machine, rid uint64) { m.Join(rid, api.Join{Role: api.RoleWorker, ID: "w0"}) })
	join("s0", "a")
	if l := r.m.snapshot(); !slices.Equal(ids(l.Servers), []string{"s0", "s1"}) || len(l.Joining) != 0 {
		t.Fatalf("a retried join: ring %v, joining %v; want [s0 s1] and none", ids(l.Servers), ids(l.Joining))
	}
	join("s0", "b")
	if l := r.m.snapshot(); !slices.Equal(ids(l.Servers), []string{"s1"}) || !slices.Equal(ids(l.Joining), []string{"s0"}) {
		t.Fatalf("s0 restarted: ring %v, joining %v; want [s1] and [s0]", ids(l.Servers), ids(l.Joining))
	}
	r.events = nil
	join("s1", "b")
	lost := slices.ContainsFunc(r.events, func(e api.Event) bool {
		return e.Kind == api.EventFailed && e.Node == "s1" && strings.Contains(e.Cause, "every copy")
	})
	if !lost {
		t.Errorf("the last ring server restarted: events %+v, want one saying every copy is lost", r.events)
	}
}

// TestRestartedWorker: a worker that left the running job (or was
// declared dead) and starts again under its ID joins with a new rank,
// its old one staying finished. It was handed its old rank back and
// refused at its first request for work ("rank 0 was declared dead").
func TestRestartedWorker(t *testing.T) {
	r := &jobRig{t: t, m: NewMachine(Config{Servers: 2, Workers: 2, Partitions: 4, Replication: 2}, t0)}
	for _, id := range []string{"s0", "s1"} {
		r.step(func(m *Machine, rid uint64) { m.Join(rid, api.Join{Role: api.RoleServer, ID: id, Addr: id + ":1"}) })
	}
	joinWorker := func(id, inc string) Reply {
		return r.step(func(m *Machine, rid uint64) {
			m.Join(rid, api.Join{Role: api.RoleWorker, ID: id, Incarnation: inc})
		})
	}
	joinWorker("w0", "a")
	joinWorker("w1", "a")
	if rep := joinWorker("w0", "a"); rep.Err != nil || rep.Rank != 0 {
		t.Fatalf("a retried join: rank %d, %v; want rank 0", rep.Rank, rep.Err)
	}
	if rep := r.step(func(m *Machine, id uint64) { m.Leave(id, 0) }); rep.Err != nil {
		t.Fatal(rep.Err)
	}
	rep := joinWorker("w0", "b")
	if rep.Err != nil || rep.Rank != 2 {
		t.Fatalf("w0 restarted after it left: rank %d, %v; want the new rank 2", rep.Rank, rep.Err)
	}
	if rep := r.step(func(m *Machine, id uint64) { m.Acquire(id, api.Acquire{Rank: 2, Pass: 0}) }); rep.Err != nil {
		t.Errorf("work for the restarted worker: %v", rep.Err)
	}
	if !r.m.finished(0) {
		t.Errorf("the old rank 0 is no longer finished")
	}
}
