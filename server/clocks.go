package server

import (
	"math"
	"sync"
)

// Finished is the clock a worker sends when it has no more work: it then no
// longer holds back the others.
const Finished = math.MaxInt64

// clocks tracks each worker's clock and the pulls that wait for the slowest
// one. It is the whole of the server's consistency logic apart from BSP's
// deferred application of pushes (see bsp.go).
type clocks struct {
	mu      sync.Mutex
	clock   []int64
	min     int64
	waiters []waiter
}

type waiter struct {
	need int64
	run  func()
}

func (c *clocks) resize(workers int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.clock) < workers {
		c.clock = append(c.clock, 0)
	}
	c.recompute()
}

func (c *clocks) recompute() {
	m := int64(Finished)
	for _, v := range c.clock {
		m = min(m, v)
	}
	c.min = m
}

// advance records that worker reached clock v and returns the previous and
// new minimum together with the waiters now runnable, which the caller runs
// after applying anything that must precede them.
func (c *clocks) advance(worker int, v int64) (oldMin, newMin int64, ready []func(), ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if worker < 0 || worker >= len(c.clock) {
		return 0, 0, nil, false
	}
	if v > c.clock[worker] {
		c.clock[worker] = v
	}
	oldMin = c.min
	c.recompute()
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
	return oldMin, c.min, ready, true
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
