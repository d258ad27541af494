package server

import (
	"cmp"
	"maps"
	"slices"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/keyspace"
)

// ledger is a BackupPS's record of the pushes its ActivePS were allowed to
// acknowledge whose state it does not hold yet (docs/design/tiers.md,
// "The stream", 5, and I3): the pushes losing every ActivePS would lose.
// An ActivePS sends a push's pair, scoped to the slots this BackupPS holds
// of it, before it acknowledges the push; the entry shrinks as rounds or
// full copies bring the state of those slots with the pair (the round is
// durable here), and is gone once none is left. So at a fallback the
// ledger holds exactly the acknowledged pushes whose effect is missing
// here, plus those whose client died before it heard the acknowledgement.
//
// ledger is part of the server's core: it takes no lock (Server.pairMu
// guards it, beside dedup, which it consults) and does no I/O.
type ledger struct {
	open map[pairKey]ledgerEntry
	// byAncestor lists, by the pair of a push a client re-sent as parts,
	// the open entries of those parts: the state of the push they re-send
	// makes them durable too.
	byAncestor map[pairKey][]pairKey
	// frozen is the ledger of the last fallback (nil if none is pending):
	// open's entries in the slots this server heads after it, less the
	// pushes their clients then re-sent.
	frozen map[pairKey]ledgerEntry
	// epoch is the fallback's; atRisk are the entries frozen had first.
	epoch  uint64
	atRisk []LostPush
}

// ledgerEntry is where the state of an allowed push is still missing.
type ledgerEntry struct {
	table     uint32
	slots     keyspace.SlotSet
	worker    int      // the pushing worker's rank, -1 if not a worker
	ancestors []uint64 // the pushes it re-sends (wire.Data.Ancestors)
}

// allow records that pair p's push may be acknowledged, less the slots
// where this server already holds its effect (held, from dedup: a round
// that carried the pair, or one of the pushes it re-sends, ancestors,
// overtook the ledger's message). p.Acked names the pushing worker
// (ledgerPair).
func (l *ledger) allow(p wire.Pair, held scope, ancestors ...uint64) {
	if held.all {
		return
	}
	sl := p.Slots
	if len(held.slots) > 0 {
		sl = keyspace.Subtract(sl, held.slots)
	}
	if len(sl) == 0 {
		return
	}
	if l.open == nil {
		l.open = make(map[pairKey]ledgerEntry)
	}
	k := pairKey{p.Client, p.Seq}
	e, ok := l.open[k]
	if ok {
		sl = keyspace.Union(e.slots, sl)
	}
	if !ok || p.Acked != 0 {
		// A BSP push's pair comes again, naming no worker, when its
		// head applies it: the first names the worker.
		e.worker = int(p.Acked) - 1
	}
	e.table, e.slots = p.Table, sl
	if !ok && len(ancestors) > 0 {
		e.ancestors = slices.Clone(ancestors)
		if l.byAncestor == nil {
			l.byAncestor = make(map[pairKey][]pairKey)
		}
		for _, a := range ancestors {
			ak := pairKey{p.Client, a}
			l.byAncestor[ak] = append(l.byAncestor[ak], k)
			// The client re-sends push a as parts: a was failed back
			// to it, never acknowledged, though its retraction may
			// have died with the ActivePS that failed it back.
			l.drop(ak)
		}
	}
	l.open[k] = e
}

// drop forgets entry k.
func (l *ledger) drop(k pairKey) {
	e, ok := l.open[k]
	if !ok {
		return
	}
	delete(l.open, k)
	for _, a := range e.ancestors {
		ak := pairKey{k.client, a}
		rest := slices.DeleteFunc(l.byAncestor[ak], func(x pairKey) bool { return x == k })
		if len(rest) == 0 {
			delete(l.byAncestor, ak)
		} else {
			l.byAncestor[ak] = rest
		}
	}
}

// retract forgets pair (client, seq): its ActivePS failed the push back
// (its client re-sends it as parts, under new sequence numbers, and the
// ledger learns those), so it is never acknowledged. A retraction that
// arrives after a fallback froze the entry removes it from the count too.
func (l *ledger) retract(client, seq uint64) {
	l.drop(pairKey{client, seq})
	delete(l.frozen, pairKey{client, seq})
}

// installed records that an installed round brought pair p's state in
// p.Slots: p's push, and the parts that re-send it, are durable there.
func (l *ledger) installed(p wire.Pair) {
	k := pairKey{p.Client, p.Seq}
	l.shrink(k, p.Table, p.Slots)
	for _, part := range slices.Clone(l.byAncestor[k]) {
		l.shrink(part, p.Table, p.Slots)
	}
}

// shrink records that entry k is durable in slots of table.
func (l *ledger) shrink(k pairKey, table uint32, slots keyspace.SlotSet) {
	e, ok := l.open[k]
	if !ok || e.table != table {
		return
	}
	if e.slots = keyspace.Subtract(e.slots, slots); len(e.slots) == 0 {
		l.drop(k)
		return
	}
	l.open[k] = e
}

// replaced records that a full copy replaced slots of table: it carries
// every push its head holds there, which by I1 is every push allowed.
func (l *ledger) replaced(table uint32, slots keyspace.SlotSet) {
	for k, e := range l.open {
		if e.table != table || !keyspace.Overlaps(e.slots, slots) {
			continue
		}
		if e.slots = keyspace.Subtract(e.slots, slots); len(e.slots) == 0 {
			l.drop(k)
			continue
		}
		l.open[k] = e
	}
}

// freeze starts counting the loss of the fallback of epoch: the open
// entries in slots this server heads now (heads) are the acknowledgements
// at risk; those elsewhere are other heads' to count (their state, not
// this server's, is what survives there). It returns how many are at risk.
func (l *ledger) freeze(epoch uint64, heads func(slot uint64) bool) int {
	// A fallback within the grace of the last one: its count is not
	// reported yet, and goes into this one's.
	prev, prevRisk, prevEpoch := l.frozen, l.atRisk, l.epoch
	l.frozen, l.epoch = make(map[pairKey]ledgerEntry), epoch
	for k, e := range l.open {
		if headsAny(e.slots, heads) {
			l.frozen[k] = e
		}
	}
	l.open, l.byAncestor, l.atRisk = nil, nil, lostPushes(l.frozen)
	n := len(l.atRisk)
	if n == 0 && prev != nil {
		// Nothing new at risk (the end of a switch out of stage 2 or 3,
		// which looks like a fallback, schedules no count): the pending
		// count keeps its epoch, so that the count scheduled for it still
		// reports it (simulation, TERRACE_SIM_MIX=tiers seed 232).
		l.epoch = prevEpoch
	}
	maps.Copy(l.frozen, prev)
	if len(prevRisk) > 0 {
		l.atRisk = append(l.atRisk, prevRisk...)
		slices.SortFunc(l.atRisk, byPair)
	}
	return n
}

func headsAny(s keyspace.SlotSet, heads func(uint64) bool) bool {
	for i := 0; i+1 < len(s); i += 2 {
		for sl := s[i]; sl < s[i+1]; sl++ {
			if heads(sl) {
				return true
			}
		}
	}
	return false
}

// resent records that client re-sent push seq (or a part of ancestors):
// it never heard the acknowledgement, so it did not lose the push.
func (l *ledger) resent(client, seq uint64, ancestors []uint64) {
	if l.frozen == nil {
		return
	}
	delete(l.frozen, pairKey{client, seq})
	for _, a := range ancestors {
		delete(l.frozen, pairKey{client, a})
	}
}

// LossReport is what a BackupPS that became a head at a fallback counts
// once the grace for re-sends has passed (docs/design/tiers.md, "Bulk
// revocation", 3).
type LossReport struct {
	// Epoch is the fallback's.
	Epoch uint64
	// Allowed are the pushes the ledger allowed in the rounds that never
	// became durable here, in the slots this server heads; Lost are those
	// whose clients did not re-send them. Each sorted by client, then seq.
	Allowed, Lost []LostPush
}

// LostPush is one push of a LossReport, and the worker that pushed it
// (-1 if the client was not a worker).
type LostPush struct {
	Client, Seq uint64
	Table       uint32
	Worker      int
}

// report returns the frozen ledger's count and forgets it.
func (l *ledger) report() LossReport {
	r := LossReport{Epoch: l.epoch, Allowed: l.atRisk, Lost: lostPushes(l.frozen)}
	l.frozen, l.atRisk = nil, nil
	return r
}

func lostPushes(m map[pairKey]ledgerEntry) []LostPush {
	out := make([]LostPush, 0, len(m))
	for k, e := range m {
		out = append(out, LostPush{Client: k.client, Seq: k.seq, Table: e.table, Worker: e.worker})
	}
	slices.SortFunc(out, byPair)
	return out
}

func byPair(a, b LostPush) int {
	if c := cmp.Compare(a.Client, b.Client); c != 0 {
		return c
	}
	return cmp.Compare(a.Seq, b.Seq)
}
