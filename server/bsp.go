package server

import (
	"slices"
	"sync"
)

// deferred holds BSP pushes until every worker has finished the clock they
// belong to, and then applies them in (clock, worker, arrival) order. Float
// addition is not associative, so applying in arrival order would make a
// BSP run's result depend on network timing; this order makes it depend on
// nothing but the data.
type deferred struct {
	// applying serialises flushes, so that one flush's pushes are all
	// applied before a later flush's.
	applying sync.Mutex
	mu       sync.Mutex
	pending  []pendingPush
	seq      uint64
	flushed  int64 // every clock below it has been flushed
}

type pendingPush struct {
	clock  int64
	worker uint32
	seq    uint64
	apply  func()
}

// add defers apply until clock is flushed, or reports false if it already
// was (the caller applies at once: waiting for the next flush could wait
// for a clock that this very push's acknowledgement holds back).
func (d *deferred) add(clock int64, worker uint32, apply func()) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if clock < d.flushed {
		return false
	}
	d.seq++
	d.pending = append(d.pending, pendingPush{clock, worker, d.seq, apply})
	return true
}

// flush applies, in order, every pending push of a clock below upTo.
func (d *deferred) flush(upTo int64) {
	d.applying.Lock()
	defer d.applying.Unlock()
	d.mu.Lock()
	d.flushed = max(d.flushed, upTo)
	var due []pendingPush
	keep := d.pending[:0]
	for _, p := range d.pending {
		if p.clock < upTo {
			due = append(due, p)
		} else {
			keep = append(keep, p)
		}
	}
	clear(d.pending[len(keep):])
	d.pending = keep
	d.mu.Unlock()
	slices.SortFunc(due, func(a, b pendingPush) int {
		switch {
		case a.clock != b.clock:
			return cmp(a.clock, b.clock)
		case a.worker != b.worker:
			return cmp(a.worker, b.worker)
		}
		return cmp(a.seq, b.seq)
	})
	for _, p := range due {
		p.apply()
	}
}

func cmp[T int64 | uint32 | uint64](a, b T) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}
