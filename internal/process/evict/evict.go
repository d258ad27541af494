package evict

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrBadConfig is returned by a source whose fields cannot work (an empty
// path, an unparseable URL), so a misconfiguration fails at once instead of
// silently never delivering a notice.
var ErrBadConfig = errors.New("evict: bad source configuration")

// Notice says that the machine will be taken away.
type Notice struct {
	// Source names where the notice came from: "file", "http", "aws",
	// "gcp" or "signal".
	Source string
	// Deadline is when the machine goes. A source leaves it zero when it
	// does not know; Merge then sets it to the time it received the notice
	// plus the grace period.
	Deadline time.Time
	// Detail is for logs: what the source saw.
	Detail string
}

// Source watches one way of learning about an eviction.
//
// Watch sends at most one notice to out and returns when ctx ends (nil), on
// a fatal error, or, for sources with nothing more to do, after sending.
// Transient failures (a metadata request timing out) are retried, not
// returned. Watch never blocks on out past the end of ctx.
type Source interface {
	Watch(ctx context.Context, out chan<- Notice) error
}

// Merge runs every source until ctx ends and returns a channel that carries
// the first notice any of them sends, with a zero Deadline replaced by now
// plus grace, and is then closed. Later notices are dropped: the node is
// already draining. If no notice arrives, the channel is closed once every
// source has returned (ctx ended, or all failed), so a closed channel
// without a notice means nothing is watching any more; with no sources it
// is closed at once.
//
// The sources keep running after the first notice until ctx ends, so the
// signal source keeps catching a SIGTERM that the shutdown of an evicted
// machine sends while the node drains, and the HTTP source keeps answering
// GET /evict. Cancel ctx when the node exits. Fatal source errors are
// dropped; use MergeWithErrors to see them.
func Merge(ctx context.Context, grace time.Duration, sources ...Source) <-chan Notice {
	return MergeWithErrors(ctx, grace, nil, sources...)
}

// MergeWithErrors is Merge that also calls report, if not nil, with each
// source's fatal error (for example an HTTP source that could not listen).
// report is called from the source's goroutine and must not block for long.
func MergeWithErrors(ctx context.Context, grace time.Duration, report func(error), sources ...Source) <-chan Notice {
	out := make(chan Notice, 1)
	// Each source sends at most once, so this buffer means a source never
	// waits for the loop below.
	in := make(chan Notice, len(sources))
	var wg sync.WaitGroup
	for _, s := range sources {
		wg.Go(func() {
			if err := s.Watch(ctx, in); err != nil && report != nil {
				report(err)
			}
		})
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	go func() {
		deliver := func(n Notice) {
			if n.Deadline.IsZero() {
				n.Deadline = time.Now().Add(grace)
			}
			out <- n // buffered and sent once: never blocks
			close(out)
		}
		sent := false
		for {
			select {
			case n := <-in:
				if !sent {
					deliver(n)
					sent = true
				}
			case <-done:
				if !sent {
					// A source may send and return at once; both cases
					// are then ready and select may have picked this one.
					select {
					case n := <-in:
						deliver(n)
					default:
						close(out)
					}
				}
				return
			}
		}
	}()
	return out
}

// send delivers n unless ctx ends first.
func send(ctx context.Context, out chan<- Notice, n Notice) {
	select {
	case out <- n:
	case <-ctx.Done():
	}
}

// poll calls check at once and then every interval until it reports a
// notice, which it sends, or ctx ends. check handles its own errors: every
// failure of a polling source is transient.
func poll(ctx context.Context, interval time.Duration, check func(context.Context) (Notice, bool), out chan<- Notice) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, ok := check(ctx); ok {
			send(ctx, out, n)
			return
		}
		// Reset after the check, not on a ticker, so a slow request
		// never makes checks pile up.
		t.Reset(interval)
	}
}
