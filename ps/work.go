package ps

import (
	"context"
	"fmt"
	"time"

	"github.com/terrace-ml/terrace/internal/control/coord"
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

// Lease is a piece of a data partition leased to this worker for one
// pass: rows [Offset, End()) of the partition's pass order. A lease is
// trained by EachPartition's loop (loop.go), which alone records its
// progress.
type Lease struct {
	c         *Client
	Pass      int
	Partition int
	// Offset is where training of the lease starts: 0, or where a worker
	// that lost the lease had got to.
	Offset int
	grant  uint64     // names this grant in reports
	state  *heldState // with KeepState
	last   *Future    // the last report sent
}

// work asks the coordinator for a partition of pass to train. It returns
// nil when every partition of the pass has been trained (by whichever
// workers), which makes work the pass's barrier; the client's clock then
// moves up to the highest any worker reported, so that no worker holds the
// others back in the next pass.
func (c *Client) work(ctx context.Context, pass int) (*Lease, error) {
	if c.opts.Rank < 0 {
		return nil, fmt.Errorf("%w: a client without a rank leases no work", ErrBadArgument)
	}
	type result struct {
		g   coord.Grant
		err error
	}
	got := make(chan result, 1)
	go func() {
		g, err := c.ctl.Acquire(ctx, c.opts.Rank, pass)
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
		return nil, fmt.Errorf("ps: work for pass %d: %w", pass, r.err)
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
	l := &Lease{c: c, Pass: pass, Partition: r.g.Partition, Offset: r.g.Offset, grant: r.g.Lease}
	if err := c.parts.attach(ctx, c.ctl, l, r.g.State); err != nil {
		return nil, err
	}
	return l, nil
}

// report records that the lease's rows before offset are trained (all of
// them, with complete) once after has completed without error, which the
// caller makes the acknowledgement of every push of those rows: progress
// is never recorded ahead of what the servers hold. The state is
// snapshotted before report returns, so the caller may change it at once;
// the report is sent in the background, after the lease's previous one
// has been answered, so that reports arrive in order. Its future
// completes once the coordinator has recorded it. A Lease's reports are
// made from one goroutine.
func (l *Lease) report(ctx context.Context, offset int, complete bool, after *Future) *Future {
	u := coord.Update{Rank: l.c.opts.Rank, Epoch: l.Pass, Partition: l.Partition, Offset: offset, Clock: l.c.clock.Load(), Complete: complete, Lease: l.grant}
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
		if after != nil {
			if err := after.Wait(ctx); err != nil {
				f.partDone(err)
				return
			}
		}
		ver, err := l.c.ctl.Progress(ctx, u)
		if err == nil && l.state != nil {
			l.c.parts.saved(l, ver, complete)
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
