package server

import (
	"errors"
	"iter"
	"slices"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/keyspace"
)

// AckPolicy says when a push that a peer must hold is acknowledged to its
// worker, and what the peer's confirmations mean.
type AckPolicy int

const (
	// AckChain is the synchronous chain: a push is acknowledged once the
	// peer has confirmed the round that carries it, so an acknowledged push
	// is on every member of its chain. One round is in flight at a time.
	AckChain AckPolicy = iota
	// AckBulk is an asynchronous bulk stream: a push is acknowledged
	// without waiting for the peer, rounds are sent without waiting for the
	// ones before to be confirmed, and the peer's confirmations move a
	// durability watermark instead (peerQueue.durable): every push queued
	// for the peer up to it is on the peer. The updates between the
	// watermark and the last queued are what losing this server loses
	// (issue 11: an ActivePS streaming to its BackupPS).
	AckBulk
)

func (p AckPolicy) String() string {
	if p == AckBulk {
		return "bulk"
	}
	return "chain"
}

// bulkWindow bounds the rounds an AckBulk stream has in flight.
const bulkWindow = 8

// window is how many rounds may be in flight unconfirmed.
func (p AckPolicy) window() int {
	if p == AckBulk {
		return bulkWindow
	}
	return 1
}

// item is keys of a table whose state must reach a peer.
type item struct {
	t    *tableState
	keys keyspace.Keys
}

// entry is keys whose state must reach the peer and the pushes whose
// effect that state carries (the peer holds them for the slots of the state
// it receives), or a full copy of slots (see slotCopy and sync.go), or a
// BSP push for the peer to hold (see bsp.go), which carries no state.
type entry struct {
	items    []item
	pairs    []wire.Pair
	copy     *slotCopy
	deferred *wire.Deferred
}

// waiter is told once its entry is on the peer (nil), or the peer left the
// layout (nil), or the entry's slots moved to another head first
// (errMoved). It runs with no lock held.
type waiter func(error)

// errMoved fails pushes whose slots this server stopped heading before
// their replication was confirmed: the client re-sends them to the new
// head, which holds them or not, and its pairs say which.
var errMoved = errors.New("slots moved to another head before replication completed")

// batch is entries taken from the queue together, sent together and
// confirmed together.
type batch struct {
	entries []entry
	// waiters are the entries' waiters that the policy holds until the
	// batch is confirmed (AckChain).
	waiters []waiter
	// lo and hi are the lowest and highest sequence numbers of its
	// entries.
	lo, hi uint64
	// round is the round it is in flight in, or 0.
	round uint64
	// checked: the copies its entries need are in it (copiesFirst).
	checked bool
	// stale: its entries were queued before this server stopped heading
	// some slots; they may be of an earlier term as head, so they are
	// failed rather than sent (the clients re-send, and pairs tell).
	stale bool
}

// pending is an entry queued and not yet in a batch.
type pending struct {
	e   entry
	w   waiter
	seq uint64
}

// peerQueue is what one peer must receive, and the acknowledgement policy
// for it: the replication core for one stream. It takes no lock and does no
// I/O; its replicator (stream.go) guards it, reads the state its rounds
// name, sends them and reports back. Every entry gets a sequence number as
// it is queued; rounds are confirmed in order.
type peerQueue struct {
	policy  AckPolicy
	seq     uint64 // the last sequence number given
	pending []pending
	// held is batches taken and not confirmed: in flight, or to send
	// again after a reconnect.
	held []batch
	// bulk holds copies for new chain members, sent a chunk at a time
	// alongside the pushes: a copy reads the state when it is sent, so
	// letting pushes overtake it loses nothing, and pushes do not queue
	// behind a hundred megabytes of copies.
	bulk   []batch
	rounds uint64 // the last round number given
	gone   bool   // the peer left the layout: release everything
	sync   peerSync
	// gated are AckBulk pushes held by the gate (docs/design/tiers.md, I2):
	// a push is acknowledged only once every round taken before it was
	// queued is confirmed, so that when round r is the last durable one,
	// the acknowledged pushes the peer lacks all belong to round r + 1:
	// one sync interval's worth.
	gated []gatedWaiter
	// drops counts the batches dropped (their slots moved, or they were of
	// an earlier term): a 2 -> 1 flush must copy instead (flush.go).
	drops uint64
}

// gatedWaiter is a push's waiter held until every batch taken with a
// sequence number up to need is confirmed.
type gatedWaiter struct {
	need uint64
	w    waiter
}

// takenUpTo is the highest sequence number of a batch taken into a round
// and not yet confirmed (0 if none).
func (q *peerQueue) takenUpTo() uint64 {
	var hi uint64
	for _, b := range q.held {
		hi = max(hi, b.hi)
	}
	return hi
}

// releaseGated returns the gated waiters whose rounds are all confirmed.
func (q *peerQueue) releaseGated() []waiter {
	if len(q.gated) == 0 {
		return nil
	}
	low := q.seq + 1
	for _, b := range q.held {
		low = min(low, b.lo)
	}
	var release []waiter
	keep := q.gated[:0]
	for _, g := range q.gated {
		if g.need < low {
			release = append(release, g.w)
			continue
		}
		keep = append(keep, g)
	}
	clear(q.gated[len(keep):])
	q.gated = keep
	return release
}

// add queues e with its waiter. It returns the waiter to call at once
// with nil (the caller does so once it holds no lock): the peer is gone, or
// the policy does not hold acknowledgements.
func (q *peerQueue) add(e entry, w waiter) (now waiter) {
	if q.gone {
		return w
	}
	q.seq++
	if q.policy == AckBulk {
		q.pending = append(q.pending, pending{e: e, seq: q.seq})
		if need := q.takenUpTo(); need > 0 {
			q.gated = append(q.gated, gatedWaiter{need: need, w: w})
			return nil
		}
		return w
	}
	q.pending = append(q.pending, pending{e: e, w: w, seq: q.seq})
	return nil
}

// addBulk queues a copy chunk (see bulk); its waiter is told once the peer
// holds the copy, whatever the policy (a rebuild waits for its copies).
func (q *peerQueue) addBulk(c *slotCopy, w waiter) (now waiter) {
	if q.gone {
		return w
	}
	q.seq++
	q.bulk = append(q.bulk, batch{entries: []entry{{copy: c}}, waiters: []waiter{w}, lo: q.seq, hi: q.seq})
	return nil
}

// cut marks the pushes queued as stale (see batch.stale): called when a
// layout change may have taken slots from this server. A batch in flight is
// marked too: if its round is not confirmed, it is failed, not sent again. Copies are read when
// sent, and deferred BSP pushes carry no state, so neither is ever stale
// (failing a deferred push would have its client re-send it here, where it
// would wait for its own clock to complete).
func (q *peerQueue) cut() {
	for i, b := range q.held {
		if slices.ContainsFunc(b.entries, func(e entry) bool { return e.copy == nil && e.deferred == nil }) {
			q.held[i].stale = true
		}
	}
	if len(q.pending) == 0 {
		return
	}
	var stale, keep batch
	stale.stale = true
	for _, p := range q.pending {
		b := &stale
		if p.e.deferred != nil {
			b = &keep
		}
		b.add(p)
	}
	for _, b := range []batch{stale, keep} {
		if len(b.entries) > 0 {
			q.held = append(q.held, b)
		}
	}
	q.pending = nil
}

func (b *batch) add(p pending) {
	if len(b.entries) == 0 || p.seq < b.lo {
		b.lo = p.seq
	}
	b.hi = max(b.hi, p.seq)
	b.entries = append(b.entries, p.e)
	if p.w != nil {
		b.waiters = append(b.waiters, p.w)
	}
}

// leave empties the queue and returns every waiter it held, to call with
// nil: the peer is no longer in the layout, so pushes stop waiting for it
// (as Kafka's in-sync replica set shrinks).
func (q *peerQueue) leave() []waiter {
	q.gone = true
	var release []waiter
	for _, b := range append(q.held, q.bulk...) {
		release = append(release, b.waiters...)
	}
	for _, p := range q.pending {
		if p.w != nil {
			release = append(release, p.w)
		}
	}
	for _, g := range q.gated {
		release = append(release, g.w)
	}
	q.held, q.bulk, q.pending, q.gated = nil, nil, nil, nil
	return release
}

// plan is what a round holds: the batches to send, and the waiters of the
// batches dropped (to call with errMoved).
type plan struct {
	round  uint64
	send   []batch
	failed []waiter
	// acked are gated waiters released because the batches they waited
	// for were dropped (to call with nil).
	acked []waiter
}

// take plans the next round: the pending entries become a batch, one copy
// chunk rides along when withBulk (pushes wait for at most a chunk, and
// copies are never starved), batches this server can no longer send are
// dropped, and the others get the copies their slots need first. heads
// reports whether this server heads every slot of an entry; changes are
// the server's chain changes as of now. A round already planned (r, not 0)
// is extended instead: only pending entries are added to it.
func (q *peerQueue) take(r uint64, withBulk bool, heads func(entry) bool, changes []chainsChange) plan {
	if q.gone {
		return plan{}
	}
	if len(q.pending) > 0 {
		var b batch
		for _, p := range q.pending {
			b.add(p)
		}
		q.held = append(q.held, b)
		q.pending = nil
	}
	if withBulk && len(q.bulk) > 0 && q.unsent() < 2 {
		q.held = append(q.held, q.bulk[0])
		q.bulk = q.bulk[1:]
	}
	if r == 0 {
		q.rounds++
		r = q.rounds
	}
	p := plan{round: r}
	keep := q.held[:0]
	for _, b := range q.held {
		if b.round != 0 {
			keep = append(keep, b)
			continue
		}
		if b.stale || !allOf(b.entries, heads) {
			// Batches for slots this server no longer heads cannot be
			// confirmed by the peer any more, nor can batches of an
			// earlier term. Their pairs never reach the peer, but the
			// state of later rounds may carry their effects: each of
			// their slots must be copied to the peer before more of it.
			q.sync.mustCopy(b.entries)
			q.drops++
			p.failed = append(p.failed, b.waiters...)
			continue
		}
		if !b.checked {
			b.entries, b.checked = q.sync.copiesFirst(changes, b.entries), true
		}
		b.round = r
		keep = append(keep, b)
		p.send = append(p.send, b)
	}
	clear(q.held[len(keep):])
	q.held = keep
	p.acked = q.releaseGated()
	return p
}

func allOf(entries []entry, heads func(entry) bool) bool {
	for _, e := range entries {
		if !heads(e) {
			return false
		}
	}
	return true
}

// unsent counts the held batches not in flight.
func (q *peerQueue) unsent() int {
	n := 0
	for _, b := range q.held {
		if b.round == 0 {
			n++
		}
	}
	return n
}

// confirmed records that the peer holds round r, and returns the waiters
// the policy releases.
func (q *peerQueue) confirmed(r uint64) []waiter {
	var release []waiter
	keep := q.held[:0]
	for _, b := range q.held {
		if b.round == r {
			release = append(release, b.waiters...)
			continue
		}
		keep = append(keep, b)
	}
	clear(q.held[len(keep):])
	q.held = keep
	return append(release, q.releaseGated()...)
}

// unconfirm puts the batches of round r (of every round, if r is 0) back
// to be sent again: the connection broke, and rounds in flight may or may
// not have arrived; or the round was planned under a layout since replaced.
func (q *peerQueue) unconfirm(r uint64) {
	for i := range q.held {
		if r == 0 || q.held[i].round == r {
			q.held[i].round = 0
		}
	}
}

// durable is the durability watermark: every entry with a sequence number
// up to it is on the peer (confirmed), or was dropped because its slots
// moved to another head. queued is the last sequence number given.
func (q *peerQueue) durable() (durable, queued uint64) {
	low := q.seq + 1
	if len(q.pending) > 0 {
		low = min(low, q.pending[0].seq)
	}
	for _, b := range q.held {
		low = min(low, b.lo)
	}
	for _, b := range q.bulk {
		low = min(low, b.lo)
	}
	return low - 1, q.seq
}

// sortedTables returns the sets of m by ascending table ID, so that the
// copies a round inserts come in a stable order.
func sortedTables(m map[*tableState]keyspace.SlotSet) iter.Seq2[*tableState, keyspace.SlotSet] {
	return func(yield func(*tableState, keyspace.SlotSet) bool) {
		ts := make([]*tableState, 0, len(m))
		for t := range m {
			ts = append(ts, t)
		}
		slices.SortFunc(ts, func(a, b *tableState) int { return int(a.id) - int(b.id) })
		for _, t := range ts {
			if !yield(t, m[t]) {
				return
			}
		}
	}
}
