package store

import (
	"runtime"
	"testing"

	"github.com/terrace-ml/terrace/table"
)

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// fill stores keys in a fresh table of spec and returns it with the
// measured heap growth.
func fill(t *testing.T, spec table.Spec, push func(tb *Table)) (*Table, int64) {
	before := heapInUse()
	tb := newTable(t, spec)
	push(tb)
	return tb, heapInUse() - before
}

// TestMemory fills tables and measures the heap they really take: the
// figures in docs/store.md come from here, and Stats must stay near them.
func TestMemory(t *testing.T) {
	sum1 := table.Spec{Width: 1}
	tests := []struct {
		name     string
		spec     table.Spec
		push     func(tb *Table)
		values   int64
		maxBytes float64 // measured heap bytes per value
	}{
		{"dense", sum1, func(tb *Table) {
			chunk := make([]float32, 1<<16)
			for lo := 0; lo < 1_000_000; lo += len(chunk) {
				tb.PushRun(uint64(lo), chunk[:min(len(chunk), 1_000_000-lo)])
			}
		}, 1_000_000, 5},
		{"dense, one key at a time", sum1, func(tb *Table) {
			one := []float32{1}
			for k := range uint64(1_000_000) {
				tb.Push([]uint64{k}, one)
			}
		}, 1_000_000, 5},
		{"one key per block", sum1, func(tb *Table) {
			one := []float32{1}
			for k := range uint64(100_000) {
				tb.Push([]uint64{k*64 + k%64}, one)
			}
		}, 100_000, 64},
		// Two keys in three, so blocks of 42 or 43 keys with room for 48:
		// the value and three Adam planes take 16 bytes per value, 18.3
		// with the room.
		{"adam, partial blocks", table.Spec{Width: 8, Rule: table.Rule{Kind: table.Adam}}, func(tb *Table) {
			var keys []uint64
			for k := range uint64(150_000) {
				if k%3 != 0 {
					keys = append(keys, k)
				}
			}
			tb.Push(keys, make([]float32, 8*len(keys)))
		}, 100_000 * 8, 19},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb, grew := fill(t, tt.spec, tt.push)
			st := tb.Stats()
			runtime.KeepAlive(tb)
			perValue := float64(grew) / float64(tt.values)
			t.Logf("%d keys: heap grew %d bytes, %.2f per value; Stats estimate %d (%.2f per value)",
				st.Keys, grew, perValue, st.Bytes, st.BytesPerValue())
			if st.Values != tt.values || st.Keys*int64(tt.spec.Width) != tt.values {
				t.Errorf("Stats = %+v, want %d values", st, tt.values)
			}
			if d := float64(st.Bytes-grew) / float64(grew); d < -0.25 || d > 0.25 {
				t.Errorf("Stats estimate %d is %+.0f%% off the measured %d", st.Bytes, 100*d, grew)
			}
			if perValue > tt.maxBytes {
				t.Errorf("%.2f bytes per value, want at most %g", perValue, tt.maxBytes)
			}
		})
	}
}
