package data

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestNumberKeys: both ways of numbering give the data's distinct keys in
// order and each stored value's number.
func TestNumberKeys(t *testing.T) {
	for _, maxIndex := range []uint64{100, 5000, 1 << 40} {
		r := rand.New(rand.NewPCG(5, 6))
		d := &Sparse{RowPtr: []int{0}}
		for range 200 {
			idx := make([]uint64, 0, 30)
			for range 30 {
				idx = append(idx, 1+r.Uint64N(maxIndex-1))
			}
			slices.Sort(idx)
			idx = slices.Compact(idx)
			d.Keys = append(d.Keys, idx...)
			d.Labels = append(d.Labels, 1)
			d.RowPtr = append(d.RowPtr, len(d.Keys))
			d.NumFeatures = max(d.NumFeatures, idx[len(idx)-1]+1)
		}
		d.Vals = make([]float32, len(d.Keys))
		keys, local := numberBySorting(d)
		if !slices.IsSorted(keys) || len(slices.Compact(slices.Clone(keys))) != len(keys) {
			t.Fatalf("max index %d: keys not distinct and increasing", maxIndex)
		}
		for j, k := range d.Keys {
			if keys[local[j]] != k {
				t.Fatalf("max index %d: value %d numbered %d, key %d, want %d", maxIndex, j, local[j], keys[local[j]], k)
			}
		}
		if maxIndex < 1<<20 {
			tk, tl := numberByTable(d)
			if !slices.Equal(tk, keys) || !slices.Equal(tl, local) {
				t.Errorf("max index %d: numbered by table and by sorting differently", maxIndex)
			}
		}
		if gk, _ := NumberKeys(d); !slices.Equal(gk, keys) {
			t.Errorf("max index %d: NumberKeys differs", maxIndex)
		}
	}
}
