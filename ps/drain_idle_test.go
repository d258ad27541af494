package ps

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
)

// TestDrainWhileWaitingForWork: a worker waiting for work when it is told
// to drain (an eviction notice) holds no piece, and stops waiting at once
// with ErrDrained, instead of leaving only at its notice's deadline
// (docs/open.md, issue 11).
func TestDrainWhileWaitingForWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctl := newFakeCoord(1)
		// Rank 0 holds the only piece: rank 1 waits for work.
		if _, err := ctl.Acquire(t.Context(), 0, 0); err != nil {
			t.Fatal(err)
		}
		c := bareClient(ctl, 1)
		done := make(chan error, 1)
		go func() {
			done <- c.EachPartition(t.Context(), 0, Loop{Order: identity(10), Batch: 5,
				Step: func(context.Context, Batch) (*Future, error) { return nil, nil }})
		}()
		synctest.Wait() // rank 1 is parked in Acquire
		c.Drain()
		if err := <-done; !errors.Is(err, ErrDrained) {
			t.Fatalf("a worker waiting for work, drained: %v, want ErrDrained", err)
		}
		if n := len(ctl.granted); n != 1 {
			t.Errorf("%d grants, want rank 0's only", n)
		}
	})
}
