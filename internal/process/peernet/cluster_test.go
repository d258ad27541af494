package peernet_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/internal/process/peernet"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// slowPacer holds every minibatch of its worker for d: a straggler.
type slowPacer struct{ d time.Duration }

func (p slowPacer) Pace(ctx context.Context, _ ps.Batch, _ time.Duration) error {
	t := time.NewTimer(p.d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestReassignAcrossEndpoints runs rapid reassignment on a real cluster
// whose four workers share nothing but the network: each has its own peer
// endpoint on 127.0.0.1, announced in its join, and finds the others'
// in the layout. Rank 0 straggles; the others take the tails of its
// pieces, which they can only choose from its progress as it reached them
// through the endpoints (no PeerHub). Every row is trained exactly once.
func TestReassignAcrossEndpoints(t *testing.T) {
	const rows, batch, passes, workers, parts = 1000, 10, 2, 4, 4
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 1, Workers: workers, Replication: 1, Partitions: parts})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	order := func(_, p int) []int {
		o := make([]int, rows)
		for i := range o {
			o[i] = (i*7919 + p) % rows
		}
		return o
	}
	var mu sync.Mutex
	trained := map[[3]int]int{} // (pass, partition, row) -> times trained
	var reassignments int64
	announced := map[int]string{} // rank -> its endpoint's address
	var layoutAddrs map[int]string
	job := func(ep *peernet.Endpoint) node.Job {
		return func(ctx context.Context, c *ps.Client) (any, error) {
			tb, err := c.CreateTable(ctx, table.Spec{Name: "rows", Width: 1, Consistency: table.Consistency{Model: table.ASP}})
			if err != nil {
				return nil, err
			}
			if c.Rank() == 0 {
				c.Pace(slowPacer{2 * time.Millisecond})
			}
			ep.Bind(c.Rank(), peernet.FromLayout(c.Layout))
			rctx, stop := context.WithCancel(ctx)
			defer stop()
			if err := c.Reassign(rctx, ps.Reassign{Peers: ep, Every: 5 * time.Millisecond}); err != nil {
				return nil, err
			}
			loop := ps.Loop{Order: order, Batch: batch, ProgressEvery: 2,
				Step: func(ctx context.Context, b ps.Batch) (*ps.Future, error) {
					keys := make([]uint64, len(b.Rows))
					vals := make([]float32, len(b.Rows))
					mu.Lock()
					for i, r := range b.Rows {
						trained[[3]int{b.Lease.Pass, b.Lease.Partition, r}]++
						keys[i], vals[i] = uint64(b.Lease.Partition*rows+r), 1
					}
					mu.Unlock()
					slices.Sort(keys)
					return tb.Push(keys, vals), nil
				}}
			for pass := range passes {
				if err := c.EachPartition(ctx, pass, loop); err != nil {
					return nil, err
				}
			}
			mu.Lock()
			defer mu.Unlock()
			reassignments += c.ReassignStats().Reassignments
			announced[c.Rank()] = ep.Addr()
			if n := c.Layout().PeerAddrs; len(n) == workers {
				layoutAddrs = n
			}
			return nil, nil
		}
	}
	eps := make([]*peernet.Endpoint, workers)
	for i := range eps {
		if eps[i], err = peernet.Listen(ctx, "127.0.0.1:0", peernet.Options{}); err != nil {
			t.Fatal(err)
		}
		defer eps[i].Close()
	}
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for i, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = node.RunWorker(ctx, node.WorkerConfig{ID: fmt.Sprintf("worker-%d", i), Coordinator: l.CoordAddr, PeerAddr: ep.Addr()}, job(ep))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	for rank, addr := range announced {
		if layoutAddrs[rank] != addr {
			t.Errorf("rank %d listens at %s, the layout says %q", rank, addr, layoutAddrs[rank])
		}
	}
	for i, ep := range eps {
		st := ep.Stats()
		t.Logf("endpoint %d: %+v", i, st)
		if st.Received == 0 || st.Refused != 0 {
			t.Errorf("endpoint %d: %+v", i, st)
		}
	}
	if reassignments == 0 {
		t.Fatal("no tail was reassigned through the peer endpoints")
	}
	for pass := range passes {
		for p := range parts {
			for r := range rows {
				if n := trained[[3]int{pass, p, r}]; n != 1 {
					t.Fatalf("pass %d partition %d row %d trained %d times", pass, p, r, n)
				}
			}
		}
	}
	t.Logf("%d tails reassigned", reassignments)
}
