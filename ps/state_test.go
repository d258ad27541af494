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
// so that every row is in the state exactly once per pass, however many
// times it was trained.
func TestStateMovesWithPartition(t *testing.T) {
	const rows, passes, batch = 120, 3, 10
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
	// Rank 0 holds back its leases after pass 0 until rank 1 has one: on a
	// loaded host rank 0 could lease every partition of passes 1 and 2,
	// and rank 1 then never died (CI, 2026-11-27).
	rank1Leased := make(chan struct{})
	var leasedOnce sync.Once
	job := func(ctx context.Context, c *ps.Client) (any, error) {
		c.KeepState(func(int) ps.PartitionState {
			return &rowCounts{rank: c.Rank(), writer: -1, counts: make([]uint8, rows)}
		})
		tb, err := c.CreateTable(ctx, table.Spec{Name: "rows", Width: 1})
		if err != nil {
			return nil, err
		}
		order := func(_, _ int) []int {
			o := make([]int, rows)
			for r := range o {
				o[r] = r
			}
			return o
		}
		for pass := range passes {
			err := c.EachPartition(ctx, pass, ps.Loop{
				Order: order, Batch: batch, ProgressEvery: 2,
				Begin: func(ctx context.Context, ls *ps.Lease) error {
					if st := ls.State().(*rowCounts); st.writer >= 0 && st.writer != c.Rank() {
						takenOver.Add(1)
					}
					switch {
					case ls.Pass >= 1 && c.Rank() == 1:
						leasedOnce.Do(func() { close(rank1Leased) })
					case ls.Pass >= 1:
						select {
						case <-rank1Leased:
						case <-ctx.Done():
							return ctx.Err()
						}
					}
					return nil
				},
				Step: func(ctx context.Context, b ps.Batch) (*ps.Future, error) {
					st := b.Lease.State().(*rowCounts)
					keys := make([]uint64, 0, len(b.Rows))
					for _, r := range b.Rows {
						st.counts[r]++
						keys = append(keys, uint64(b.Lease.Partition*rows+r))
					}
					push := tb.Push(keys, filled(len(keys), 1))
					// Rank 1 dies in the first partition it trains after
					// pass 0, past its first progress records: the rows
					// since the last are trained again by rank 0. (Not
					// "in pass 1": under load rank 0 may lease every
					// partition of it.)
					if c.Rank() == 1 && pass >= 1 && b.Lo >= 5*batch {
						repeated.Add(int64(b.Hi - b.Lease.Offset))
						return push, errDie
					}
					return push, nil
				},
				Completed: func(ls *ps.Lease) {
					for r, n := range ls.State().(*rowCounts).counts {
						if int(n) != ls.Pass+1 {
							mu.Lock()
							wrong = append(wrong, fmt.Sprintf("pass %d partition %d row %d: in the state %d times", ls.Pass, ls.Partition, r, n))
							mu.Unlock()
							break
						}
					}
				},
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
	t.Logf("%d leases resumed from another worker's state; rank 1 trained %d rows of its last lease before it died, those past its last record twice, in the state once", takenOver.Load(), repeated.Load())
}
