package store

import (
	"testing"

	"github.com/terrace-ml/terrace/table"
)

// The sparse workload of issue 17: 10,000 random keys of 10 million per
// operation, on a width-1 sum table.
const sparseSpace, sparseBatch = 10_000_000, 10_000

// BenchmarkSparseInsert pushes fresh random key sets into a table that
// grows from empty, as `bench wire`'s fresh-key push does: each set mostly
// creates keys, one per slot.
func BenchmarkSparseInsert(b *testing.B) {
	sets := randomKeys(64, sparseBatch, sparseSpace)
	vals := make([]float32, sparseBatch)
	tb := newTable(b, table.Spec{Width: 1})
	i := 0
	for b.Loop() {
		if i == len(sets) {
			b.StopTimer()
			tb = newTable(b, table.Spec{Width: 1})
			i = 0
			b.StartTimer()
		}
		tb.Push(sets[i], vals)
		i++
	}
	b.ReportMetric(float64(b.N*sparseBatch)/b.Elapsed().Seconds(), "keys/s")
}

// sparseCached is a table holding 640,000 random keys (about four per
// slot), and a set of 10,000 of them, as the cached push and pull of
// `bench wire` find it.
func sparseCached(b *testing.B) (*Table, []uint64, []float32) {
	sets := randomKeys(64, sparseBatch, sparseSpace)
	vals := make([]float32, sparseBatch)
	tb := newTable(b, table.Spec{Width: 1})
	for _, s := range sets {
		tb.Push(s, vals)
	}
	return tb, sets[7], vals
}

func BenchmarkSparsePushPresent(b *testing.B) {
	tb, keys, vals := sparseCached(b)
	for b.Loop() {
		tb.Push(keys, vals)
	}
	b.ReportMetric(float64(b.N*sparseBatch)/b.Elapsed().Seconds(), "keys/s")
}

func BenchmarkSparsePullPresent(b *testing.B) {
	tb, keys, dst := sparseCached(b)
	for b.Loop() {
		tb.Pull(keys, dst)
	}
	b.ReportMetric(float64(b.N*sparseBatch)/b.Elapsed().Seconds(), "keys/s")
}
