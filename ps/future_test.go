package ps

import (
	"context"
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
