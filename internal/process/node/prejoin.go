package node

import (
	"context"
	"errors"

	"github.com/terrace-ml/terrace/internal/process/evict"
)

// errNoticeBeforeJoin: a notice (SIGTERM) came while the node waited for
// its coordinator or its join; it has nothing to hand off, so it leaves.
var errNoticeBeforeJoin = errors.New("notice before joining")

// beforeJoin watches notices while a node joins: one that comes ends the
// returned context with errNoticeBeforeJoin. The drain reads notices only
// once joined, so a server waiting for an absent coordinator ignored
// SIGTERM for its whole join timeout and then exited 1. joined stops the
// watch and returns the notices for the drain: the one taken, should it
// have come too late to stop the join, else notices itself.
func beforeJoin(ctx context.Context, notices <-chan evict.Notice) (context.Context, func() <-chan evict.Notice) {
	if notices == nil {
		return ctx, func() <-chan evict.Notice { return nil }
	}
	jctx, cancel := context.WithCancelCause(ctx)
	stop, done := make(chan struct{}), make(chan struct{})
	took := make(chan evict.Notice, 1)
	go func() {
		defer close(done)
		select {
		case n, ok := <-notices:
			if ok {
				took <- n
				cancel(errNoticeBeforeJoin)
			}
		case <-stop:
		case <-ctx.Done():
		}
	}()
	return jctx, func() <-chan evict.Notice {
		close(stop)
		<-done
		select {
		case n := <-took:
			took <- n
			return took
		default:
			return notices
		}
	}
}

// noticedBeforeJoin reports whether jctx (of beforeJoin, or a context
// derived from it) ended on a notice.
func noticedBeforeJoin(jctx context.Context) bool {
	return errors.Is(context.Cause(jctx), errNoticeBeforeJoin)
}
