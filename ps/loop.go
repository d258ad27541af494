package ps

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// Batch is one minibatch of a lease, as the partition loop hands it to a
// Step.
type Batch struct {
	// Lease is the lease the minibatch belongs to: its Pass, Partition and
	// State.
	Lease *Lease
	// Lo and Hi are the minibatch's offsets in the partition's pass order,
	// and Rows the row numbers there, Loop.Order(pass, partition)[Lo:Hi];
	// a step must not change them.
	Lo, Hi int
	Rows   []int
	// Next are the rows of the minibatches that follow in the lease, up to
	// Loop.Lookahead of them, for a step that prefetches; empty at the
	// lease's end. A drain or a cut may still stop the loop before them.
	// The loop reuses Next itself for the next step; the rows it names
	// stay valid.
	Next [][]int
}

// A Step trains one minibatch and returns a future that completes once
// the servers have acknowledged every update the step pushed (nil if it
// pushed nothing, or waited for its pushes itself). A step with partition
// state (KeepState) changes it for b.Rows only, and before it returns.
type Step func(ctx context.Context, b Batch) (*Future, error)

// Loop is what EachPartition needs to train a pass: the rows of each
// partition, the minibatch size and the step. The loop does the rest of
// the lease protocol, which is where exactly-once training is won or lost:
// offsets, the acknowledgement watermark, progress records with the
// partition state, drains and the lease's end (docs/design/partloop.md).
type Loop struct {
	// Order returns the row numbers of a partition in a pass's order. It
	// must return the same rows in the same order on every worker, since a
	// lease taken over goes on from an offset into it.
	Order func(pass, partition int) []int
	// Batch is the number of rows in a minibatch.
	Batch int
	Step  Step
	// Begin, when set, is called when a lease starts, before its first
	// minibatch (also for a lease with nothing left to train); an error
	// stops the loop.
	Begin func(ctx context.Context, l *Lease) error
	// Completed, when set, is called once a lease's end is recorded.
	Completed func(l *Lease)
	// ProgressEvery is how many minibatches pass between progress records
	// (8 if 0): at most what a dead worker's successor trains again.
	ProgressEvery int
	// Window is how many minibatches may have pushes unacknowledged at
	// once (8 if 0); the loop waits for the oldest beyond that.
	Window int
	// Lookahead is how many of the following minibatches Batch.Next
	// names (1 if 0).
	Lookahead int
}

// Defaults of Loop's fields.
const (
	defaultProgressEvery = 8
	defaultWindow        = 8
)

func (lp Loop) withDefaults() (Loop, error) {
	if lp.Order == nil || lp.Step == nil || lp.Batch < 1 {
		return lp, fmt.Errorf("%w: a loop needs Order, Step and a positive Batch (got %d)", ErrBadArgument, lp.Batch)
	}
	if lp.ProgressEvery <= 0 {
		lp.ProgressEvery = defaultProgressEvery
	}
	if lp.Window <= 0 {
		lp.Window = defaultWindow
	}
	lp.Lookahead = max(lp.Lookahead, 1)
	return lp, nil
}

// An Observer sees every minibatch that a client's partition loops train,
// right after its step, and may push updates of its own: the loop waits
// for the future it returns as for the step's before it records the rows
// as trained. The drill's exactly-once audit is one
// (internal/harness/drill).
type Observer interface {
	Observe(ctx context.Context, b Batch) (*Future, error)
}

// Observe makes o see every minibatch of the client's partition loops
// from the next lease on; nil stops it.
func (c *Client) Observe(o Observer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.observer = o
}

func (c *Client) currentObserver() Observer {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.observer
}

// EachPartition trains every partition of pass that this worker leases,
// minibatch by minibatch with loop.Step, until the pass is done (every
// partition trained by some worker): it is the pass's barrier. After a
// Drain it stops at the next minibatch boundary, records how far it got
// (and the partition state there) and returns an error wrapping
// ErrDrained.
func (c *Client) EachPartition(ctx context.Context, pass int, loop Loop) error {
	loop, err := loop.withDefaults()
	if err != nil {
		return err
	}
	for {
		if c.Draining() {
			return ErrDrained
		}
		l, err := c.work(ctx, pass)
		if err != nil {
			return err
		}
		if l == nil {
			return nil
		}
		if err := c.train(ctx, l, &loop); err != nil {
			// Counted from 1, as the apps, status and events count.
			return fmt.Errorf("ps: pass %d partition %d: %w", pass+1, l.Partition, err)
		}
	}
}

// leaseRun is one lease being trained.
type leaseRun struct {
	l        *Lease
	loop     *Loop
	obs      Observer
	examples *Table // ExamplesTable, or nil when no account is kept
	order    []int
	// off is the next row not started; end where the lease stops.
	off, end int
	steps    int // minibatches trained under this lease
	recorded int // steps at the last periodic record
	// sent are the minibatches whose pushes are not all acknowledged,
	// oldest first; record is the progress record in flight, if any.
	sent   []sentBatch
	record *Future
	// next is Batch.Next's backing array, reused step after step.
	next [][]int
}

type sentBatch struct {
	hi  int // the offset after the minibatch
	ack *Future
}

// train runs one lease to its end, a drain or an error.
func (c *Client) train(ctx context.Context, l *Lease, loop *Loop) error {
	r := &leaseRun{l: l, loop: loop, obs: c.currentObserver(), examples: c.examplesTable(), order: loop.Order(l.Pass, l.Partition), off: l.Offset}
	r.end = len(r.order)
	if l.end != api.ToEnd {
		r.end = min(l.end, r.end)
	}
	if l.Start > l.Offset || r.off > r.end {
		return fmt.Errorf("%w: lease of rows [%d, %d) from %d in a partition of %d", ErrBadArgument, l.Start, l.end, l.Offset, len(r.order))
	}
	l.end = r.end
	if m := c.obs; m != nil {
		m.leases.Add(1)
		defer m.leases.Add(-1)
	}
	c.rr.holding(r)
	defer c.rr.holding(nil)
	if loop.Begin != nil {
		if err := loop.Begin(ctx, l); err != nil {
			return err
		}
	}
	for {
		if err := r.boundary(ctx); err != nil {
			return r.stop(ctx, err)
		}
		switch {
		case r.off >= r.end:
			return r.complete(ctx)
		case c.Draining():
			return r.drain(ctx)
		}
		if err := r.step(ctx); err != nil {
			return r.stop(ctx, err)
		}
	}
}

// boundary honours, between two minibatches, a request from the
// coordinator to cut the lease (cut.go).
func (r *leaseRun) boundary(ctx context.Context) error {
	from := int(r.l.cutFrom.Swap(-1))
	if from < 0 {
		return nil
	}
	return r.cut(ctx, from)
}

func (r *leaseRun) setEnd(end int) {
	r.end = end
	r.l.end = end
}

// step trains the next minibatch, then learns which pushes are
// acknowledged and, ProgressEvery minibatches after the last record (or
// as soon after as the last one is answered), records progress up to the
// boundary, to be sent once the pushes before it are acknowledged.
func (r *leaseRun) step(ctx context.Context) error {
	lo, hi := r.off, min(r.off+r.loop.Batch, r.end)
	b := Batch{Lease: r.l, Lo: lo, Hi: hi, Rows: r.order[lo:hi:hi], Next: r.next[:0]}
	for at := hi; at < r.end && len(b.Next) < r.loop.Lookahead; {
		to := min(at+r.loop.Batch, r.end)
		b.Next = append(b.Next, r.order[at:to:to])
		at = to
	}
	r.next = b.Next
	began := time.Now()
	ack, err := r.loop.Step(ctx, b)
	if err == nil && r.obs != nil {
		var seen *Future
		seen, err = r.obs.Observe(ctx, b)
		ack = both(ack, seen)
	}
	if err == nil {
		ack = both(ack, countExamples(r.examples, b))
	}
	if p := r.l.c.currentPacer(); err == nil && p != nil {
		err = p.Pace(ctx, b, time.Since(began))
	}
	if ack != nil {
		r.sent = append(r.sent, sentBatch{hi, ack})
	}
	if err != nil {
		return err
	}
	r.off = hi
	r.steps++
	if m := r.l.c.obs; m != nil {
		m.examples.Add(int64(hi - lo))
	}
	r.l.c.rr.moved(r, hi-lo, time.Since(began))
	if err := r.settle(ctx); err != nil {
		return err
	}
	if r.steps-r.recorded >= r.loop.ProgressEvery && r.off < r.end && r.record == nil {
		r.record = r.l.report(ctx, r.off, false, r.acks(), nil)
		r.recorded = r.steps
	}
	return nil
}

// settle drops the acknowledged minibatches from the front of sent,
// waiting for the oldest while more than Window are outstanding, and
// collects the answer to the progress record in flight.
func (r *leaseRun) settle(ctx context.Context) error {
	for len(r.sent) > 0 {
		s := r.sent[0]
		if len(r.sent) > r.loop.Window {
			if err := s.ack.Wait(ctx); err != nil {
				return fmt.Errorf("push: %w", err)
			}
		} else if !isDone(s.ack) {
			break
		}
		if err := s.ack.Err(); err != nil {
			return fmt.Errorf("push: %w", err)
		}
		r.sent = r.sent[1:]
	}
	if r.record != nil && isDone(r.record) {
		err := r.record.Err()
		r.record = nil
		if err != nil {
			return fmt.Errorf("progress record: %w", err)
		}
	}
	return nil
}

// acks is the acknowledgement of every push sent so far.
func (r *leaseRun) acks() *Future {
	fs := make([]*Future, len(r.sent))
	for i, s := range r.sent {
		fs[i] = s.ack
	}
	return All(fs...)
}

// flush waits for every push sent and for the progress record in flight.
func (r *leaseRun) flush(ctx context.Context) error {
	for _, s := range r.sent {
		if err := s.ack.Wait(ctx); err != nil {
			return fmt.Errorf("push: %w", err)
		}
	}
	r.sent = nil
	if r.record != nil {
		err := r.record.Wait(ctx)
		r.record = nil
		if err != nil {
			return fmt.Errorf("progress record: %w", err)
		}
	}
	return nil
}

// complete records the lease trained to its end, with the final state.
func (r *leaseRun) complete(ctx context.Context) error {
	if err := r.flush(ctx); err != nil {
		return err
	}
	if err := r.l.report(ctx, r.end, true, nil, nil).Wait(ctx); err != nil {
		return fmt.Errorf("recording the end: %w", err)
	}
	if r.loop.Completed != nil {
		r.loop.Completed(r.l)
	}
	return nil
}

// drain records how far the lease got, once every push is acknowledged,
// and returns ErrDrained; the coordinator gives the rest to another
// worker.
func (r *leaseRun) drain(ctx context.Context) error {
	if r.steps == 0 {
		return ErrDrained // nothing trained under this lease: its offset stands
	}
	if err := r.flush(ctx); err != nil {
		return err
	}
	if err := r.l.report(ctx, r.off, false, nil, nil).Wait(ctx); err != nil {
		return fmt.Errorf("recording the drain: %w", err)
	}
	return ErrDrained
}

// stop ends the lease on err, as a worker that dies between two progress
// records would, except that it waits for what it has sent, so that the
// caller knows what the servers (and the coordinator) hold.
func (r *leaseRun) stop(ctx context.Context, err error) error {
	for _, s := range r.sent {
		s.ack.Wait(ctx)
	}
	if r.record != nil {
		r.record.Wait(ctx)
	}
	return err
}

// both is a future of a's and b's completion, either of which may be nil.
func both(a, b *Future) *Future {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return All(a, b)
}

func isDone(f *Future) bool {
	select {
	case <-f.Done():
		return true
	default:
		return false
	}
}

// ErrDrained is returned by EachPartition when it stopped early because
// the worker is draining (an eviction notice or SIGTERM).
var ErrDrained = errors.New("ps: worker drained")

// Drain asks the partition loop to stop at its next minibatch boundary,
// record its progress and return ErrDrained; a worker waiting for work
// stops waiting and returns ErrDrained at once.
func (c *Client) Drain() {
	if !c.draining.Swap(true) {
		close(c.drainedCh())
	}
}

// drainedCh is closed by Drain.
func (c *Client) drainedCh() chan struct{} {
	c.drainInit.Do(func() { c.drained = make(chan struct{}) })
	return c.drained
}

// untilDrained returns a context of ctx that Drain cancels too.
func (c *Client) untilDrained(ctx context.Context) (context.Context, context.CancelFunc) {
	dctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-c.drainedCh():
			cancel()
		case <-dctx.Done():
		}
	}()
	return dctx, cancel
}

// Draining reports whether Drain was called.
func (c *Client) Draining() bool { return c.draining.Load() }
