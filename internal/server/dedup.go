package server

import (
	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/keyspace"
)

// dedup remembers which pushes (client, seq) this server holds the effect
// of, and for which slots, so that a push re-sent after a failure is applied
// exactly once.
//
// A pair's scope is where its effect is known to be in this server's state.
// A server that applied a push as its head holds the effect for every key
// the push carried (scope: all; a re-sent part only carries keys of the
// part it re-sends). A server that received state from a head holds it only
// for the slots whose state came with the pair: each replication frame
// carries the pairs scoped to the slots of its state. A head that answers a
// re-sent part skips the keys in the scope of the part's own pair or of an
// ancestor's, and applies the others.
//
// dedup is part of the server's core: it takes no lock (Server.pairMu
// guards it) and does no I/O. The channels it hands out are signals its
// driver waits on: it closes them as pushes are applied or made durable.
type dedup struct {
	clients map[uint64]*seen
}

type seen struct {
	low uint64 // every seq below low is acknowledged and forgotten
	set map[uint64]scope
}

// scope is where a pair's effect is held: everywhere, or in slots.
// applying, while not nil, is closed once the head has applied the push
// (which a BSP table defers until its clock completes): until then the pair
// is claimed against a second application but not yet shipped with copies.
type scope struct {
	table    uint32
	all      bool
	slots    keyspace.SlotSet
	applying chan struct{}
	// durable, for a BSP push held until its clock completes, is closed
	// once the other servers of its chains hold it too: a re-send waits
	// for that, not for the clock (which may wait for the re-sender).
	durable chan struct{}
}

func (d *dedup) get(client uint64) *seen {
	if d.clients == nil {
		d.clients = make(map[uint64]*seen)
	}
	c := d.clients[client]
	if c == nil {
		c = &seen{set: make(map[uint64]scope)}
		d.clients[client] = c
	}
	return c
}

// check returns where this server holds the effect of (client, seq) or of
// one of its ancestors (the parts it re-sends), and the pushes among those
// still being applied; it records seq as held everywhere but still being
// applied (the caller applies the rest and then calls applied), and forgets
// pairs below the client's acknowledged watermark.
func (d *dedup) check(client, seq, acked uint64, table uint32, ancestors []uint64) (held scope, wait []chan struct{}) {
	c := d.get(client)
	c.prune(acked)
	merge := func(a uint64) {
		h := c.lookup(a)
		switch {
		case h.durable != nil:
			wait = append(wait, h.durable)
		case h.applying != nil:
			wait = append(wait, h.applying)
		}
		held.all = held.all || h.all
		if !held.all {
			held.slots = keyspace.Union(held.slots, h.slots)
		}
	}
	merge(seq)
	for _, a := range ancestors {
		merge(a)
	}
	c.set[seq] = scope{table: table, all: true, applying: make(chan struct{})}
	return held, wait
}

// hold records (client, seq) as held in slots of table but still being
// applied (a BSP push this server takes over from a failed head), and
// returns the channel to close once it is durable (see scope.durable).
func (d *dedup) hold(client, seq, acked uint64, table uint32, slots keyspace.SlotSet) chan struct{} {
	c := d.get(client)
	c.prune(acked)
	s := c.set[seq]
	s.table = table
	if !s.all {
		s.slots = keyspace.Union(s.slots, slots)
	}
	if s.applying == nil {
		s.applying = make(chan struct{})
	}
	s.durable = make(chan struct{})
	c.set[seq] = s
	return s.durable
}

// deferring marks the push check returned for as a BSP push held until its
// clock completes, and returns the channel to close once it is durable.
func (d *dedup) deferring(client, seq uint64) chan struct{} {
	c := d.get(client)
	s := c.set[seq]
	s.durable = make(chan struct{})
	c.set[seq] = s
	return s.durable
}

// applied records that the push check returned for has been applied.
func (d *dedup) applied(client, seq uint64) {
	c := d.get(client)
	if s, ok := c.set[seq]; ok && s.applying != nil {
		close(s.applying)
		s.applying = nil
		s.durable = nil
		c.set[seq] = s
	}
}

// abandon forgets (client, seq), which check recorded but which was not
// applied after all (the server stopped heading its keys first).
func (d *dedup) abandon(client, seq uint64) {
	c := d.get(client)
	if s, ok := c.set[seq]; ok {
		if s.applying != nil {
			close(s.applying)
		}
		delete(c.set, seq)
	}
}

// drop forgets every pair's effect in slots of table: a full copy of those
// slots replaces their state, and brings the pairs it holds.
func (d *dedup) drop(table uint32, slots keyspace.SlotSet) {
	for _, c := range d.clients {
		for seq, s := range c.set {
			if s.table != table || (!s.all && !keyspace.Overlaps(s.slots, slots)) {
				continue
			}
			if s.all {
				s.all, s.slots = false, keyspace.AllSlots
			}
			s.slots = keyspace.Subtract(s.slots, slots)
			if len(s.slots) == 0 && s.applying == nil {
				delete(c.set, seq)
				continue
			}
			c.set[seq] = s
		}
	}
}

func (c *seen) lookup(seq uint64) scope {
	if seq < c.low {
		return scope{all: true}
	}
	return c.set[seq]
}

// add records that this server holds the effect of (client, seq), a push
// to table, in slots, and forgets the client's pairs below acked.
func (d *dedup) add(client, seq, acked uint64, table uint32, slots keyspace.SlotSet) {
	c := d.get(client)
	c.prune(acked)
	if seq < c.low {
		return
	}
	s := c.set[seq]
	s.table = table
	if !s.all {
		s.slots = keyspace.Union(s.slots, slots)
	}
	c.set[seq] = s
}

// scoped returns the applied pairs of table this server holds, each scoped
// to the slots of within where it holds them: what a copy of those slots'
// state, read after this call, may claim.
func (d *dedup) scoped(table uint32, within keyspace.SlotSet) []wire.Pair {
	var out []wire.Pair
	for client, c := range d.clients {
		for seq, s := range c.set {
			if s.applying != nil || s.table != table {
				continue
			}
			sl := within
			if !s.all {
				sl = keyspace.Intersect(s.slots, within)
			}
			if len(sl) > 0 {
				out = append(out, wire.Pair{Client: client, Seq: seq, Acked: c.low, Table: table, Slots: sl})
			}
		}
	}
	return out
}

func (c *seen) prune(acked uint64) {
	if acked <= c.low {
		return
	}
	c.low = acked
	for seq, s := range c.set {
		if seq < acked && s.applying == nil {
			delete(c.set, seq)
		}
	}
}
