package server

import (
	"slices"
	"testing"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/table"
)

// TestRoundAggregates: a round of three pushes, two of them to the same
// keys and one a run over some of them, ships each key's state once, the
// state as it is when the round is built, and every push's pair, each for
// the slots of its own keys.
func TestRoundAggregates(t *testing.T) {
	s := New(Options{ID: "s0"})
	l := &layout.Layout{Version: 1, Epoch: 1, Workers: 1, Ready: true, Servers: []ring.Server{{ID: "s0", Addr: "127.0.0.1:1"}},
		Tables: []layout.Table{{ID: 1, Spec: table.Spec{Name: "w", Width: 1}}}}
	if err := s.Configure(l); err != nil {
		t.Fatal(err)
	}
	_, _, ts, _ := s.target(1)
	a := []uint64{1, 2, 200}   // slots 0 and 3
	b := []uint64{2, 130, 200} // slots 0, 2 and 3
	for _, ks := range [][]uint64{a, b} {
		ts.store.Push(ks, []float32{1, 1, 1})
	}
	ts.store.PushRun(0, make([]float32, 4)) // keys 0-3, slot 0
	push := func(keys keyspace.Keys, seq uint64) entry {
		return entry{items: []item{{t: ts, keys: keys}}, pairs: []wire.Pair{{Client: 7, Seq: seq, Table: 1}}}
	}
	msgs := s.build([]batch{{entries: []entry{push(keyspace.KeyList(a), 1), push(keyspace.KeyList(b), 2)}},
		{entries: []entry{push(keyspace.KeyRun(0, 4), 3)}}})
	got := map[uint64]float32{}
	shipped := 0
	var pairs []wire.Pair
	for _, m := range msgs {
		for _, st := range m.States {
			keys := st.Keys
			if keys == nil {
				for k := st.Lo; k < st.Lo+uint64(st.N); k++ {
					keys = append(keys, k)
				}
			}
			for i, k := range keys {
				got[k] = st.Floats[i]
				shipped++
			}
		}
		pairs = append(pairs, m.Pairs...)
	}
	// Keys 1 and 2 are in the list and the run: shipped twice, once in
	// each form; every other key once.
	want := map[uint64]float32{0: 0, 1: 1, 2: 2, 3: 0, 130: 1, 200: 2}
	if shipped != 8 || len(got) != len(want) {
		t.Errorf("shipped %d states of %d keys (%v), want 8 of %d", shipped, len(got), got, len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("key %d shipped as %v, want %v (its state when the round was built)", k, got[k], v)
		}
	}
	slotsOf := map[uint64]keyspace.SlotSet{}
	for _, p := range pairs {
		slotsOf[p.Seq] = p.Slots
	}
	for seq, keys := range map[uint64][]uint64{1: a, 2: b, 3: {0, 1, 2, 3}} {
		var want keyspace.SlotSet
		want.AddKeys(keys)
		if !slices.Equal(slotsOf[seq], want) {
			t.Errorf("push %d's pair claims slots %v, want %v", seq, slotsOf[seq], want)
		}
	}
}

// TestRoundAfterRewindDropsOldState: once a rewind emptied the tables
// (emptyTablesLocked), a rebuild's copy and a push's state still queued
// from the old store ship nothing: sent under the new epoch, they
// replaced the checkpoint's values a peer had loaded (simulation,
// TERRACE_SIM_MIX=rewind seeds 17 and 134).
func TestRoundAfterRewindDropsOldState(t *testing.T) {
	s := New(Options{ID: "s0"})
	l := &layout.Layout{Version: 1, Epoch: 1, Workers: 1, Ready: true, Servers: []ring.Server{{ID: "s0", Addr: "127.0.0.1:1"}},
		Tables: []layout.Table{{ID: 1, Spec: table.Spec{Name: "w", Width: 1}}}}
	if err := s.Configure(l); err != nil {
		t.Fatal(err)
	}
	_, _, old, _ := s.target(1)
	old.store.Push([]uint64{1, 200}, []float32{3, 4})
	var slots keyspace.SlotSet
	slots.AddKeys([]uint64{1, 200})
	copied := entry{copy: &slotCopy{t: old, slots: slots}}
	pushed := entry{items: []item{{t: old, keys: keyspace.KeyList([]uint64{1, 200})}}, pairs: []wire.Pair{{Client: 7, Seq: 1, Table: 1}}}
	s.applyMu.Lock()
	s.mu.Lock()
	s.emptyTablesLocked()
	s.mu.Unlock()
	s.applyMu.Unlock()
	for _, m := range s.build([]batch{{entries: []entry{copied, pushed}}}) {
		if len(m.Replace) > 0 || len(m.States) > 0 || len(m.Pairs) > 0 {
			t.Errorf("a round built after the rewind ships the emptied store's state: replace %v, states %v, pairs %v", m.Replace, m.States, m.Pairs)
		}
	}
}
