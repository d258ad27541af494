package store

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/table"
)

// Each benchmark times the same work done by a plain loop over a []float32
// of the table's size and reports how many times slower the table is
// (x-plain); the loop is the floor a table could reach.

// plainNs returns the mean time of f over enough runs to take 200ms.
func plainNs(f func()) float64 {
	f() // fault the pages in
	n := 0
	start := time.Now()
	for time.Since(start) < 200*time.Millisecond {
		f()
		n++
	}
	return float64(time.Since(start).Nanoseconds()) / float64(n)
}

func reportRatio(b *testing.B, plain float64) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/plain, "x-plain")
}

func BenchmarkPushRunSum(b *testing.B) {
	const floats = 64 << 20 / 4
	for _, width := range []int{1, 64} {
		b.Run(fmt.Sprintf("width=%d", width), func(b *testing.B) {
			vals := make([]float32, floats)
			for i := range vals {
				vals[i] = 1e-3
			}
			tb := newTable(b, table.Spec{Width: width})
			tb.PushRun(0, vals) // create the blocks; the benchmark updates them

			plain := make([]float32, floats)
			ns := plainNs(func() {
				for i, x := range vals {
					plain[i] += x
				}
			})
			b.SetBytes(floats * 4)
			b.ResetTimer()
			for b.Loop() {
				tb.PushRun(0, vals)
			}
			reportRatio(b, ns)
			b.ReportMetric(floats*4/ns*1e3, "plain-MB/s")
		})
	}
}

// randomKeys returns sets of n sorted distinct keys below max.
func randomKeys(sets, n int, max uint64) [][]uint64 {
	rng := rand.New(rand.NewPCG(1, 1))
	out := make([][]uint64, sets)
	for i := range out {
		seen := make(map[uint64]bool, n)
		for len(seen) < n {
			seen[rng.Uint64N(max)] = true
		}
		for k := range seen {
			out[i] = append(out[i], k)
		}
		slices.Sort(out[i])
	}
	return out
}

// sparseBench is a table of 10M dense keys of width 1 under a sum rule,
// touched 10,000 random keys at a time.
func sparseBench(b *testing.B) (tb *Table, plain []float32, sets [][]uint64, vals []float32) {
	const keys, batch = 10_000_000, 10_000
	tb = newTable(b, table.Spec{Width: 1})
	plain = make([]float32, keys)
	tb.PushRun(0, plain)
	vals = make([]float32, batch)
	for i := range vals {
		vals[i] = 1e-3
	}
	return tb, plain, randomKeys(16, batch, keys), vals
}

func BenchmarkPush(b *testing.B) {
	tb, plain, sets, vals := sparseBench(b)
	i := 0
	ns := plainNs(func() {
		for j, k := range sets[i%len(sets)] {
			plain[k] += vals[j]
		}
		i++
	})
	b.ResetTimer()
	for b.Loop() {
		tb.Push(sets[i%len(sets)], vals)
		i++
	}
	reportRatio(b, ns)
}

func BenchmarkPull(b *testing.B) {
	tb, plain, sets, dst := sparseBench(b)
	i := 0
	ns := plainNs(func() {
		for j, k := range sets[i%len(sets)] {
			dst[j] = plain[k]
		}
		i++
	})
	b.ResetTimer()
	for b.Loop() {
		tb.Pull(sets[i%len(sets)], dst)
		i++
	}
	reportRatio(b, ns)
}
