package ps

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/internal/placement/layout"
)

// idleAfter is how long a request for work may take before the worker
// declares itself idle (wire.ClockIdle).
const idleAfter = 50 * time.Millisecond

// heartbeatEvery is how often a worker tells the coordinator it is alive:
// five times in the layout's failure timeout (1 s by default), after which
// the coordinator takes back a silent worker's leases.
func (c *Client) heartbeatEvery() time.Duration {
	if l := c.Layout(); l != nil {
		return l.FailureTimeout() / 5
	}
	return layout.DefaultFailureTimeout / 5
}

func (c *Client) heartbeat(ctx context.Context) {
	every := c.heartbeatEvery()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		bctx, cancel := context.WithTimeout(ctx, every*4)
		if err := c.ctl.Heartbeat(bctx, c.opts.Rank); err != nil && ctx.Err() == nil {
			c.log.Warn("heartbeat failed", "err", err)
		}
		c.restateClock(bctx)
		cancel()
	}
}

// restateClock sends this worker's clock (or wire.ClockIdle) to every
// server again, re-dialling those whose connection broke. A clock that a
// broken connection lost is otherwise only made good by the next Tick,
// which a worker blocked in a read, or idle, never sends.
func (c *Client) restateClock(ctx context.Context) {
	rm, conns, err := c.current()
	if err != nil {
		return
	}
	broken := false
	for _, s := range rm.Servers {
		if cc := conns[s.ID]; cc != nil && cc.Err() == nil {
			c.sendClockOn(cc, rm.Epoch)
		} else {
			broken = true
		}
	}
	if broken {
		_ = c.refreshLayout(ctx, 0) // dials, and sends the clock on each new connection
	}
}

// Lease is a data partition leased to this worker for one epoch.
type Lease struct {
	c         *Client
	Epoch     int
	Partition int
	// Offset is where training of the partition starts: 0, or where a
	// worker that lost the lease had got to.
	Offset int
	grant  uint64     // names this grant in reports
	state  *heldState // with KeepState
	last   *Future    // the last report sent
}

// Work asks the coordinator for a partition of epoch e to train. It returns
// nil when every partition of the epoch has been trained (by whichever
// workers), which makes Work the epoch's barrier; the client's clock then
// moves up to the highest any worker reported, so that no worker holds the
// others back in the next epoch.
func (c *Client) Work(ctx context.Context, e int) (*Lease, error) {
	if c.opts.Rank < 0 {
		return nil, fmt.Errorf("%w: a client without a rank leases no work", ErrBadArgument)
	}
	type result struct {
		g   api.Grant
		err error
	}
	got := make(chan result, 1)
	go func() {
		g, err := c.ctl.Acquire(ctx, c.opts.Rank, e)
		got <- result{g, err}
	}()
	var r result
	idle := false
	select {
	case r = <-got:
	case <-time.After(idleAfter):
		// No partition is free: the others finish theirs while this worker
		// waits, and must not wait for its clock meanwhile.
		idle = true
		c.idle.Store(true)
		if err := c.sendClock(wire.ClockIdle).Wait(ctx); err != nil {
			return nil, err
		}
		r = <-got
		c.idle.Store(false)
	}
	if r.err != nil {
		return nil, fmt.Errorf("ps: work for epoch %d: %w", e, r.err)
	}
	if v := max(c.clock.Load(), r.g.Clock); v > c.clock.Load() || idle {
		c.clock.Store(v)
		if err := c.enterClock(ctx, v); err != nil {
			return nil, err
		}
	}
	if r.g.Done {
		return nil, nil
	}
	l := &Lease{c: c, Epoch: e, Partition: r.g.Partition, Offset: r.g.Offset, grant: r.g.Lease}
	ver, err := oneState(r.g)
	if err != nil {
		return nil, err
	}
	if err := c.parts.attach(ctx, c.ctl, l, ver); err != nil {
		return nil, err
	}
	return l, nil
}

// oneState returns the version of the granted piece's state (0: none).
// A piece whose state is in several versions (a split in the previous
// pass) would need them joined, which this client does not do yet; it
// never splits, so it never meets one.
func oneState(g api.Grant) (uint64, error) {
	switch len(g.States) {
	case 0:
		return 0, nil
	case 1:
		return g.States[0], nil
	}
	return 0, fmt.Errorf("ps: partition %d's state is in %d pieces, which this client cannot join", g.Partition, len(g.States))
}

// Progress records that the partition's rows before offset are trained and
// their pushes acknowledged: if this worker dies, another resumes there.
// With KeepState, it records the partition's state too, which must then
// reflect exactly the rows before offset.
func (l *Lease) Progress(ctx context.Context, offset int) error {
	return l.report(ctx, offset, false).Wait(ctx)
}

// ProgressAsync is Progress without waiting for the coordinator: the state
// is snapshotted before it returns (the caller may change it at once), and
// the report is sent in the background, after any earlier one of the
// lease. Its future completes once the coordinator has recorded it.
func (l *Lease) ProgressAsync(ctx context.Context, offset int) *Future {
	return l.report(ctx, offset, false)
}

// Complete records that the whole partition is trained (and, with
// KeepState, its state at the end of the pass), after any report still in
// flight.
func (l *Lease) Complete(ctx context.Context, offset int) error {
	return l.report(ctx, offset, true).Wait(ctx)
}

// report snapshots the state and sends the report once the lease's
// previous one has been answered, so that reports arrive in order. A
// Lease's methods are called from one goroutine.
func (l *Lease) report(ctx context.Context, offset int, complete bool) *Future {
	u := api.Update{Rank: l.c.opts.Rank, Pass: l.Epoch, Partition: l.Partition, Offset: offset, Clock: l.c.clock.Load(), Complete: complete, Lease: l.grant}
	if l.state != nil {
		blob, err := l.state.st.MarshalBinary()
		if err != nil {
			return failed(fmt.Errorf("ps: partition %d state: %w", l.Partition, err))
		}
		u.State, u.HasState = blob, true
	}
	f, prev := newFuture(1), l.last
	l.last = f
	go func() {
		if prev != nil {
			<-prev.Done()
		}
		r, err := l.c.ctl.Progress(ctx, u)
		if err == nil && l.state != nil {
			l.c.parts.saved(l, r.State, complete)
		}
		f.partDone(err)
	}()
	return f
}

// Leave tells the coordinator this worker is going (a drained departure):
// its leases return to the pool and its clock stops holding the others.
func (c *Client) Leave(ctx context.Context) error {
	if c.opts.Rank < 0 {
		return nil
	}
	return c.ctl.Leave(ctx, c.opts.Rank)
}

// EachPartition calls train for every partition of epoch e this worker
// leases, until the epoch is done (every partition trained by some
// worker). train must call Progress as it goes and Complete at the end.
func (c *Client) EachPartition(ctx context.Context, e int, train func(ctx context.Context, l *Lease) error) error {
	for {
		l, err := c.Work(ctx, e)
		if err != nil {
			return err
		}
		if l == nil {
			return nil
		}
		if err := train(ctx, l); err != nil {
			return fmt.Errorf("ps: epoch %d partition %d: %w", e, l.Partition, err)
		}
	}
}

// ErrDrained is returned by training loops that stopped early because the
// worker is draining (an eviction notice or SIGTERM).
var ErrDrained = errors.New("ps: worker drained")

// Drain asks the training loop to stop at the next minibatch boundary:
// apps check Draining, record their progress and return ErrDrained.
func (c *Client) Drain() { c.draining.Store(true) }

// Draining reports whether Drain was called.
func (c *Client) Draining() bool { return c.draining.Load() }
