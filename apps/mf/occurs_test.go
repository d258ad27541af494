package mf

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestOccurs checks both of occurs' ways (a bitmap when the largest id
// is below 2^27, a set otherwise) against a plain search.
func TestOccurs(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, top := range []uint32{100, 1<<27 - 1, 1 << 27, 1<<32 - 1} {
		of := make([]uint32, 500)
		for i := range of {
			of[i] = top - r.Uint32N(min(top, 200))
		}
		ids := append(slices.Clone(of[:50]), 0, top, top-1, of[0])
		for range 50 {
			ids = append(ids, top-r.Uint32N(min(top, 400)))
		}
		got := occurs(of, ids)
		for i, id := range ids {
			if want := slices.Contains(of, id); got[i] != want {
				t.Errorf("top %d: id %d occurs %v, want %v", top, id, got[i], want)
			}
		}
	}
	if got := occurs([]uint32{1}, nil); len(got) != 0 {
		t.Errorf("no ids: %v", got)
	}
}
