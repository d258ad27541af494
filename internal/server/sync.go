package server

import (
	"github.com/terrace-ml/terrace/keyspace"
)

// A replica's state for a slot, and the pairs it holds there, must come
// from one source: the head whose replication made them. A head that starts
// sending a slot's state to a member whose state for it came from elsewhere
// (another head, or this one in an earlier term) first sends a full copy
// of the slot, which replaces the member's state and pairs there
// (wire.Replace). Without it the member would hold the new head's state
// for some keys and the pairs of pushes that state does not carry, or the
// reverse, and a push re-sent after the new head fails could be lost or
// applied twice (docs/design/resilience.md, "One source per slot").
//
// A head knows which slots a member holds in step with it from the layout
// changes it has seen: the slots it has headed, with the member in their
// chain, since it last copied them to that member (or since both started
// empty).

// chainsChange is one change of the chains, as this server installed it.
type chainsChange struct {
	old, cur chains
	// gap: layouts were skipped between old and cur, so any slot may have
	// had another head meanwhile.
	gap bool
}

// keeps reports whether server me headed slot sl, with peer among its other
// members, both before and after the change.
func (c chainsChange) keeps(sl uint64, me, peer string) bool {
	return !c.gap && c.old.holds(sl, me, peer) && c.cur.holds(sl, me, peer)
}

// holds reports whether server me heads slot sl and peer must hold it too.
func (ch chains) holds(sl uint64, me, peer string) bool {
	if ch.ring.Servers[ch.ring.SlotOwner(sl)].ID != me {
		return false
	}
	succ, _ := ch.successors(sl, nil, nil)
	return contains(succ, peer)
}

// loses reports whether server me may head fewer slots after the change:
// a server was added to the ring (consistent hashing moves slots only to
// it), or me left it.
func (c chainsChange) loses(me string) bool {
	if c.cur.ring.Index(me) < 0 {
		return true
	}
	for _, srv := range c.cur.ring.Servers {
		if c.old.ring.Index(srv.ID) < 0 {
			return true
		}
	}
	return false
}

// changed reports whether the chains differ in what they place where.
func changed(old, cur chains) bool {
	if old.ring.Epoch != cur.ring.Epoch || old.k != cur.k || len(old.moving) != len(cur.moving) {
		return true
	}
	for i := range old.moving {
		if old.moving[i] != cur.moving[i] {
			return true
		}
	}
	return false
}

// tableSlot names a slot of a table.
type tableSlot struct {
	table uint32
	slot  uint64
}

// copyNeeded is the synced value of a slot of a batch that was failed
// rather than sent (see replicator.mustCopy).
const copyNeeded = -1

// syncState is what a replicator knows of its peer's slots. It is used
// under the server's applyMu (write side), like the changes it reads.
type syncState struct {
	// born is the number of changes the server had seen when the
	// replicator started, and bornSynced whether the peer's state then
	// derived from this server's for every slot (no change had happened:
	// both started empty, or from one checkpoint).
	born       int
	bornSynced bool
	// synced holds, per slot, the number of changes after which the peer
	// was known to hold it in step (copied, or checked), or copyNeeded.
	synced map[tableSlot]int
}

// needsCopy reports whether slot sl of table t must be copied to the peer
// before any other state of it; if not, it records the slot as checked.
func (r *replicator) needsCopy(table uint32, sl uint64) bool {
	s := r.s
	key := tableSlot{table, sl}
	v, ok := r.sync.synced[key]
	switch {
	case ok && v == copyNeeded:
		return true
	case ok:
	case r.sync.bornSynced:
		v = r.sync.born
	default:
		return true
	}
	for _, c := range s.changes[v:] {
		if !c.keeps(sl, s.opts.ID, r.peer.ID) {
			return true
		}
	}
	if v < len(s.changes) {
		r.sync.set(key, len(s.changes))
	}
	return false
}

// set records slot key as in step as of v changes (or copyNeeded).
func (st *syncState) set(key tableSlot, v int) {
	if st.synced == nil {
		st.synced = make(map[tableSlot]int)
	}
	st.synced[key] = v
}

// inSync reports whether every slot is known to be in step without a
// check: nothing changed since the replicator started in step.
func (r *replicator) inSync() bool {
	return r.sync.bornSynced && r.sync.born == len(r.s.changes) && len(r.sync.synced) == 0
}

// markCopied records slots of table as copied, as of now.
func (r *replicator) markCopied(table uint32, slots keyspace.SlotSet) {
	r.sync.setAll(table, slots, len(r.s.changes))
}

// setAll records every slot of slots as set does.
func (st *syncState) setAll(table uint32, slots keyspace.SlotSet, v int) {
	for i := 0; i < len(slots); i += 2 {
		for sl := slots[i]; sl < slots[i+1]; sl++ {
			st.set(tableSlot{table, sl}, v)
		}
	}
}

// mustCopy records every slot of entries, which will not reach the peer,
// as needing a full copy before any more of its state.
func (r *replicator) mustCopy(entries []entry) {
	for _, e := range entries {
		if c := e.copy; c != nil {
			r.sync.setAll(c.t.id, c.slots, copyNeeded)
			continue
		}
		for _, it := range e.items {
			it.eachSlot(func(sl uint64) { r.sync.set(tableSlot{it.t.id, sl}, copyNeeded) })
		}
	}
}

// copiesFirst returns entries with a full copy of each slot that the peer
// does not hold in step inserted before the first entry that touches it.
func (r *replicator) copiesFirst(entries []entry) []entry {
	if r.inSync() {
		return entries
	}
	var out []entry
	for i, e := range entries {
		if e.copy != nil {
			r.markCopied(e.copy.t.id, e.copy.slots)
			if out != nil {
				out = append(out, e)
			}
			continue
		}
		var need map[*tableState]keyspace.SlotSet
		for _, it := range e.items {
			it.eachSlot(func(sl uint64) {
				if r.needsCopy(it.t.id, sl) {
					if need == nil {
						need = map[*tableState]keyspace.SlotSet{}
					}
					set := need[it.t]
					set.Add(sl)
					need[it.t] = set
				}
			})
		}
		if need == nil {
			if out != nil {
				out = append(out, e)
			}
			continue
		}
		if out == nil {
			out = append([]entry(nil), entries[:i]...)
		}
		for t, set := range need {
			r.markCopied(t.id, set)
			out = append(out, entry{copy: &slotCopy{t: t, slots: set}})
		}
		out = append(out, e)
	}
	if out == nil {
		return entries
	}
	return out
}

// eachSlot calls fn with each slot of d's keys, in increasing order.
func (d dirty) eachSlot(fn func(sl uint64)) {
	if d.keys != nil {
		last := ^uint64(0)
		for _, k := range d.keys {
			if sl := keyspace.Slot(k); sl != last {
				fn(sl)
				last = sl
			}
		}
		return
	}
	if d.n == 0 {
		return
	}
	for sl := keyspace.Slot(d.lo); sl <= keyspace.Slot(d.lo+uint64(d.n)-1); sl++ {
		fn(sl)
	}
}

// slotCopy is a full copy of slots of a table: the keys present there when
// it is sent, their state, and the pairs this server holds there then.
type slotCopy struct {
	t     *tableState
	slots keyspace.SlotSet
}

// items returns the present keys of the copy's slots, whole slots as runs.
func (c *slotCopy) items() []dirty {
	var g group
	for i := 0; i < len(c.slots); i += 2 {
		for sl := c.slots[i]; sl < c.slots[i+1]; sl++ {
			if present := c.t.store.Present(sl); present != 0 {
				g.addSlot(c.t, sl, present)
			}
		}
	}
	return g.items
}
