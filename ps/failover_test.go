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

// TestServerFailureLosesNoAckedPush kills one of three servers (k = 2)
// while two workers push +1 to random counters, and checks that the final
// counters hold every acknowledged push exactly once.
func TestServerFailureLosesNoAckedPush(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 3, Workers: 2, Replication: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const keys = 5000
	var acked atomic.Int64
	var perKeyMu sync.Mutex
	perKey := make([]int, keys)
	var once sync.Once
	var maxStall atomic.Int64
	_, err = l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) {
		tb, err := c.CreateTable(ctx, table.Spec{Name: "counters", Width: 1})
		if err != nil {
			return nil, err
		}
		rng := rand.New(rand.NewPCG(uint64(c.Rank()), 1))
		last := time.Now()
		before := c.Layout()
		for i := range 400 {
			if i == 150 && c.Rank() == 0 {
				once.Do(func() { l.KillServer(1) })
			}
			ks := randomKeys(rng, 50, keys)
			ones := filled(len(ks), 1)
			wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
			err := tb.Push(ks, ones).Wait(wctx)
			wcancel()
			if err != nil {
				return nil, fmt.Errorf("push %d: %w", i, err)
			}
			acked.Add(int64(len(ks)))
			perKeyMu.Lock()
			for _, k := range ks {
				perKey[k]++
			}
			perKeyMu.Unlock()
			now := time.Now()
			if d := now.Sub(last); d.Nanoseconds() > maxStall.Load() {
				maxStall.Store(d.Nanoseconds())
			}
			last = now
		}
		if c.Rank() != 0 {
			return nil, c.Barrier(ctx)
		}
		if err := c.Barrier(ctx); err != nil {
			return nil, err
		}
		got, err := pullAll(ctx, tb, keys)
		if err != nil {
			return nil, err
		}
		if sum := total(got); sum != acked.Load() {
			lay := c.Layout()
			bad := 0
			for k, v := range got {
				if int(v) != perKey[k] && bad < 10 {
					bad++
					r0, _ := before.Ring()
					r1, _ := lay.Ring()
					var c0, c1 []string
					for _, i := range r0.Chain(uint64(k/64), 2, nil) {
						c0 = append(c0, r0.Servers[i].ID)
					}
					for _, i := range r1.Chain(uint64(k/64), 2, nil) {
						c1 = append(c1, r1.Servers[i].ID)
					}
					t.Logf("key %d slot %d: %v, want %d; chain %v at epoch %d, %v at %d", k, k/64, v, perKey[k], c0, before.Epoch, c1, lay.Epoch)
				}
			}
			return nil, fmt.Errorf("counters hold %d increments, %d were acknowledged", sum, acked.Load())
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("acknowledged %d increments; longest wait for one push %v", acked.Load(), time.Duration(maxStall.Load()))
}

// TestBSPServerFailureLosesNoAckedPush: under BSP a head holds a push until
// every worker has finished its clock, but acknowledges it once the rest of
// its chains hold it too. Killing a server right after the pushes of a
// clock were acknowledged, before the clock completes, must lose none.
func TestBSPServerFailureLosesNoAckedPush(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 3, Workers: 2, Replication: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const keys, steps = 3000, 60
	var acked atomic.Int64
	var once sync.Once
	_, err = l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) {
		tb, err := c.CreateTable(ctx, table.Spec{Name: "counters", Width: 1, Consistency: table.Consistency{Model: table.BSP}})
		if err != nil {
			return nil, err
		}
		rng := rand.New(rand.NewPCG(uint64(c.Rank()), 7))
		for i := range steps {
			ks := randomKeys(rng, 100, keys)
			if err := tb.Push(ks, filled(len(ks), 1)).Wait(ctx); err != nil {
				return nil, fmt.Errorf("push %d: %w", i, err)
			}
			acked.Add(int64(len(ks)))
			if i == steps/2 && c.Rank() == 0 {
				// This clock's pushes are acknowledged, and it cannot
				// complete before this worker ticks.
				once.Do(func() { l.KillServer(1) })
			}
			if err := c.Tick().Wait(ctx); err != nil {
				return nil, fmt.Errorf("tick %d: %w", i, err)
			}
		}
		return nil, holdsAcked(ctx, c, tb, keys, acked.Load)
	})
	if err != nil {
		t.Fatal(err)
	}
}
