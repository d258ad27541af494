package ps_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// TestServerDrainsLive drains a server (as an eviction notice does, through
// the coordinator) while two workers push +1 to random counters, with one
// copy of each key and with two: the leaving server's slots are shipped to
// their new holders before it leaves the ring, and every acknowledged
// increment is in the final model once.
func TestServerDrainsLive(t *testing.T) {
	for _, k := range []int{1, 2} {
		t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 3, Workers: 2, Replication: k})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			const keys = 20000
			var acked atomic.Int64
			left := make(chan error, 1)
			var start time.Time
			_, err = l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) {
				tb, err := c.CreateTable(ctx, table.Spec{Name: "counters", Width: 2})
				if err != nil {
					return nil, err
				}
				rng := rand.New(rand.NewPCG(uint64(c.Rank()), 5))
				for i := range 400 {
					if i == 100 && c.Rank() == 0 {
						start = time.Now()
						go func() {
							_, err := api.NewClient(l.CoordAddr, nil).LeaveServer(ctx, "server-1")
							left <- err
						}()
					}
					ks := randomKeys(rng, 64, keys)
					if err := tb.Push(ks, filled(2*len(ks), 1)).Wait(ctx); err != nil {
						return nil, fmt.Errorf("push %d: %w", i, err)
					}
					acked.Add(int64(len(ks)))
				}
				if err := awaitLayout(ctx, l, func(lay *layout.Layout) bool { return len(lay.Servers) == 2 && len(lay.Leaving) == 0 }); err != nil {
					return nil, err
				}
				if c.Rank() == 0 {
					t.Logf("server-1 off the ring %v after the drain began", time.Since(start))
				}
				return nil, holdsAcked(ctx, c, tb, keys, func() int64 { return 2 * acked.Load() })
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := <-left; err != nil {
				t.Fatal(err)
			}
		})
	}
}
