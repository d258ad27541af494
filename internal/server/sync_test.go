package server

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/keyspace"
)

// replicaOf serves server "r" of a two-server layout with head "h", and
// returns it, a slot headed by "h", and a function that sends replication
// messages to it as "h" (one round) and fails the test on a refusal.
func replicaOf(t *testing.T) (*Server, uint64, func(...wire.Replicate)) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{ID: "r"})
	l := &layout.Layout{Version: 1, Epoch: 3, Workers: 1, Replication: 2,
		Servers: []ring.Server{{ID: "h", Addr: "127.0.0.1:1"}, {ID: "r", Addr: ln.Addr().String()}},
		Tables:  []layout.Table{{ID: 1, Spec: mustSpec(t)}}}
	serve(t, s, ln, l)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	rm, _ := l.Ring()
	slot := uint64(0)
	for rm.Servers[rm.SlotOwner(slot)].ID != "h" {
		slot++
	}
	c, err := transport.Dial(ctx, ln.Addr().String(), transport.DialOptions{Hello: wire.Hello{Worker: wire.NoWorker, Role: wire.RoleReplica, Node: "h"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	send := func(round ...wire.Replicate) {
		t.Helper()
		for i, m := range round {
			m.More = i < len(round)-1
			got := make(chan error, 1)
			id := c.NextID()
			c.Call(wire.NewFrame(wire.Header{Type: wire.TReplicate, Epoch: 3, ReqID: id}, m.Parts()...), id, &transport.Call{
				OnReply: func(h wire.Header, r *wire.Reader) error {
					p, err := r.Payload(h)
					if err == nil && h.Type == wire.TError {
						code, msg, _ := wire.ParseError(p)
						err = &refusal{code, msg}
					}
					got <- err
					return nil
				},
				OnFail: func(err error) { got <- err },
			}, nil)
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no reply to replication")
			}
		}
	}
	return s, slot, send
}

type refusal struct {
	code wire.Code
	msg  string
}

func (r *refusal) Error() string { return r.msg }

func state(keys []uint64, vals ...float32) wire.State {
	return wire.State{Table: 1, Stride: 2, Keys: keys, Floats: vals}
}

// TestCopyReplacesStateAndPairs: a full copy of a slot leaves the replica
// with exactly the copy's keys and pairs there (docs/design/resilience.md,
// "One source per slot"): a key only the replica had is gone, and a pair
// the copy does not carry is no longer held for that slot.
func TestCopyReplacesStateAndPairs(t *testing.T) {
	s, slot, send := replicaOf(t)
	k0 := keyspace.SlotStart(slot)
	in := keyspace.SlotSet{slot, slot + 1}
	send(wire.Replicate{
		Pairs:  []wire.Pair{{Client: 7, Seq: 5, Table: 1, Slots: in}},
		States: []wire.State{state([]uint64{k0, k0 + 1}, 1, 1, 2, 2)},
	})
	if held, _ := checkPair(s, 7, 100, 0, 1, []uint64{5}); !held.slots.Contains(slot) {
		t.Fatalf("pair 5 not held for slot %d after replication: %+v", slot, held)
	}
	abandonPair(s, 7, 100)
	// A copy of the slot from the head, which has key k0 only and holds
	// push 6 there, not push 5.
	send(wire.Replicate{
		Pairs:   []wire.Pair{{Client: 7, Seq: 6, Table: 1, Slots: in}},
		Replace: []wire.Replace{{Table: 1, Slots: in}},
		States:  []wire.State{state([]uint64{k0}, 9, 9)},
	})
	keys := s.tables[1].store.Keys(k0, k0+keyspace.SlotSize)
	if len(keys) != 1 || keys[0] != k0 {
		t.Fatalf("slot holds keys %v after the copy, want only %d", keys, k0)
	}
	got := make([]float32, 2)
	s.tables[1].store.Pull([]uint64{k0}, got)
	if got[0] != 9 {
		t.Fatalf("key %d = %v after the copy, want 9", k0, got)
	}
	if held, _ := checkPair(s, 7, 101, 0, 1, []uint64{5}); held.all || held.slots.Contains(slot) {
		t.Fatalf("pair 5 still held for slot %d after a copy without it: %+v", slot, held)
	}
	abandonPair(s, 7, 101)
	if held, _ := checkPair(s, 7, 102, 0, 1, []uint64{6}); !held.slots.Contains(slot) {
		t.Fatalf("pair 6, which the copy carries, not held: %+v", held)
	}
}

// TestCopyOfAnEmptySlotEmptiesIt: a head with no keys in a slot still
// replaces the replica's state there.
func TestCopyOfAnEmptySlotEmptiesIt(t *testing.T) {
	s, slot, send := replicaOf(t)
	k0 := keyspace.SlotStart(slot)
	in := keyspace.SlotSet{slot, slot + 1}
	send(wire.Replicate{Pairs: []wire.Pair{{Client: 7, Seq: 5, Table: 1, Slots: in}}, States: []wire.State{state([]uint64{k0}, 1, 1)}})
	// A round of two messages: the copy's replacement rides on the first,
	// a state of another slot on the second.
	other := slot + 1
	for {
		if rm := s.ring; rm.Servers[rm.SlotOwner(other)].ID == "h" {
			break
		}
		other++
	}
	send(wire.Replicate{Replace: []wire.Replace{{Table: 1, Slots: in}}},
		wire.Replicate{States: []wire.State{state([]uint64{keyspace.SlotStart(other)}, 3, 3)}})
	if keys := s.tables[1].store.Keys(k0, k0+keyspace.SlotSize); len(keys) != 0 {
		t.Fatalf("slot still holds %v after a copy of it empty", keys)
	}
	if held, _ := checkPair(s, 7, 100, 0, 1, []uint64{5}); held.all || len(held.slots) != 0 {
		t.Fatalf("pair 5 still held after its slot was emptied: %+v", held)
	}
}

// TestCopyFromANonHeadIsRefused: only the head of a slot may replace it.
func TestCopyFromANonHeadIsRefused(t *testing.T) {
	s, slot, _ := replicaOf(t)
	mine := uint64(0)
	for s.ring.Servers[s.ring.SlotOwner(mine)].ID != "r" {
		mine++
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addr := s.ring.Servers[s.ring.Index("r")].Addr
	c, err := transport.Dial(ctx, addr, transport.DialOptions{Hello: wire.Hello{Worker: wire.NoWorker, Role: wire.RoleReplica, Node: "h"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := wire.Replicate{Replace: []wire.Replace{{Table: 1, Slots: keyspace.SlotSet{slot, slot + 1, mine, mine + 1}}}}
	if mine < slot {
		m.Replace[0].Slots = keyspace.SlotSet{mine, mine + 1, slot, slot + 1}
	}
	got := make(chan wire.Header, 1)
	id := c.NextID()
	c.Call(wire.NewFrame(wire.Header{Type: wire.TReplicate, Epoch: 3, ReqID: id}, m.Parts()...), id, &transport.Call{
		OnReply: func(h wire.Header, r *wire.Reader) error {
			_, err := r.Payload(h)
			got <- h
			return err
		},
		OnFail: func(error) { close(got) },
	}, nil)
	if h := <-got; h.Type != wire.TError {
		t.Fatalf("a copy of slot %d, headed by the receiver, was accepted", mine)
	}
}

// TestReplicatorCopiesSlotsItGained: after a layout change, a head copies
// a slot to a member before the first push to it, unless it headed the
// slot with that member in its chain both before and after.
func TestReplicatorCopiesSlotsItGained(t *testing.T) {
	srv := func(id string) ring.Server { return ring.Server{ID: id, Addr: id} }
	mk := func(epoch uint64, ids ...string) chains {
		var ss []ring.Server
		for _, id := range ids {
			ss = append(ss, srv(id))
		}
		l := &layout.Layout{Version: epoch, Epoch: epoch, Replication: 2, Servers: ss}
		rm, err := l.Ring()
		if err != nil {
			t.Fatal(err)
		}
		ch, err := newChains(l, rm)
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	before, after := mk(1, "a", "b", "c"), mk(2, "a", "b")
	p := newPeerSync("a", "b", 0)
	var changes []chainsChange
	if !p.inSync(changes) {
		t.Fatal("a replicator started before any change is not in step")
	}
	changes = append(changes, chainsChange{old: before, cur: after})
	var kept, gained uint64
	foundKept, foundGained := false, false
	for sl := uint64(0); !(foundKept && foundGained); sl++ {
		switch {
		case !foundKept && before.holds(sl, "a", "b") && after.holds(sl, "a", "b"):
			kept, foundKept = sl, true
		case !foundGained && before.ring.Servers[before.ring.SlotOwner(sl)].ID == "c" && after.holds(sl, "a", "b"):
			gained, foundGained = sl, true
		}
	}
	if p.needsCopy(changes, 1, kept) {
		t.Errorf("slot %d, headed by a with b in its chain throughout, needs a copy", kept)
	}
	if !p.needsCopy(changes, 1, gained) {
		t.Errorf("slot %d, which a took over from c, needs no copy to b", gained)
	}
	// The first push to the gained slot carries a copy of it first, and
	// the second does not.
	push := entry{items: []item{{t: &tableState{id: 1}, keys: keyspace.KeyList([]uint64{keyspace.SlotStart(gained)})}}}
	if got := p.copiesFirst(changes, []entry{push}); len(got) != 2 || got[0].copy == nil || !got[0].copy.slots.Contains(gained) {
		t.Fatalf("first push to slot %d: entries %+v, want a copy of it first", gained, got)
	}
	if got := p.copiesFirst(changes, []entry{push}); len(got) != 1 {
		t.Fatalf("second push to slot %d: %d entries, want the push alone", gained, len(got))
	}
	// A batch failed back to its clients forces a copy again.
	p.mustCopy([]entry{push})
	if !p.needsCopy(changes, 1, gained) {
		t.Errorf("slot %d of a failed batch needs no copy", gained)
	}
	// A replicator started after a change knows nothing in step.
	late := newPeerSync("a", "b", len(changes))
	if !late.needsCopy(changes, 1, kept) {
		t.Errorf("a replicator started after a change holds slot %d in step", kept)
	}
	// A skipped epoch changes everything.
	changes = append(changes, chainsChange{old: after, cur: mk(4, "a", "b"), gap: true})
	if !p.needsCopy(changes, 1, kept) {
		t.Errorf("slot %d needs no copy after a skipped epoch", kept)
	}
}

// TestWorkerCountedFromTheFloor: a worker the server did not count (new,
// or back from waiting for work) is counted from the highest minimum the
// server published, and the minimum comes back down from ClockIdle.
func TestWorkerCountedFromTheFloor(t *testing.T) {
	s := New(Options{ID: "s"})
	s.cons.resize(2)
	for w := range 2 {
		if _, err := s.advanceClock(w, 10); err != nil {
			t.Fatal(err)
		}
	}
	if m := s.minClock(); m != 10 {
		t.Fatalf("minimum %d, want 10", m)
	}
	s.cons.resize(3)
	if got, _ := s.advanceClock(2, 0); got != 10 {
		t.Fatalf("a new worker at clock 0 is counted at %d, want the floor 10", got)
	}
	for w := range 3 {
		s.advanceClock(w, wire.ClockIdle)
	}
	if m := s.minClock(); m != wire.ClockIdle {
		t.Fatalf("minimum %d with every worker idle", m)
	}
	if got, _ := s.advanceClock(0, 4); got != 10 {
		t.Fatalf("a worker back from idle at clock 4 is counted at %d, want 10", got)
	}
	if m := s.minClock(); m != 10 {
		t.Fatalf("minimum %d after a worker came back, want 10: reads must wait for it again", m)
	}
}

// TestParkedReadRefusedAfterLayoutChange: a read that waited while the
// layout changed is refused, so that the client asks the keys' current head.
func TestParkedReadRefusedAfterLayoutChange(t *testing.T) {
	s, addr := start(t)
	spec := mustSpec(t)
	spec.Consistency.Model, spec.Consistency.Staleness = "ssp", 0
	l := &layout.Layout{Version: 2, Epoch: 3, Workers: 2, Servers: []ring.Server{{ID: "s0", Addr: addr}},
		Tables: []layout.Table{{ID: 1, Spec: mustSpec(t)}, {ID: 2, Spec: spec}}}
	if err := s.Configure(l); err != nil {
		t.Fatal(err)
	}
	type reply struct {
		h wire.Header
		p []byte
	}
	got := make(chan reply, 1)
	go func() {
		h, p := call(t, addr, wire.TPull, 3, wire.Data{Table: 2, Kind: wire.KeysExplicit, Count: 1, Width: 2, Keys: []uint64{5}, Clock: 1})
		got <- reply{h, bytes.Clone(p)}
	}()
	// The read parks (worker 1 is at clock 0): wait until it has, so that
	// the layout changes under a parked read, not before the read arrives.
	for parked := 0; parked == 0; time.Sleep(time.Millisecond) {
		s.clockMu.Lock()
		parked = len(s.cons.waiters)
		s.clockMu.Unlock()
	}
	l2 := *l
	l2.Version, l2.Epoch = 3, 4
	if err := s.Configure(&l2); err != nil {
		t.Fatal(err)
	}
	s.advanceClock(1, 1)
	r := <-got
	wantError(t, r.h, r.p, wire.CodeStaleEpoch)
}

// TestEpochGapsByPrevEpoch: epochs are etcd revisions, which are not
// contiguous; a layout that names the server's epoch as its previous one
// follows it, and one that names another skips an epoch the server never
// saw (any slot may then have changed hands in between).
func TestEpochGapsByPrevEpoch(t *testing.T) {
	s := New(Options{ID: "s0"})
	servers := []ring.Server{{ID: "s0", Addr: "s0"}, {ID: "s1", Addr: "s1"}, {ID: "s2", Addr: "s2"}}
	configure := func(version, epoch, prev uint64, n int) {
		t.Helper()
		l := &layout.Layout{Version: version, Epoch: epoch, PrevEpoch: prev, Ready: true, Workers: 1, Replication: 2, Servers: servers[:n]}
		if err := s.Configure(l); err != nil {
			t.Fatal(err)
		}
	}
	configure(1, 17, 9, 3)
	configure(2, 40, 17, 2)
	if c := s.changes[len(s.changes)-1]; c.gap {
		t.Fatal("epoch 40 after 17, from 17: taken for a gap")
	}
	configure(3, 95, 61, 3)
	if c := s.changes[len(s.changes)-1]; !c.gap {
		t.Fatal("epoch 95 after 61, from 40: not taken for a gap")
	}
}

func checkPair(s *Server, client, seq, acked uint64, table uint32, ancestors []uint64) (scope, []chan struct{}) {
	s.pairMu.Lock()
	defer s.pairMu.Unlock()
	return s.dedup.check(client, seq, acked, table, ancestors)
}

func abandonPair(s *Server, client, seq uint64) {
	s.pairMu.Lock()
	defer s.pairMu.Unlock()
	s.dedup.abandon(client, seq)
}
