package ps_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// rowCounts is a partition's state in TestStateMovesWithPartition: how
// many times each row was trained, and which rank saved it last.
type rowCounts struct {
	rank   int
	writer int
	counts []uint8
}

func (s *rowCounts) MarshalBinary() ([]byte, error) {
	return append(binary.AppendUvarint(nil, uint64(s.rank)), s.counts...), nil
}

func (s *rowCounts) UnmarshalBinary(b []byte) error {
	w, n := binary.Uvarint(b)
	if n <= 0 || len(b)-n != len(s.counts) {
		return fmt.Errorf("row counts: %d bytes for %d rows", len(b), len(s.counts))
	}
	s.writer = int(w)
	copy(s.counts, b[n:])
	return nil
}

// TestStateMovesWithPartition: a worker dies part way through a partition
// (after recording progress, and after training rows past it); the worker
// that takes the partition over gets its state as of the recorded offset,
// so that every row is in the state exactly once per epoch, however many
// times it was trained.
func TestStateMovesWithPartition(t *testing.T) {
	const rows, epochs, batch = 120, 3, 10
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 2, Workers: 2, Replication: 2, Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	errDie := errors.New("worker dies")
	var takenOver, repeated atomic.Int64
	var mu sync.Mutex
	var wrong []string
	job := func(ctx context.Context, c *ps.Client) (any, error) {
		c.KeepState(func(int) ps.PartitionState {
			return &rowCounts{rank: c.Rank(), writer: -1, counts: make([]uint8, rows)}
		})
		tb, err := c.CreateTable(ctx, table.Spec{Name: "rows", Width: 1})
		if err != nil {
			return nil, err
		}
		for e := range epochs {
			err := c.EachPartition(ctx, e, func(ctx context.Context, ls *ps.Lease) error {
				st := ls.State().(*rowCounts)
				if st.writer >= 0 && st.writer != c.Rank() {
					takenOver.Add(1)
				}
				for off := ls.Offset; off < rows; off += batch {
					keys := make([]uint64, 0, batch)
					for r := off; r < off+batch; r++ {
						st.counts[r]++
						keys = append(keys, uint64(ls.Partition*rows+r))
					}
					if err := tb.Push(keys, filled(len(keys), 1)).Wait(ctx); err != nil {
						return err
					}
					// Rank 1 dies in the first partition it trains after
					// epoch 0, two batches after its last progress: those
					// rows are trained again by rank 0. (Not "in epoch 1":
					// under load rank 0 may lease every partition of it.)
					if c.Rank() == 1 && e >= 1 && off >= 5*batch {
						repeated.Add(2 * batch)
						return errDie
					}
					if off%(3*batch) == 0 || off+batch == rows {
						continue
					}
					if err := ls.Progress(ctx, off+batch); err != nil {
						return err
					}
				}
				for r, n := range st.counts {
					if int(n) != e+1 {
						mu.Lock()
						wrong = append(wrong, fmt.Sprintf("epoch %d partition %d row %d: in the state %d times", e, ls.Partition, r, n))
						mu.Unlock()
						break
					}
				}
				return ls.Complete(ctx, rows)
			})
			if err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = node.RunWorker(ctx, node.WorkerConfig{ID: fmt.Sprintf("worker-%d", i), Coordinator: l.CoordAddr}, job)
		}()
	}
	wg.Wait()
	if (errs[0] != nil || !errors.Is(errs[1], errDie)) && (errs[1] != nil || !errors.Is(errs[0], errDie)) {
		t.Fatalf("worker errors %v; want rank 0 to finish and rank 1 to die", errs)
	}
	if len(wrong) > 0 {
		t.Fatalf("state did not move with its partition: %v", wrong)
	}
	if takenOver.Load() == 0 {
		t.Fatal("no partition was taken over with another worker's state")
	}
	t.Logf("%d leases resumed from another worker's state; %d rows trained twice, in the state once", takenOver.Load(), repeated.Load())
}
