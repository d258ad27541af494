package ps

import (
	"context"
	"fmt"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/table"
)

// The examples account (docs/design/observe.md, "Examples repeated and
// skipped"): with every minibatch the partition loop pushes the number of
// its rows to ExamplesTable, under a key of the minibatch's pass and
// partition, and records the minibatch as trained only once that push is
// acknowledged with the step's own. After a pass, the worker that
// evaluates it pulls the pass's counts: a partition counted more times
// than it has rows trained some rows twice (a dead worker's rows after
// its last progress record, which its successor trains again), one
// counted fewer lost some (acknowledged updates lost, or rows nobody
// trained). The audit (internal/harness/drill) counts the same per row,
// at the cost of a key per row; this costs a key per partition and pass,
// so it is always on.

// ExamplesTable is the table of the examples account.
const ExamplesTable = "terrace.examples"

// examplesSpec is ExamplesTable's spec: counters the servers add to (sum
// rule), never waiting on clocks (ASP).
func examplesSpec() table.Spec {
	return table.Spec{Name: ExamplesTable, Width: 1, Rule: table.Rule{Kind: table.Sum}, Consistency: table.Consistency{Model: table.ASP}}
}

// A count is a float32, exact to 2^24: a partition's rows are counted in
// chunks of 2^chunkBits rows (by the offset a minibatch starts at), so
// that a chunk trained four times over still counts exactly.
const chunkBits = 22

// Key layout: pass above bit 36, partition in bits 12-35, chunk below.
const (
	passShift = 36
	partShift = 12
	maxPart   = 1<<(passShift-partShift) - 1
	maxChunk  = 1<<partShift - 1
)

// exampleKey is the ExamplesTable key of rows of (pass, partition) from
// offset lo.
func exampleKey(pass, part, lo int) uint64 {
	return uint64(pass)<<passShift | uint64(part)<<partShift | uint64(lo>>chunkBits)
}

// keepAccount creates ExamplesTable and makes the partition loops count
// into it; false (and a warning) when it cannot.
func (c *Client) keepAccount(ctx context.Context) bool {
	l := c.Layout()
	if l == nil || !l.Account {
		return false // not asked for, or a bare client (tests)
	}
	if l.Partitions-1 > maxPart {
		c.log.Warn("no examples account: too many partitions", "partitions", l.Partitions)
		return false
	}
	t, err := c.CreateTable(ctx, examplesSpec())
	if err != nil {
		c.log.Warn("no examples account", "err", err)
		return false
	}
	c.mu.Lock()
	c.examples = t
	c.mu.Unlock()
	return true
}

func (c *Client) examplesTable() *Table {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.examples
}

// countExamples pushes the count of b's rows; nil when no account is
// kept. The slices pushed are never written again.
func countExamples(t *Table, b Batch) *Future {
	if t == nil || b.Hi <= b.Lo {
		return nil
	}
	return t.Push([]uint64{exampleKey(b.Lease.Pass, b.Lease.Partition, b.Lo)}, []float32{float32(b.Hi - b.Lo)})
}

// accountPass reads the examples account of pass (from 0), whose
// partition p has size(p) rows. Call it once every partition of the pass
// is trained: the loop records a minibatch only once its count is
// acknowledged, so the counts are final then.
func (c *Client) accountPass(ctx context.Context, pass int, size func(p int) int) (*api.ExamplesAccount, error) {
	t := c.examplesTable()
	if t == nil {
		return nil, nil
	}
	parts := c.Layout().Partitions
	rows := make([]int64, parts)
	var keys []uint64
	var owner []int // the partition of each key
	for p := range parts {
		rows[p] = int64(size(p))
		chunks := int(max(rows[p]-1, 0) >> chunkBits)
		if chunks > maxChunk {
			return nil, fmt.Errorf("%w: partition %d has %d rows, too many for the examples account", ErrBadArgument, p, rows[p])
		}
		for ch := 0; ch <= chunks; ch++ {
			keys = append(keys, exampleKey(pass, p, ch<<chunkBits))
			owner = append(owner, p)
		}
	}
	counts := make([]float32, len(keys))
	if err := t.Pull(keys, counts).Wait(ctx); err != nil {
		return nil, fmt.Errorf("ps: examples account of pass %d: %w", pass+1, err)
	}
	trained := make([]int64, parts)
	for i, v := range counts {
		trained[owner[i]] += int64(v)
	}
	a := &api.ExamplesAccount{}
	for p := range parts {
		a.Rows += rows[p]
		a.Trained += trained[p]
		a.Repeated += max(0, trained[p]-rows[p])
		a.Skipped += max(0, rows[p]-trained[p])
	}
	return a, nil
}
