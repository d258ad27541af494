package ps

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
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
		// The first at once: the coordinator judges a worker whose
		// heartbeat connection closed in half a failure timeout, and one
		// that died before its first heartbeat only at the timeout.
		bctx, cancel := context.WithTimeout(ctx, every*4)
		if err := c.ctl.Heartbeat(bctx, c.opts.Rank, c.clock.Load()); err != nil && ctx.Err() == nil {
			c.log.Warn("heartbeat failed", "err", err)
		}
		c.restateClock(bctx)
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// beatWhileConnecting heartbeats, every fifth of the failure timeout of
// the newest layout seen, until ctx ends (Connect has connected, or gives
// up): heartbeat's work without the servers, which are not reached yet.
func (c *Client) beatWhileConnecting(ctx context.Context, seen *atomic.Pointer[layout.Layout]) {
	for {
		every := layout.DefaultFailureTimeout / 5
		if l := seen.Load(); l != nil {
			every = l.FailureTimeout() / 5
		}
		bctx, cancel := context.WithTimeout(ctx, every*4)
		if err := c.ctl.Heartbeat(bctx, c.opts.Rank, 0); err != nil && ctx.Err() == nil {
			c.log.Debug("heartbeat while connecting failed", "err", err)
		}
		cancel()
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
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
		c.redial(ctx) // sends the clock on each new connection
	}
}

// Lease is a piece of a data partition leased to this worker for one
// pass: the rows [Start, End()) of the partition's pass order, trained
// from Offset on. EachPartition's loop (loop.go) trains it and alone
// records its progress; a split may move its end down.
type Lease struct {
	c         *Client
	Pass      int
	Partition int
	// Start is where the piece begins: 0 unless it is the tail of a piece
	// that was split. Offset is where training of the lease starts: Start,
	// or where a worker that lost the piece had got to.
	Start, Offset int
	end           int        // the granted end, api.ToEnd for the partition's
	grant         uint64     // names this grant in reports
	state         *heldState // with KeepState
	last          *Future    // the last report sent
	// cutFrom is the row from which the coordinator asks the loop to give
	// up its piece (api.CutRequest), -1 when it does not: set by the
	// report goroutine, taken by the loop.
	cutFrom atomic.Int64
}

// End returns where the lease stops: the partition's end, or a cut.
func (l *Lease) End() int { return l.end }

// work asks the coordinator for a piece of pass to train. It returns nil
// when every partition of the pass has been trained (by whichever
// workers), which makes work the pass's barrier; the client's clock then
// moves up to the highest any worker reported, so that no worker holds the
// others back in the next pass.
func (c *Client) work(ctx context.Context, pass int) (*Lease, error) {
	if c.opts.Rank < 0 {
		return nil, fmt.Errorf("%w: a client without a rank leases no work", ErrBadArgument)
	}
	// A worker waiting for work stops waiting when it is told to drain
	// (an eviction notice): it holds no piece, so it leaves at once
	// instead of at its notice's deadline.
	wctx, stop := c.untilDrained(ctx)
	defer stop()
	got, cancel := c.acquireAsync(wctx, pass)
	defer cancel()
	var r acquired
	idle := false
	select {
	case r = <-got:
	case <-time.After(idleAfter):
		// No partition is free: the others finish theirs while this worker
		// waits, and must not wait for its clock meanwhile.
		idle = true
		defer c.leaveIdle() // on the ways out that do not enter a clock
		if err := c.waitForWork().Wait(ctx); err != nil {
			return nil, err
		}
		if c.rr != nil {
			r = c.rr.waitOrHelp(wctx, pass, got, cancel) // may take a peer's tail (reassign.go)
		} else {
			r = <-got
		}
	}
	if r.err != nil && r.stolen == nil && c.Draining() && ctx.Err() == nil {
		return nil, ErrDrained
	}
	if r.err != nil {
		return nil, fmt.Errorf("ps: work for pass %d: %w", pass, r.err)
	}
	if v := max(c.clock.Load(), r.g.Clock); v > c.clock.Load() || idle {
		if err := c.enterClock(ctx, v); err != nil {
			return nil, err
		}
	}
	if r.stolen != nil {
		return r.stolen, nil
	}
	if r.g.Done {
		return nil, nil
	}
	return c.lease(ctx, pass, r.g)
}

// acquired is the answer to an Acquire, or a piece taken from a peer
// instead.
type acquired struct {
	g      api.Grant
	err    error
	stolen *Lease
}

// acquireAsync asks the coordinator for a piece of pass; cancel stops
// asking.
func (c *Client) acquireAsync(ctx context.Context, pass int) (<-chan acquired, context.CancelFunc) {
	actx, cancel := context.WithCancel(ctx)
	got := make(chan acquired, 1)
	go func() {
		g, err := c.ctl.Acquire(actx, c.opts.Rank, pass)
		got <- acquired{g: g, err: err}
	}()
	return got, cancel
}

// lease makes the Lease of grant g, with its partition state.
func (c *Client) lease(ctx context.Context, pass int, g api.Grant) (*Lease, error) {
	l := &Lease{c: c, Pass: pass, Partition: g.Partition, Start: g.Start, Offset: g.Offset, end: g.End, grant: g.Lease}
	l.cutFrom.Store(-1)
	if err := c.parts.attach(ctx, c.ctl, l, g.States); err != nil {
		return nil, err
	}
	return l, nil
}

// report records that the lease's rows before offset are trained (all of
// them, with complete) once after has completed without error, which the
// caller makes the acknowledgement of every push of those rows: progress
// is never recorded ahead of what the servers hold. cut, if not nil,
// answers a cut request. The state is snapshotted before report returns,
// so the caller may change it at once; the report is sent in the
// background, after the lease's previous one has been answered, so that
// reports arrive in order. Its future completes once the coordinator has
// recorded it. A Lease's reports are made from one goroutine.
func (l *Lease) report(ctx context.Context, offset int, complete bool, after *Future, cut *api.Cut) *Future {
	u := api.Update{Rank: l.c.opts.Rank, Pass: l.Pass, Partition: l.Partition, Offset: offset, Clock: l.c.clock.Load(), Complete: complete, Lease: l.grant, Cut: cut}
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
		r, err := l.c.ctl.Progress(ctx, u)
		if err == nil {
			l.replied(r, complete)
		}
		f.partDone(err)
	}()
	return f
}

// replied takes in the coordinator's answer to a report. (Its End is
// the end the loop set: only the loop cuts its lease.)
func (l *Lease) replied(r api.ProgressReply, complete bool) {
	if l.state != nil {
		l.c.parts.saved(l, r.State, complete)
	}
	if r.Cut != nil {
		l.cutFrom.Store(int64(max(r.Cut.From, 0)))
	}
}

// Leave tells the coordinator this worker is going (a drained departure):
// its leases return to the pool and its clock stops holding the others.
func (c *Client) Leave(ctx context.Context) error {
	if c.opts.Rank < 0 {
		return nil
	}
	// A worker that left is no longer counted, and its heartbeats would
	// be refused: they stop first.
	if c.stopBeat != nil {
		c.stopBeat()
	}
	return c.ctl.Leave(ctx, c.opts.Rank)
}
