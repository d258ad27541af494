package ps_test

import (
	"context"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// BenchmarkAccount is the examples account's cost where it is highest: a
// partition loop bound by small pushes (a 60-key push per minibatch of 10
// rows, the loop's default window of 8), without and with the account's
// push beside each minibatch's (docs/design/observe.md, "Examples
// repeated and skipped"). One op is one minibatch.
func BenchmarkAccount(b *testing.B) {
	for _, account := range []bool{false, true} {
		name := "off"
		if account {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 1, Workers: 1, Replication: 1, Partitions: 1, Account: account})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			const batch = 10
			rows := make([]int, b.N*batch)
			for i := range rows {
				rows[i] = i
			}
			_, err = l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) {
				g, err := c.CreateTable(ctx, table.Spec{Name: "g", Width: 1, Rule: table.Rule{Kind: table.Sum}, Consistency: table.Consistency{Model: table.ASP}})
				if err != nil {
					return nil, err
				}
				keys := make([]uint64, 60)
				vals := make([]float32, 60)
				for i := range keys {
					keys[i] = uint64(i * 3)
				}
				b.ResetTimer()
				err = c.RunPasses(ctx, ps.Passes{N: 1, Loop: func(int) ps.Loop {
					return ps.Loop{Order: func(int, int) []int { return rows }, Batch: batch,
						Step: func(context.Context, ps.Batch) (*ps.Future, error) { return g.Push(keys, vals), nil }}
				}})
				b.StopTimer()
				return nil, err
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}
