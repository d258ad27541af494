//go:build unix

package store

import (
	"syscall"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/table"
)

// The sparse workload of issue 17: 10,000 random keys of 10 million per
// operation, on a width-1 sum table.
const sparseSpace, sparseBatch = 10_000_000, 10_000

// BenchmarkSparseInsert pushes fresh random key sets into a table that
// grows from empty to 2.5 million keys (16 a slot), as in `bench wire`'s
// five rounds of 50 fresh-key pushes: each set mostly creates keys, one
// per slot.
func BenchmarkSparseInsert(b *testing.B) {
	sets := randomKeys(250, sparseBatch, sparseSpace)
	vals := make([]float32, sparseBatch)
	tb := newTable(b, table.Spec{Width: 1})
	i := 0
	c0 := processCPU()
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
	reportKeys(b, c0)
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
	c0 := processCPU()
	for b.Loop() {
		tb.Push(keys, vals)
	}
	reportKeys(b, c0)
}

func BenchmarkSparsePullPresent(b *testing.B) {
	tb, keys, dst := sparseCached(b)
	c0 := processCPU()
	for b.Loop() {
		tb.Pull(keys, dst)
	}
	reportKeys(b, c0)
}

// reportKeys reports keys/s and the process's processor time per
// operation since c0, which moves less with other tenants' load than the
// wall time does.
func reportKeys(b *testing.B, c0 time.Duration) {
	b.ReportMetric(float64((processCPU()-c0).Microseconds())/float64(b.N), "cpu_us/op")
	b.ReportMetric(float64(b.N*sparseBatch)/b.Elapsed().Seconds(), "keys/s")
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
