package server

import (
	"cmp"
	"slices"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
)

// consistency is the server's consistency core: every worker's clock, the
// minimum that reads see, the reads parked until it moves (W), and the BSP
// pushes deferred until their clock completes (P). It does no I/O, takes
// no lock and runs nothing: its driver (Server.advanceClock) applies the
// pushes a flush returns, outside any lock, and reports them applied
// before the minimum moves, so that a read never sees a minimum whose
// pushes are not all applied.
type consistency[W, P any] struct {
	clock []int64
	min   int64
	// floor is the highest minimum published while some worker was
	// counted at a real clock (not idle, not finished): where a worker
	// that starts counting again is counted from.
	floor int64
	// entering marks the workers a layout added once this server counted
	// workers already, until their first clock message: they start where
	// entry says (see advance).
	entering []bool
	waiters  []parked[W]
	bsp      bspQueue[P]
	// flushing: a flush is out with a driver; until it reports back, the
	// minimum does not move and no other flush starts, so one flush's
	// pushes are all applied before a later flush's.
	flushing bool
}

type parked[W any] struct {
	need int64
	w    W
}

// flush is the BSP pushes a driver must apply, in order, before the
// minimum moves to upTo (consistency.flushed).
type flush[P any] struct {
	upTo int64
	due  []P
}

func (c *consistency[W, P]) resize(workers int) {
	// A new worker is counted from the published minimum (floor): reads
	// already answered did not wait for it, so its pushes from then on must
	// count as of that clock or later. It learns so in the reply to its
	// first clock message (wire.ClockReplySize) before it pushes.
	late := len(c.clock) > 0
	for len(c.clock) < workers {
		c.clock = append(c.clock, c.floor)
		c.entering = append(c.entering, late)
	}
	c.min = min(c.min, c.floor)
}

// offRing forgets which workers wait for work: the server left the data
// ring (a standby, a BackupPS, a joiner, a departed server), and workers
// send their clocks to the servers of the data ring only. A worker it
// counts idle may come back from waiting for work meanwhile, and train on
// (the tiers' seed 611: a reliable worker idle in stage 3 trained again
// in stage 1 while this server stood by); were it still counted idle when
// the server heads slots again, reads would not wait for it, and the
// clock carried by its pushes, below idle, would not raise it. It is
// counted at 0 instead, entering: reads wait for its clock, which its next
// clock message, data message or restatement (ClockIdle, if it is idle)
// brings. A published minimum of idle workers only falls to the floor.
func (c *consistency[W, P]) offRing() {
	for w, x := range c.clock {
		if x == wire.ClockIdle {
			c.clock[w], c.entering[w] = 0, true
		}
	}
	if c.min >= wire.ClockIdle {
		c.min = c.floor
	}
}

// entry is the lowest clock a worker that joins a running job, or comes
// back from waiting for work, may push at: reads answered already did not
// wait for it. That is at least the floor, and at least the clock of every
// worker counted at a real clock. The second matters when a server dies:
// the minimum it published dies with it, and may be above every
// survivor's floor (a worker killed while sending a clock reached only
// that server), but no minimum it published was above the clock of a live
// worker it counted.
func (c *consistency[W, P]) entry() int64 {
	e := c.floor
	for _, x := range c.clock {
		if x < wire.ClockIdle {
			e = max(e, x)
		}
	}
	return e
}

// advance records that worker reached clock v and returns the clock the
// worker is now counted at, the clock it must start at if it is entering
// (starts: at least counted), and the flush the new minimum calls for
// (nil if none, or if a flush is out already: its driver finds the new
// minimum when it reports back).
//
// A worker enters when it comes back from waiting for work, or sends its
// first clock after a layout added it to a job under way. It is counted
// at the floor at least, and told to start at entry(), which it then
// sends. The server does not count it at entry() itself: a worker's first
// clock to a server that joined, or over a connection that came back, is
// its clock as it stands. Workers of the server's first layout start
// together, at the floor, as before any minimum was published.
func (c *consistency[W, P]) advance(worker int, v int64) (counted, starts int64, f *flush[P], ok bool) {
	if worker < 0 || worker >= len(c.clock) {
		return 0, 0, nil, false
	}
	cur := c.clock[worker]
	enters := c.entering[worker] || cur == wire.ClockIdle
	c.entering[worker] = false
	if cur == wire.ClockIdle && v != wire.ClockIdle {
		// Back from waiting for work: reads answered meanwhile did not
		// wait for it, so it counts from the published minimum at least.
		cur = c.floor
	}
	c.clock[worker] = max(cur, v)
	counted, starts = c.clock[worker], c.clock[worker]
	if enters && counted < wire.ClockIdle {
		starts = max(counted, c.entry())
	}
	if !enters && counted < c.min {
		// A worker counted at a real clock below the published minimum:
		// it entered here without hearing where to start (the answer
		// was lost: an install closed the connection it went out on, as
		// the worker left waiting for work while this server stood by),
		// and it pushes below the clock reads here were answered at. From
		// now on reads wait for it; those answered did not owe its
		// pushes, which come after them. The simulation's tiers seed
		// 331209: a standby told the entering worker to start at 60, the
		// worker trained on from 0, and, back on the ring, the server
		// answered reads at clock 60 without the worker's clock 56.
		c.min = counted
	}
	return counted, starts, c.next(), true
}

// next starts the flush that the workers' clocks call for, or lowers the
// minimum when it is one of idle or finished workers only and a worker is
// counted again (from the floor, so reads answered meanwhile stay right and
// reads from now on wait for it).
func (c *consistency[W, P]) next() *flush[P] {
	if c.flushing {
		return nil
	}
	m := c.lowest()
	if m <= c.min {
		if c.min >= wire.ClockIdle && m < c.min {
			c.min = m
		}
		return nil
	}
	c.flushing = true
	return &flush[P]{upTo: m, due: c.bsp.take(m)}
}

func (c *consistency[W, P]) lowest() int64 {
	m := int64(wire.ClockFinished)
	for _, x := range c.clock {
		m = min(m, x)
	}
	return m
}

// flushed publishes f's minimum once its pushes are applied, and returns
// the reads it releases (for the driver to answer) and the next flush.
func (c *consistency[W, P]) flushed(f *flush[P]) (ready []W, next *flush[P]) {
	c.flushing = false
	if f.upTo > c.min {
		c.min = f.upTo
		if f.upTo < wire.ClockIdle {
			// The highest published: a minimum that fell to a worker
			// counted below it (advance) does not lower it.
			c.floor = max(c.floor, f.upTo)
		}
		keep := c.waiters[:0]
		for _, p := range c.waiters {
			if p.need <= c.min {
				ready = append(ready, p.w)
			} else {
				keep = append(keep, p)
			}
		}
		clear(c.waiters[len(keep):])
		c.waiters = keep
	}
	return ready, c.next()
}

// park returns true if every worker has reached need, and otherwise parks
// w until then.
func (c *consistency[W, P]) park(need int64, w W) bool {
	if need <= c.min {
		return true
	}
	c.waiters = append(c.waiters, parked[W]{need, w})
	return false
}

// defer holds BSP push p until clock completes, or reports false if the
// push is due already (the caller applies it at once: waiting for the next
// flush could wait for a clock that this very push's acknowledgement holds
// back).
func (c *consistency[W, P]) deferPush(clock int64, worker uint32, p P) bool {
	if clock < c.min {
		return false
	}
	return c.bsp.add(clock, worker, p)
}

// of returns worker's clock as this server counts it.
func (c *consistency[W, P]) of(worker int) int64 {
	if worker < 0 || worker >= len(c.clock) {
		return 0
	}
	return c.clock[worker]
}

// dropWaiters abandons parked reads (on shutdown), answering none.
func (c *consistency[W, P]) dropWaiters() int {
	n := len(c.waiters)
	c.waiters = nil
	return n
}

// bspQueue holds BSP pushes until every worker has finished the clock they
// belong to, and gives them out in (clock, worker, arrival) order. Float
// addition is not associative, so applying in arrival order would make a
// BSP run's result depend on network timing; this order makes it depend on
// nothing but the data.
type bspQueue[P any] struct {
	pending []pendingPush[P]
	seq     uint64
	flushed int64 // every clock below it has been taken
}

type pendingPush[P any] struct {
	clock  int64
	worker uint32
	seq    uint64
	p      P
}

func (q *bspQueue[P]) add(clock int64, worker uint32, p P) bool {
	if clock < q.flushed {
		return false
	}
	q.seq++
	q.pending = append(q.pending, pendingPush[P]{clock, worker, q.seq, p})
	return true
}

// take returns, in order, every pending push of a clock below upTo.
func (q *bspQueue[P]) take(upTo int64) []P {
	q.flushed = max(q.flushed, upTo)
	var due []pendingPush[P]
	keep := q.pending[:0]
	for _, p := range q.pending {
		if p.clock < upTo {
			due = append(due, p)
		} else {
			keep = append(keep, p)
		}
	}
	clear(q.pending[len(keep):])
	q.pending = keep
	slices.SortFunc(due, func(a, b pendingPush[P]) int {
		return cmp.Or(cmp.Compare(a.clock, b.clock), cmp.Compare(a.worker, b.worker), cmp.Compare(a.seq, b.seq))
	})
	if len(due) == 0 {
		return nil
	}
	out := make([]P, len(due))
	for i, p := range due {
		out[i] = p.p
	}
	return out
}
