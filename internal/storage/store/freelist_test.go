package store

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/terrace-ml/terrace/table"
)

// fillStripe0 gives stripe 0 enough bytes that its spares are kept: slots
// 8 to 13 (all in stripe 0, as are slots 0 to 15) get 48 keys each.
func fillStripe0(t *testing.T, tb *Table) {
	t.Helper()
	var keys []uint64
	for slot := uint64(8); slot < 14; slot++ {
		for o := range uint64(48) {
			keys = append(keys, slot*64+o)
		}
	}
	tb.Import(keys, make([]float32, len(keys)*tb.Stride()))
	if tb.stripe(0) != tb.stripe(13) {
		t.Fatal("slots 0 and 13 are in different stripes")
	}
}

// A buffer a block grew out of goes to the next block that grows to its
// size, and the first block's values are not touched by the second's
// writes: grow, recycle, grow another block, check both, at random.
func TestSpareNotAliased(t *testing.T) {
	tb := newTable(t, table.Spec{Width: 3, Init: table.Init{Kind: table.Uniform, Scale: 1, Seed: 7}})
	fillStripe0(t, tb)
	s := tb.stripe(0)

	// Deterministic: slot 0 grows from one key to two; its old buffer
	// is the spare that slot 1's first key gets.
	one := make([]float32, 3)
	tb.Push([]uint64{0}, []float32{1, 2, 3})
	old := s.blocks.get(0).p
	tb.Push([]uint64{5}, one)
	if s.spare == nil || s.spare.n[0] != 1 || s.spare.p[0][0] != old {
		t.Fatalf("spares %+v, want slot 0's old buffer %p", s.spare, old)
	}
	tb.Push([]uint64{64 + 9}, []float32{7, 8, 9})
	if s.blocks.get(1).p != old {
		t.Fatalf("slot 1's buffer %p is not the recycled %p", s.blocks.get(1).p, old)
	}

	// Random: keys of slots 0 to 3 and 16 to 19 (another stripe), one at
	// a time or several, each value checked against a model after every
	// push.
	model := map[uint64][]float32{}
	initial := func(k uint64) []float32 {
		v := make([]float32, 3)
		tb.Pull([]uint64{k}, v)
		return v
	}
	for _, k := range []uint64{0, 5, 64 + 9} {
		model[k] = initial(k)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	slots := []uint64{0, 1, 2, 3, 16, 17, 18, 19}
	var all []uint64
	for range 3000 {
		n := 1
		if rng.IntN(8) == 0 {
			n = 1 + rng.IntN(6)
		}
		keys := make([]uint64, 0, n)
		for range n {
			k := slots[rng.IntN(len(slots))]*64 + rng.Uint64N(64)
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		g := make([]float32, 3*len(keys))
		for i, k := range keys {
			if model[k] == nil {
				model[k] = initial(k)
				all = append(all, k)
			}
			for j := range 3 {
				g[3*i+j] = float32(rng.IntN(100))
				model[k][j] += g[3*i+j]
			}
		}
		tb.Push(keys, g)
		slices.Sort(all)
		got := make([]float32, 3*len(all))
		tb.Pull(all, got)
		for i, k := range all {
			if !slices.Equal(got[3*i:3*i+3], model[k]) {
				t.Fatalf("key %d = %v, want %v", k, got[3*i:3*i+3], model[k])
			}
		}
	}
}

// A recycled buffer holds another block's stale values and state: a key
// created in it must still start at its initial value with zero state.
func TestSpareStartsClean(t *testing.T) {
	tb := newTable(t, table.Spec{Width: 2, Rule: table.Rule{Kind: table.Adam}, Init: table.Init{Kind: table.Uniform, Scale: 1, Seed: 3}})
	fillStripe0(t, tb)
	st := tb.Stride()
	junk := make([]float32, st)
	for i := range junk {
		junk[i] = 1e6 + float32(i)
	}
	// Slot 0 grows one key at a time with non-zero state, leaving a
	// buffer of each step as a spare; slot 1 grows into them.
	for o := range uint64(40) {
		tb.Import([]uint64{o}, junk)
	}
	var grew bool
	for o := range uint64(40) {
		k := 64 + o
		want := make([]float32, st)
		tb.Pull([]uint64{k}, want[:2])
		before := *tb.stripe(0).spare
		got := make([]float32, st)
		tb.Export([]uint64{k}, got)
		if !slices.Equal(got, want) {
			t.Fatalf("fresh key %d = %v, want %v (its initial value, zero state)", k, got, want)
		}
		b := tb.stripe(0).blocks.get(1)
		for k := range before.p {
			grew = grew || slices.Contains(before.p[k][:before.n[k]], b.p)
		}
	}
	if !grew {
		t.Fatal("no key was created in a recycled buffer")
	}
}
