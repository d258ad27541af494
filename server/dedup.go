package server

import "sync"

// dedup remembers which pushes (client, seq) this server has the effect of,
// so that a push re-sent after a failure is applied once. Replicas learn
// pairs with the state they receive, so a replica promoted to head knows
// exactly which pushes its state already holds.
type dedup struct {
	mu      sync.Mutex
	clients map[uint64]*seen
}

type seen struct {
	low uint64 // every seq below low is acknowledged and forgotten
	set map[uint64]struct{}
}

func (d *dedup) get(client uint64) *seen {
	if d.clients == nil {
		d.clients = make(map[uint64]*seen)
	}
	c := d.clients[client]
	if c == nil {
		c = &seen{set: make(map[uint64]struct{})}
		d.clients[client] = c
	}
	return c
}

// check reports whether this server holds the effect of (client, seq) or
// of one of its ancestors (the parts it re-sends), records seq if not, and
// forgets pairs below the client's acknowledged watermark.
func (d *dedup) check(client, seq, acked uint64, ancestors []uint64) (dup bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.get(client)
	c.prune(acked)
	if c.has(seq) {
		return true
	}
	for _, a := range ancestors {
		if c.has(a) {
			return true
		}
	}
	c.set[seq] = struct{}{}
	return false
}

func (c *seen) has(seq uint64) bool {
	_, ok := c.set[seq]
	return ok || seq < c.low
}

// add records pairs a head has applied.
func (d *dedup) add(client, seq uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.get(client)
	if seq >= c.low {
		c.set[seq] = struct{}{}
	}
}

func (c *seen) prune(acked uint64) {
	if acked <= c.low {
		return
	}
	c.low = acked
	for s := range c.set {
		if s < acked {
			delete(c.set, s)
		}
	}
}
