package data

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestNumberKeys: both ways of numbering give the data's distinct keys in
// order and each stored value's number.
func TestNumberKeys(t *testing.T) {
	for _, maxIndex := range []uint64{100, 5000, 1 << 40} {
		r := rand.New(rand.NewPCG(5, 6))
		var b strings.Builder
		for range 200 {
			idx := make([]uint64, 0, 30)
			for range 30 {
				idx = append(idx, 1+r.Uint64N(maxIndex-1))
			}
			slices.Sort(idx)
			b.WriteString("+1")
			for _, k := range slices.Compact(idx) {
				fmt.Fprintf(&b, " %d:1", k)
			}
			b.WriteByte('\n')
		}
		d, err := ParseLIBSVM(strings.NewReader(b.String()), "ids")
		if err != nil {
			t.Fatal(err)
		}
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
