package checkpoint

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/terrace-ml/terrace/table"
)

// benchKeys is 64 MiB of width-1 values; the data file is three times as
// large (8-byte keys), and the figures are MB/s of values.
const benchKeys = 64 << 20 / 4

// benchSources are the two ways a table's records reach WriteTable: a
// plain loop, which measures the format and the disk, and a store's Range,
// which is what a server does.
func benchSources(b *testing.B) map[string]func(func(uint64, []float32, [][]float32) bool) {
	tb, _ := newStore(b, table.Spec{Name: "bench", Width: 1})
	vals := make([]float32, 1<<16)
	for lo := 0; lo < benchKeys; lo += len(vals) {
		for i := range vals {
			vals[i] = float32(lo + i)
		}
		tb.PushRun(uint64(lo), vals)
	}
	return map[string]func(func(uint64, []float32, [][]float32) bool){
		"loop": func(fn func(uint64, []float32, [][]float32) bool) {
			v := []float32{0}
			for k := range uint64(benchKeys) {
				v[0] = float32(k)
				if !fn(k, v, nil) {
					return
				}
			}
		},
		"store": rangeSrc(tb, 0, math.MaxUint64),
	}
}

func BenchmarkWriteTable(b *testing.B) {
	spec := table.Spec{Name: "bench", Width: 1}
	if err := spec.Validate(); err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"loop", "store"} {
		src := benchSources(b)[name]
		b.Run(name, func(b *testing.B) {
			w, err := Create(b.TempDir(), 1)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(benchKeys * 4)
			var size int64
			for i := 0; b.Loop(); i++ {
				fi, err := w.WriteTable(context.Background(), fmt.Sprint(i), spec, src)
				if err != nil {
					b.Fatal(err)
				}
				size = fi.Size
				b.StopTimer()
				os.Remove(filepath.Join(w.Dir(), fi.Name))
				b.StartTimer()
			}
			b.ReportMetric(float64(size)*float64(b.N)/b.Elapsed().Seconds()/1e6, "file-MB/s")
		})
	}
}

func BenchmarkReadTable(b *testing.B) {
	spec := table.Spec{Name: "bench", Width: 1}
	if err := spec.Validate(); err != nil {
		b.Fatal(err)
	}
	root := b.TempDir()
	w, err := Create(root, 1)
	if err != nil {
		b.Fatal(err)
	}
	fi, err := w.WriteTable(context.Background(), "bench", spec, benchSources(b)["loop"])
	if err != nil {
		b.Fatal(err)
	}
	c, err := w.Commit(Meta{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	sinks := map[string]func() (func(uint64, []float32, [][]float32) error, func()){
		"discard": func() (func(uint64, []float32, [][]float32) error, func()) {
			return func(uint64, []float32, [][]float32) error { return nil }, func() {}
		},
		"store": func() (func(uint64, []float32, [][]float32) error, func()) {
			tb, _ := newStore(b, spec)
			return func(k uint64, v []float32, st [][]float32) error { tb.Load(k, v, st); return nil },
				func() { tb.Stats() }
		},
	}
	for _, name := range []string{"discard", "store"} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(benchKeys * 4)
			for b.Loop() {
				b.StopTimer()
				fn, done := sinks[name]()
				b.StartTimer()
				if err := c.ReadTable(ctx, "bench", fn); err != nil {
					b.Fatal(err)
				}
				done()
			}
			b.ReportMetric(float64(fi.Size)*float64(b.N)/b.Elapsed().Seconds()/1e6, "file-MB/s")
		})
	}
	// Latest reads every data file once to check its CRC32C.
	b.Run("latest", func(b *testing.B) {
		b.SetBytes(benchKeys * 4)
		for b.Loop() {
			if _, _, err := Latest(ctx, root); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(fi.Size)*float64(b.N)/b.Elapsed().Seconds()/1e6, "file-MB/s")
	})
}
