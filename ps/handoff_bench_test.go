package ps_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/internal/server"
	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// BenchmarkHandoff100MB loads 100 MB of values into two servers (k = 2),
// then adds a third while a worker keeps pushing, and reports the copy's
// throughput and the longest wait of a push during it.
func BenchmarkHandoff100MB(b *testing.B) {
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 2, Workers: 1, Replication: 2})
		if err != nil {
			b.Fatal(err)
		}
		var copied, secs float64
		var worst atomic.Int64
		_, err = l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) {
			t, err := load100MB(ctx, c)
			if err != nil {
				return nil, err
			}
			stop := make(chan struct{})
			done := make(chan error, 1)
			go pushUntil(ctx, t, stop, done, &worst)
			if _, err := l.AddServer(ctx); err != nil {
				return nil, err
			}
			if err := awaitLayout(ctx, l, threeServers); err != nil {
				return nil, err
			}
			close(stop)
			if err := <-done; err != nil {
				return nil, err
			}
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

// BenchmarkDrain100MB loads 100 MB of values into three servers (k = 2),
// then drains one through the coordinator, as an eviction notice does,
// while a worker keeps pushing. It reports how long the departure took
// (until the layout no longer had the server), how long the survivors took
// to restore k copies of its slots, what they copied, and the longest wait
// of a push meanwhile.
func BenchmarkDrain100MB(b *testing.B) {
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 3, Workers: 1, Replication: 2})
		if err != nil {
			b.Fatal(err)
		}
		var leave time.Duration
		var copied, secs float64
		var worst atomic.Int64
		_, err = l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) {
			t, err := load100MB(ctx, c)
			if err != nil {
				return nil, err
			}
			before := make([]server.HandoffStats, len(l.Servers))
			for i, srv := range l.Servers {
				before[i] = srv.Handoff()
			}
			stop := make(chan struct{})
			done := make(chan error, 1)
			go pushUntil(ctx, t, stop, done, &worst)
			start := time.Now()
			lay, err := api.NewClient(l.CoordAddr, nil).LeaveServer(ctx, "server-2")
			if err != nil {
				return nil, err
			}
			for len(lay.Servers) != 2 {
				if lay, err = l.Coord.Layout(ctx, lay.Version); err != nil {
					return nil, err
				}
			}
			leave = time.Since(start)
			// The survivors' rebuilds restore k copies; wait until their
			// counters stop moving.
			for last := -1.0; ; {
				time.Sleep(200 * time.Millisecond)
				copied, secs = 0, 0
				for i, srv := range l.Servers[:2] {
					h, b0 := srv.Handoff(), before[i]
					copied += float64(h.Bytes - b0.Bytes)
					secs = max(secs, h.Seconds-b0.Seconds)
				}
				if copied > 0 && copied == last {
					break
				}
				last = copied
			}
			close(stop)
			return nil, <-done
		})
		l.Close()
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(leave.Microseconds())/1e3, "leave_ms")
		b.ReportMetric(secs, "restore_k_s")
		b.ReportMetric(copied/1e6, "copied_MB")
		b.ReportMetric(float64(worst.Load())/1e6, "max_push_wait_ms")
	}
}

// load100MB creates a table of 100 MB of values (width 4) through c.
func load100MB(ctx context.Context, c *ps.Client) (*ps.Table, error) {
	const width = 4
	const keys = 100 << 20 / 4 / width
	t, err := c.CreateTable(ctx, table.Spec{Name: "big", Width: width})
	if err != nil {
		return nil, err
	}
	return t, t.PushRange(keyspace.Range{Lo: 0, Hi: keys}, make([]float32, keys*width)).Wait(ctx)
}

// pushUntil pushes to a few keys until stop closes, recording the longest
// wait for an acknowledgement in worst.
func pushUntil(ctx context.Context, t *ps.Table, stop <-chan struct{}, done chan<- error, worst *atomic.Int64) {
	small := []uint64{1, 100, 10000, 1000000}
	one := make([]float32, len(small)*t.Spec().Width)
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
}
