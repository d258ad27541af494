package ps

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Future is the result of an asynchronous operation.
type Future struct {
	done      chan struct{}
	remaining atomic.Int64
	refused   atomic.Int64
	once      sync.Once
	mu        sync.Mutex
	err       error
	onDone    []func(error)
}

func newFuture(parts int) *Future {
	f := &Future{done: make(chan struct{})}
	f.remaining.Store(int64(parts))
	if parts == 0 {
		f.finish(nil)
	}
	return f
}

func failed(err error) *Future {
	f := &Future{done: make(chan struct{})}
	f.finish(err)
	return f
}

// partDone records one finished part; the future completes with the first
// error or when every part has finished.
func (f *Future) partDone(err error) {
	if err != nil {
		f.finish(err)
		return
	}
	if f.remaining.Add(-1) == 0 {
		f.finish(nil)
	}
}

func (f *Future) finish(err error) {
	f.once.Do(func() {
		// done closes under mu: then, which checks done under mu, either
		// sees it closed and calls back itself, or registers a callback
		// that this copy includes. (Closed after the unlock, a callback
		// registered in between was never called.)
		f.mu.Lock()
		f.err = err
		cbs := f.onDone
		f.onDone = nil
		close(f.done)
		f.mu.Unlock()
		for _, cb := range cbs {
			cb(err)
		}
	})
}

// then runs fn when f completes (at once if it has).
func (f *Future) then(fn func(error)) {
	f.mu.Lock()
	select {
	case <-f.done:
		err := f.err
		f.mu.Unlock()
		fn(err)
		return
	default:
	}
	f.onDone = append(f.onDone, fn)
	f.mu.Unlock()
}

// Done is closed when the operation has completed.
func (f *Future) Done() <-chan struct{} { return f.done }

// Err returns the operation's error once Done is closed.
func (f *Future) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Refused is how many keys' updates the servers refused as non-finite.
func (f *Future) Refused() int64 { return f.refused.Load() }

// Wait blocks until the operation completes or ctx ends. At ctx's deadline
// it returns an error wrapping both ErrTimeout and the context's error;
// when ctx is canceled, one wrapping the context's error (a canceled wait
// did not time out). The operation itself goes on, and its slices stay in
// use until Done.
func (f *Future) Wait(ctx context.Context) error {
	select {
	case <-f.done:
		return f.Err()
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
		}
		return fmt.Errorf("ps: wait given up: %w", ctx.Err())
	}
}

// All returns a future that completes when every one of fs has.
func All(fs ...*Future) *Future {
	all := newFuture(len(fs))
	for _, f := range fs {
		f.then(func(err error) {
			all.refused.Add(f.Refused())
			all.partDone(err)
		})
	}
	return all
}
