package node

import (
	"context"
	"testing"

	"github.com/terrace-ml/terrace/internal/process/evict"
)

// TestBeforeJoin: a notice while joining ends the join's context with
// errNoticeBeforeJoin and is handed on to the drain; without one, the
// drain reads the notices themselves.
func TestBeforeJoin(t *testing.T) {
	notices := make(chan evict.Notice, 1)
	jctx, joined := beforeJoin(t.Context(), notices)
	notices <- evict.Notice{Source: "signal"}
	<-jctx.Done()
	if !noticedBeforeJoin(jctx) {
		t.Fatalf("cause %v, want %v", context.Cause(jctx), errNoticeBeforeJoin)
	}
	if n := <-joined(); n.Source != "signal" {
		t.Fatalf("the notice handed on: %+v", n)
	}

	quiet := make(chan evict.Notice)
	jctx, joined = beforeJoin(t.Context(), quiet)
	if got := joined(); got != (<-chan evict.Notice)(quiet) || jctx.Err() != nil {
		t.Fatalf("without a notice: notices %v (want the same channel), context %v", got, jctx.Err())
	}
}
