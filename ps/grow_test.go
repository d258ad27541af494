package ps_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// TestChainsGrowToK: a cluster asked for chains of two forms with one
// server, trains, and gains a second; then the first is killed. Its
// chains grew to two when the second joined, so the second holds every
// acknowledged increment and the job goes on. A cluster that forms small
// and grows (an elastic job's) is otherwise left without a copy of
// anything.
func TestChainsGrowToK(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 1, Workers: 1, Replication: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const keys = 5000
	var acked int64
	_, err = l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) {
		tb, err := c.CreateTable(ctx, table.Spec{Name: "counters", Width: 2, Rule: table.Rule{Kind: table.Sum}})
		if err != nil {
			return nil, err
		}
		rng := rand.New(rand.NewPCG(1, 2))
		push := func(n int) error {
			for i := range n {
				ks := randomKeys(rng, 64, keys)
				if err := tb.Push(ks, filled(2*len(ks), 1)).Wait(ctx); err != nil {
					return fmt.Errorf("push %d: %w", i, err)
				}
				acked += int64(2 * len(ks))
			}
			return nil
		}
		if err := push(100); err != nil {
			return nil, err
		}
		if _, err := l.AddServer(ctx); err != nil {
			return nil, err
		}
		if err := awaitLayout(ctx, l, func(lay *layout.Layout) bool { return len(lay.Servers) == 2 && len(lay.Joining) == 0 }); err != nil {
			return nil, err
		}
		if err := push(100); err != nil {
			return nil, err
		}
		l.KillServer(0)
		if err := awaitLayout(ctx, l, func(lay *layout.Layout) bool { return len(lay.Servers) == 1 }); err != nil {
			return nil, err
		}
		if err := push(50); err != nil {
			return nil, fmt.Errorf("after the first server's death: %w", err)
		}
		return nil, holdsAcked(ctx, c, tb, keys, func() int64 { return acked })
	})
	if err != nil {
		t.Fatal(err)
	}
}
