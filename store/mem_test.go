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

// fill stores keys with a sum rule in a fresh table of width 1 and returns
// it with the measured heap growth.
func fill(t *testing.T, push func(tb *Table)) (*Table, int64) {
	before := heapInUse()
	tb := newTable(t, table.Spec{Width: 1})
	push(tb)
	return tb, heapInUse() - before
}

func TestMemory(t *testing.T) {
	tests := []struct {
		name     string
		push     func(tb *Table)
		keys     int64
		maxBytes float64 // measured heap bytes per value
	}{
		{"dense", func(tb *Table) {
			chunk := make([]float32, 1<<16)
			for lo := 0; lo < 1_000_000; lo += len(chunk) {
				tb.PushRun(uint64(lo), chunk[:min(len(chunk), 1_000_000-lo)])
			}
		}, 1_000_000, 5},
		{"dense, one key at a time", func(tb *Table) {
			one := []float32{1}
			for k := range uint64(1_000_000) {
				tb.Push([]uint64{k}, one)
			}
		}, 1_000_000, 5},
		{"one key per block", func(tb *Table) {
			one := []float32{1}
			for k := range uint64(100_000) {
				tb.Push([]uint64{k*64 + k%64}, one)
			}
		}, 100_000, 64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb, grew := fill(t, tt.push)
			st := tb.Stats()
			runtime.KeepAlive(tb)
			perValue := float64(grew) / float64(tt.keys)
			t.Logf("%d keys: heap grew %d bytes, %.2f per value; Stats estimate %d (%.2f per value)",
				st.Keys, grew, perValue, st.Bytes, st.BytesPerValue())
			if st.Keys != tt.keys || st.Values != tt.keys {
				t.Errorf("Stats = %+v, want %d keys and values", st, tt.keys)
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
