package store

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/table"
)

// TestKeysArriveOneABlock fills blocks one key at a time, in random order,
// through long key lists (visitByStripe) and short ones, so that each block
// goes through every capacity step with keys landing at every rank, both
// in place and into a new buffer (insertOne), with zero and random initial
// values, several planes, and refused (NaN) pushes to fresh keys, which
// must keep their initial values. After each push the whole table must
// match the model (checked every fourth push and after the last).
func TestKeysArriveOneABlock(t *testing.T) {
	specs := []table.Spec{
		{Name: "sum", Width: 1},
		{Name: "adam", Width: 3, Rule: table.Rule{Kind: table.Adam}},
		{Name: "ftrl", Width: 2, Rule: table.Rule{Kind: table.FTRL, L1: 0.01}, Init: table.Init{Kind: table.Uniform, Scale: 0.5, Seed: 3}},
		{Name: "sgd", Width: 5, Rule: table.Rule{Kind: table.SGD, LR: 0.1}, Init: table.Init{Kind: table.Normal, Scale: 0.1, Seed: 4}},
	}
	for _, spec := range specs {
		t.Run(spec.Name, func(t *testing.T) {
			tb, m := newModelRig(t, spec)
			rng := rand.New(rand.NewPCG(5, 6))
			// 300 slots spread over every stripe; each push takes at most
			// one new key per slot, so each key is its block's only new one.
			const slots = 300
			order := make([][]uint64, slots)
			for s := range order {
				order[s] = make([]uint64, keyspace.SlotSize)
				for o, k := range rng.Perm(keyspace.SlotSize) {
					order[s][o] = uint64(s*7919)*keyspace.SlotSize + uint64(k)
				}
			}
			for step := range keyspace.SlotSize {
				var keys []uint64
				for s := range slots {
					if step < 8 || rng.IntN(4) > 0 || step == keyspace.SlotSize-1 {
						keys = append(keys, order[s][0])
						order[s] = order[s][1:]
					}
				}
				if step%5 == 4 {
					keys = keys[:len(keys)/8] // a short list: visit, not visitByStripe
				}
				slices.Sort(keys)
				vals := make([]float32, len(keys)*spec.Width)
				for i := range vals {
					vals[i] = rng.Float32() - 0.5
					if rng.IntN(50) == 0 {
						vals[i] = float32(math.NaN())
					}
				}
				if got, want := tb.Push(keys, vals), m.push(keys, vals); got != want {
					t.Fatalf("step %d: Push refused %d, model %d", step, got, want)
				}
				if step%4 != 3 {
					continue // the dumps take most of the test's time
				}
				got, want := dump(tb, 0, math.MaxUint64), m.sorted()
				if !sameStored(got, want) {
					t.Fatalf("step %d: table holds %d keys, model %d, or values differ", step, len(got), len(want))
				}
				if s := tb.Stats(); s.Keys != int64(len(want)) {
					t.Fatalf("step %d: Stats.Keys = %d, want %d", step, s.Keys, len(want))
				}
			}
		})
	}
}

// TestSlotMapGrowsMidBatch has one lock hold create enough new slots in
// one stripe that its slot map grows, before it inserts into slots that
// were there before: each insert writes its block back to the entry its
// lookup found (slotMap.setAt), which the growth has moved.
func TestSlotMapGrowsMidBatch(t *testing.T) {
	tb := newTable(t, table.Spec{Name: "t", Width: 1})
	// Slots of stripe 0 are groupSlots*stripes*k + j for j < groupSlots;
	// the old ones sort after the new ones.
	slot := func(k, j uint64) uint64 { return groupSlots*stripes*k + j }
	var old []uint64
	for k := range uint64(4) {
		old = append(old, slot(1000+k, 0)*keyspace.SlotSize)
	}
	tb.Push(old, make([]float32, len(old)))
	var keys []uint64
	for k := range uint64(60) {
		keys = append(keys, slot(k, 3)*keyspace.SlotSize+5)
	}
	for _, k := range old {
		keys = append(keys, k+1)
	}
	for k := range uint64(maxBatch) { // other stripes, to make the list long
		keys = append(keys, (groupSlots*(k+1))*keyspace.SlotSize+9)
	}
	for len(keys) < minScatter {
		keys = append(keys, keys[len(keys)-1]+keyspace.SlotSize*groupSlots*stripes*16)
	}
	slices.Sort(keys)
	vals := make([]float32, len(keys))
	for i := range vals {
		vals[i] = float32(i + 1)
	}
	tb.Push(keys, vals)
	want := map[uint64]float32{}
	for _, k := range old {
		want[k] = 0
	}
	for i, k := range keys {
		want[k] = vals[i]
	}
	got := dump(tb, 0, math.MaxUint64)
	if len(got) != len(want) {
		t.Fatalf("table holds %d keys, want %d", len(got), len(want))
	}
	for _, s := range got {
		if w, ok := want[s.key]; !ok || s.val[0] != w {
			t.Fatalf("key %d = %v, want %v (present %v)", s.key, s.val[0], w, ok)
		}
	}
}
