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
	succ, scratch := ch.successors(sl, nil, nil)
	succ, _ = ch.backups(sl, succ, scratch)
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
	if old.ring.Epoch != cur.ring.Epoch || old.k != cur.k || len(old.moving) != len(cur.moving) || (old.backup == nil) != (cur.backup == nil) {
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
// rather than sent (see peerSync.mustCopy).
const copyNeeded = -1

// peerSync is what a head knows of which slots one peer holds in step
// with it. It is part of the server's core: the chain changes it reads are
// passed in (the server's changes, as of the call), and its replicator's
// lock guards it.
type peerSync struct {
	// me and peer are the head's and the peer's server IDs.
	me, peer string
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

func newPeerSync(me, peer string, changes int) peerSync {
	return peerSync{me: me, peer: peer, born: changes, bornSynced: changes == 0}
}

// needsCopy reports whether slot sl of table must be copied to the peer
// before any other state of it; if not, it records the slot as checked.
func (p *peerSync) needsCopy(changes []chainsChange, table uint32, sl uint64) bool {
	key := tableSlot{table, sl}
	v, ok := p.synced[key]
	switch {
	case ok && v == copyNeeded:
		return true
	case ok:
	case p.bornSynced:
		v = p.born
	default:
		return true
	}
	for _, c := range changes[v:] {
		if !c.keeps(sl, p.me, p.peer) {
			return true
		}
	}
	if v < len(changes) {
		p.set(key, len(changes))
	}
	return false
}

// set records slot key as in step as of v changes (or copyNeeded).
func (p *peerSync) set(key tableSlot, v int) {
	if p.synced == nil {
		p.synced = make(map[tableSlot]int)
	}
	p.synced[key] = v
}

// inSync reports whether every slot is known to be in step without a
// check: nothing changed since the replicator started in step.
func (p *peerSync) inSync(changes []chainsChange) bool {
	return p.bornSynced && p.born == len(changes) && len(p.synced) == 0
}

// setAll records every slot of slots as set does.
func (p *peerSync) setAll(table uint32, slots keyspace.SlotSet, v int) {
	for i := 0; i < len(slots); i += 2 {
		for sl := slots[i]; sl < slots[i+1]; sl++ {
			p.set(tableSlot{table, sl}, v)
		}
	}
}

// copyPending reports whether some slot must be copied to the peer before
// more of it (mustCopy), which has not been yet.
func (p *peerSync) copyPending() bool {
	for _, v := range p.synced {
		if v == copyNeeded {
			return true
		}
	}
	return false
}

// mustCopy records every slot of entries, which will not reach the peer,
// as needing a full copy before any more of its state.
func (p *peerSync) mustCopy(entries []entry) {
	for _, e := range entries {
		if c := e.copy; c != nil {
			p.setAll(c.t.id, c.slots, copyNeeded)
			continue
		}
		for _, it := range e.items {
			for sp := range it.keys.Spans() {
				p.set(tableSlot{it.t.id, sp.Slot}, copyNeeded)
			}
		}
	}
}

// copiesFirst returns entries with a full copy of each slot that the peer
// does not hold in step inserted before the first entry that touches it.
func (p *peerSync) copiesFirst(changes []chainsChange, entries []entry) []entry {
	if p.inSync(changes) {
		return entries
	}
	var out []entry
	for i, e := range entries {
		if e.copy != nil {
			p.setAll(e.copy.t.id, e.copy.slots, len(changes))
			if out != nil {
				out = append(out, e)
			}
			continue
		}
		var need map[*tableState]keyspace.SlotSet
		for _, it := range e.items {
			for sp := range it.keys.Spans() {
				if p.needsCopy(changes, it.t.id, sp.Slot) {
					if need == nil {
						need = map[*tableState]keyspace.SlotSet{}
					}
					set := need[it.t]
					set.Add(sp.Slot)
					need[it.t] = set
				}
			}
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
		for t, set := range sortedTables(need) {
			p.setAll(t.id, set, len(changes))
			out = append(out, entry{copy: &slotCopy{t: t, slots: set}})
		}
		out = append(out, e)
	}
	if out == nil {
		return entries
	}
	return out
}
