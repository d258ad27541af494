package evict

import (
	"context"
	"testing"
	"time"
)

// wait bounds every wait in these tests: long enough for a loaded CI
// machine, short enough that a hang fails instead of timing out the run.
const wait = 5 * time.Second

// running is one Source's Watch running in the background.
type running struct {
	notices chan Notice
	done    chan error
	cancel  context.CancelFunc
	err     error
	stopped bool
}

// start runs s.Watch until the test ends or stop is called.
func start(t *testing.T, s Source) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{notices: make(chan Notice, 4), done: make(chan error, 1), cancel: cancel}
	go func() { r.done <- s.Watch(ctx, r.notices) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// notice waits for the notice.
func (r *running) notice(t *testing.T) Notice {
	t.Helper()
	select {
	case n := <-r.notices:
		return n
	case err := <-r.done:
		r.stopped, r.err = true, err
		// Sources with nothing left to do return right after sending, and
		// select may have seen the return first.
		select {
		case n := <-r.notices:
			return n
		default:
		}
		t.Fatalf("Watch returned %v without sending a notice", err)
	case <-time.After(wait):
		t.Fatal("no notice")
	}
	return Notice{}
}

// stop cancels Watch and returns its error, failing if it does not return.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	if !r.stopped {
		select {
		case r.err = <-r.done:
			r.stopped = true
		case <-time.After(wait):
			t.Fatal("Watch did not return after its context ended")
		}
	}
	return r.err
}

// noMoreNotices fails if a second notice was sent. Call after stop.
func (r *running) noMoreNotices(t *testing.T) {
	t.Helper()
	if len(r.notices) > 0 {
		t.Fatalf("second notice %+v", <-r.notices)
	}
}

// near fails unless got is within tol of want.
func near(t *testing.T, what string, got, want time.Time, tol time.Duration) {
	t.Helper()
	if d := got.Sub(want); d < -tol || d > tol {
		t.Fatalf("%s = %v, want %v ± %v", what, got, want, tol)
	}
}
