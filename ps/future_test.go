package ps

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestAllOfFinishingFutures: All must complete whenever its futures do,
// including one that completes while All registers with it. (A callback
// registered between finish's copy of the callbacks and its close of done
// was once never called, and the All never completed.)
func TestAllOfFinishingFutures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 50000 {
		f := newFuture(1)
		go f.partDone(nil)
		if err := All(f).Wait(ctx); err != nil {
			t.Fatalf("All of a completed future, try %d: %v", i, err)
		}
	}
}

// TestWaitGivesUp: a wait that reaches its deadline is ErrTimeout; one
// whose context is canceled is the cancellation, not a timeout.
func TestWaitGivesUp(t *testing.T) {
	f := newFuture(1) // never completes
	short, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := f.Wait(short); !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline: %v, want ErrTimeout and DeadlineExceeded", err)
	}
	canceled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := f.Wait(canceled); errors.Is(err, ErrTimeout) || !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v, want Canceled and not ErrTimeout", err)
	}
}
