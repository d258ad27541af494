package lr

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/terrace-ml/terrace/data"
)

// sparseIDs returns rows LIBSVM rows of 30 features each, their indices
// below maxIndex.
func sparseIDs(t *testing.T, rows int, maxIndex uint64) *data.Sparse {
	t.Helper()
	r := rand.New(rand.NewPCG(5, 6))
	var b strings.Builder
	for range rows {
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
	d, err := data.ParseLIBSVM(strings.NewReader(b.String()), "ids")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestNumberFeatures: the training data's distinct keys in order, the
// bias first, and each stored value's number, keyed as lr keys its
// weights (data.NumberFeatures).
func TestNumberFeatures(t *testing.T) {
	for _, maxIndex := range []uint64{100, 5000, 1 << 40} {
		d := sparseIDs(t, 200, maxIndex)
		f := data.NumberFeatures(d)
		if !slices.IsSorted(f.Keys) || f.Keys[0] != 0 || len(slices.Compact(slices.Clone(f.Keys))) != len(f.Keys) {
			t.Fatalf("max index %d: keys %v not distinct and increasing from the bias", maxIndex, f.Keys[:min(10, len(f.Keys))])
		}
		for j, k := range d.Keys {
			if f.Keys[f.Local[j]] != featureKey(k) {
				t.Fatalf("max index %d: value %d numbered %d, key %d, want key %d", maxIndex, j, f.Local[j], f.Keys[f.Local[j]], featureKey(k))
			}
		}
	}
}

// TestWorkerScratchIsPerFeature: a worker's scratch space is as large as
// the features the data has, not as its largest index: 100 rows of
// indices up to 50 million (kdd12's reach 54 million) took 400 MB of
// position and stamp arrays.
func TestWorkerScratchIsPerFeature(t *testing.T) {
	d := sparseIDs(t, 100, 50_000_000)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	w := newWorker(nil, d, nil, DefaultConfig().Consistency)
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Errorf("a worker over %d values allocated %d bytes, want under 1 MB", len(d.Keys), got)
	}
	runtime.KeepAlive(w)
}
