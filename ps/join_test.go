package ps_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// TestServerJoinsLive adds a third server while two workers push +1 to
// random counters: the joiner receives copies of its future slots, goes on
// the ring, and every acknowledged increment is in the final model once.
func TestServerJoinsLive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 2, Workers: 2, Replication: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const keys = 20000
	var acked atomic.Int64
	var joined sync.Once
	joinErr := make(chan error, 1)
	var maxWait atomic.Int64
	_, err = l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) {
		tb, err := c.CreateTable(ctx, table.Spec{Name: "counters", Width: 4, Rule: table.Rule{Kind: table.Sum}})
		if err != nil {
			return nil, err
		}
		rng := rand.New(rand.NewPCG(uint64(c.Rank()), 2))
		for i := range 400 {
			if i == 100 && c.Rank() == 0 {
				joined.Do(func() {
					go func() {
						_, err := l.AddServer(ctx)
						joinErr <- err
					}()
				})
			}
			ks := randomKeys(rng, 64, keys)
			ones := filled(4*len(ks), 1)
			start := time.Now()
			if err := tb.Push(ks, ones).Wait(ctx); err != nil {
				return nil, fmt.Errorf("push %d: %w", i, err)
			}
			if d := time.Since(start).Nanoseconds(); d > maxWait.Load() {
				maxWait.Store(d)
			}
			acked.Add(int64(len(ks)))
		}
		// Wait for the joiner to be on the ring before checking.
		if err := awaitLayout(ctx, l, threeServers); err != nil {
			return nil, err
		}
		if err := holdsAcked(ctx, c, tb, keys, func() int64 { return 4 * acked.Load() }); err != nil || c.Rank() != 0 {
			return nil, err
		}
		if n := len(c.Layout().Servers); n != 3 {
			return nil, fmt.Errorf("%d servers on the ring after the join, want 3", n)
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-joinErr; err != nil {
		t.Fatal(err)
	}
	var h struct {
		keys, bytes int64
		secs        float64
	}
	for _, s := range l.Servers {
		st := s.Handoff()
		h.keys += st.Keys
		h.bytes += st.Bytes
		h.secs = max(h.secs, st.Seconds)
	}
	if h.keys == 0 {
		t.Fatal("no keys were copied to the joining server")
	}
	t.Logf("handoff copied %d keys (%d bytes) in %.3fs; longest wait for one push %v", h.keys, h.bytes, h.secs, time.Duration(maxWait.Load()))
}

// withWorker starts two servers (k = 2) and one worker that runs job in
// the background until the test ends or stop is called; job's stop channel
// is closed then.
func withWorker(t *testing.T, job func(ctx context.Context, c *ps.Client, stop <-chan struct{}) error) (context.Context, *node.Local, func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 2, Workers: 1, Replication: 2})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		cancel()
	})
	stop := make(chan struct{})
	go l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) { return nil, job(ctx, c, stop) })
	return ctx, l, sync.OnceFunc(func() { close(stop) })
}

// TestWorkerJoinsAndPushes starts a worker while another trains, and
// measures the time from its start to its first acknowledged push.
func TestWorkerJoinsAndPushes(t *testing.T) {
	first := make(chan struct{})
	ctx, l, stop := withWorker(t, func(ctx context.Context, c *ps.Client, stop <-chan struct{}) error {
		tb, err := c.CreateTable(ctx, table.Spec{Name: "w", Width: 1})
		if err != nil {
			return err
		}
		for i := 0; ; i++ {
			if err := tb.Push([]uint64{uint64(i % 1000)}, []float32{1}).Wait(ctx); err != nil {
				return err
			}
			if i == 0 {
				close(first)
			}
			select {
			case <-stop:
				return nil
			default:
			}
		}
	})
	<-first
	start := time.Now()
	var took time.Duration
	_, err := node.RunWorker(ctx, node.WorkerConfig{ID: "late", Coordinator: l.CoordAddr}, func(ctx context.Context, c *ps.Client) (any, error) {
		tb, err := c.Table(ctx, "w")
		if err != nil {
			return nil, err
		}
		if err := tb.Push([]uint64{7}, []float32{1}).Wait(ctx); err != nil {
			return nil, err
		}
		took = time.Since(start)
		return nil, c.Finish().Wait(ctx)
	})
	stop()
	if err != nil {
		t.Fatal(err)
	}
	if took > 10*time.Second {
		t.Fatalf("first push acknowledged %v after the worker started", took)
	}
	t.Logf("a worker joining a running cluster had its first push acknowledged %v after it started", took)
}

// TestWorkerJoinsAtTheJobsClock: a worker that joins a running SSP job
// starts at the clock the servers count it at (their published minimum),
// not at 0: reads they answered before it joined did not wait for it, so
// its pushes must not count as older than those reads.
func TestWorkerJoinsAtTheJobsClock(t *testing.T) {
	ticked := make(chan struct{})
	ctx, l, stop := withWorker(t, func(ctx context.Context, c *ps.Client, stop <-chan struct{}) error {
		tb, err := c.CreateTable(ctx, table.Spec{Name: "w", Width: 1, Consistency: table.Consistency{Model: table.SSP, Staleness: 1}})
		if err != nil {
			return err
		}
		for range 20 {
			vals := make([]float32, 1)
			if err := tb.Pull([]uint64{7}, vals).Wait(ctx); err != nil {
				return err
			}
			if err := c.Tick().Wait(ctx); err != nil {
				return err
			}
		}
		close(ticked)
		<-stop
		return nil
	})
	<-ticked
	var start int64
	_, err := node.RunWorker(ctx, node.WorkerConfig{ID: "late", Coordinator: l.CoordAddr}, func(ctx context.Context, c *ps.Client) (any, error) {
		start = c.Clock()
		return nil, c.Finish().Wait(ctx)
	})
	stop()
	if err != nil {
		t.Fatal(err)
	}
	if start != 20 {
		t.Fatalf("a worker joining a job at clock 20 starts at clock %d", start)
	}
}
