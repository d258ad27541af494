package ps

import (
	"context"
	"fmt"

	"github.com/terrace-ml/terrace/table"
)

// barrierTable is a one-key BSP table: a BSP read at clock c waits until
// every worker has ended clock c-1, which is exactly a barrier.
const barrierTable = "terrace.barrier"

// Barrier ends the worker's current clock and waits until every worker has
// ended it too (or has finished). Workers must tick equally often between
// barriers for it to line them up.
func (c *Client) Barrier(ctx context.Context) error {
	t, err := c.CreateTable(ctx, table.Spec{Name: barrierTable, Width: 1, Consistency: table.Consistency{Model: table.BSP}})
	if err != nil {
		return err
	}
	if err := c.Tick().Wait(ctx); err != nil {
		return fmt.Errorf("ps: barrier: %w", err)
	}
	var v [1]float32
	if err := t.Pull([]uint64{0}, v[:]).Wait(ctx); err != nil {
		return fmt.Errorf("ps: barrier: %w", err)
	}
	return nil
}
