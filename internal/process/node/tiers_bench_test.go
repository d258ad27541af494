package node

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/tier"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// BenchmarkStage2Push pushes 64 keys at a time through a stage-2 cluster
// (k ActivePS in front of one BackupPS, sync interval 100 ms),
// from one pusher that waits for each acknowledgement and from eight at
// once: what the loss ledger costs a push (docs/design/tiers.md, "The
// stream", 5) is the difference against a build without it.
func BenchmarkStage2Push(b *testing.B) {
	for _, k := range []int{1, 2} {
		b.Run(map[int]string{1: "k=1", 2: "k=2"}[k], func(b *testing.B) { benchStage2Push(b, k) })
	}
}

func benchStage2Push(b *testing.B, k int) {
	// k = 2: two ActivePS chain-replicate, and the ledger's round trip
	// runs beside the chain's.
	tc := startTierCluster(b, 1, k, k)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := ps.Dial(ctx, tc.coordAddr, ps.Options{JoinAs: "pusher"})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	tbl, err := c.CreateTable(ctx, table.Spec{Name: "bench", Width: 1})
	if err != nil {
		b.Fatal(err)
	}
	if err := tc.switchTo(ctx, api.NewClient(tc.coordAddr, nil), tier.Stage2); err != nil {
		b.Fatal(err)
	}
	const keys = 1 << 14
	vals := make([]float32, 64)
	for i := range vals {
		vals[i] = 1
	}
	for _, pushers := range []int{1, 8} {
		b.Run(map[int]string{1: "pushers=1", 8: "pushers=8"}[pushers], func(b *testing.B) {
			var next atomic.Int64
			errs := make(chan error, pushers)
			start := time.Now()
			for range pushers {
				go func() {
					batch := make([]uint64, 64)
					for {
						r := next.Add(1)
						if r > int64(b.N) {
							errs <- nil
							return
						}
						for i := range batch {
							batch[i] = uint64((int(r)*64 + i*(keys/64)) % keys)
						}
						sortUnique(&batch)
						if err := tbl.Push(batch, vals[:len(batch)]).Wait(ctx); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			for range pushers {
				if err := <-errs; err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pushes/s")
		})
	}
}
