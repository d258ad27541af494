package ps_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/node"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// BenchmarkHandoff100MB loads 100 MB of values into two servers (k = 2),
// then adds a third while a worker keeps pushing, and reports the copy's
// throughput and the longest wait of a push during it.
func BenchmarkHandoff100MB(b *testing.B) {
	const width = 4
	const keys = 100 << 20 / 4 / width
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 2, Workers: 1, Replication: 2})
		if err != nil {
			b.Fatal(err)
		}
		var copied, secs float64
		var worst atomic.Int64
		_, err = l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) {
			t, err := c.CreateTable(ctx, table.Spec{Name: "big", Width: width})
			if err != nil {
				return nil, err
			}
			vals := make([]float32, keys*width)
			if err := t.PushRange(keyspace.Range{Lo: 0, Hi: keys}, vals).Wait(ctx); err != nil {
				return nil, err
			}
			stop := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				small := []uint64{1, 100, 10000, 1000000}
				one := make([]float32, len(small)*width)
				for {
					select {
					case <-stop:
						done <- nil
						return
					default:
					}
					start := time.Now()
					if err := t.Push(small, one).Wait(ctx); err != nil {
						done <- err
						return
					}
					if d := time.Since(start).Nanoseconds(); d > worst.Load() {
						worst.Store(d)
					}
				}
			}()
			s, err := l.AddServer(ctx)
			if err != nil {
				return nil, err
			}
			for v := uint64(0); ; {
				lay, err := l.Coord.Layout(ctx, v)
				if err != nil {
					return nil, err
				}
				if len(lay.Servers) == 3 {
					break
				}
				v = lay.Version
			}
			close(stop)
			if err := <-done; err != nil {
				return nil, err
			}
			_ = s
			for _, srv := range l.Servers {
				h := srv.Handoff()
				copied += float64(h.Bytes)
				secs = max(secs, h.Seconds)
			}
			return nil, nil
		})
		l.Close()
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(copied/1e6/secs, "copy_MB/s")
		b.ReportMetric(copied/1e6, "copied_MB")
		b.ReportMetric(float64(worst.Load())/1e6, "max_push_wait_ms")
	}
}
