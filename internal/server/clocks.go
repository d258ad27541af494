package server

import (
	"math"
	"sync"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
)

// Finished is the clock a worker sends when it has no more work: it then no
// longer holds back the others.
const Finished = math.MaxInt64

// clocks tracks each worker's clock and the pulls that wait for the slowest
// one. It is the whole of the server's consistency logic apart from BSP's
// deferred application of pushes (see bsp.go).
type clocks struct {
	// advancing serialises advance, the flush of deferred pushes, and
	// publish, so that a read never sees a minimum whose pushes are not
	// all applied.
	advancing sync.Mutex
	mu        sync.Mutex
	clock     []int64
	min       int64
	// floor is the highest minimum published while some worker was
	// counted at a real clock (not idle, not finished): where a worker
	// that starts counting again is counted from.
	floor   int64
	waiters []waiter
}

type waiter struct {
	need int64
	run  func()
}

func (c *clocks) resize(workers int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.clock) >= workers {
		return
	}
	// A new worker is counted from the published minimum (floor): reads already
	// answered did not wait for it, so its pushes from then on must count
	// as of that clock or later. It learns so in the reply to its first
	// clock message (wire.ClockReplySize) before it pushes.
	for len(c.clock) < workers {
		c.clock = append(c.clock, c.floor)
	}
	c.min = min(c.min, c.floor)
}

// lower makes m the published minimum when it is below a minimum of idle
// or finished workers only: a worker counted again (back from waiting for
// work) is counted from the floor, so reads answered meanwhile stay right
// and reads from now on wait for it.
func (c *clocks) lower(m int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.min >= wire.ClockIdle && m < c.min {
		c.min = m
	}
}

// advance records that worker reached clock v and returns the minimum over
// all workers and the clock the worker is now counted at. The minimum that
// reads see moves only with publish, so that the server can apply BSP's
// deferred pushes in between.
func (c *clocks) advance(worker int, v int64) (newMin, counted int64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if worker < 0 || worker >= len(c.clock) {
		return 0, 0, false
	}
	cur := c.clock[worker]
	if cur == wire.ClockIdle && v != wire.ClockIdle {
		// Back from waiting for work: reads answered meanwhile did not
		// wait for it, so it counts from the published minimum at least.
		cur = c.floor
	}
	c.clock[worker] = max(cur, v)
	m := int64(Finished)
	for _, x := range c.clock {
		m = min(m, x)
	}
	return m, c.clock[worker], true
}

// of returns worker's clock as this server knows it.
func (c *clocks) of(worker int) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if worker < 0 || worker >= len(c.clock) {
		return 0
	}
	return c.clock[worker]
}

// publish makes m the minimum that reads wait for and returns the waiters
// it releases, which the caller runs.
func (c *clocks) publish(m int64) (ready []func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m <= c.min {
		return nil
	}
	c.min = m
	if m < wire.ClockIdle {
		c.floor = m
	}
	keep := c.waiters[:0]
	for _, w := range c.waiters {
		if w.need <= c.min {
			ready = append(ready, w.run)
		} else {
			keep = append(keep, w)
		}
	}
	clear(c.waiters[len(keep):])
	c.waiters = keep
	return ready
}

// when runs fn at once if every worker has reached need, and otherwise
// parks it until then. It reports whether fn ran now.
func (c *clocks) when(need int64, fn func()) bool {
	c.mu.Lock()
	if need <= c.min {
		c.mu.Unlock()
		fn()
		return true
	}
	c.waiters = append(c.waiters, waiter{need, fn})
	c.mu.Unlock()
	return false
}

func (c *clocks) minimum() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.min
}

// dropWaiters abandons parked pulls (on shutdown), running none.
func (c *clocks) dropWaiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.waiters)
	c.waiters = nil
	return n
}
