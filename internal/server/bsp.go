package server

import (
	"slices"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/keyspace"
)

// A BSP push waits on its head until its clock completes, but it is
// acknowledged before then, so the other servers of its chains hold it too
// (wire.Deferred) until state carrying its pair reaches them. A server
// that becomes head of a held push's keys applies them: at the flush of the
// push's clock, or at once if that clock has completed.

// bspPush is a BSP push deferred until its clock completes: the keys ks of
// all (the keys the part names) to apply vals to, and its pair.
type bspPush struct {
	t       *tableState
	all, ks keyspace.Keys
	vals    []float32
	pair    wire.Pair
}

type pairKey struct{ client, seq uint64 }

// heldPush is a BSP push this server holds for its head.
type heldPush struct {
	table  uint32
	keys   []uint64
	vals   []float32
	clock  int64
	worker uint32
	acked  uint64
}

// heldPushes are the BSP pushes held for their heads, by pair. Part of the
// core: Server.pairMu guards it.
type heldPushes struct {
	m map[pairKey]*heldPush
}

func (h *heldPushes) add(d wire.Deferred) {
	if h.m == nil {
		h.m = map[pairKey]*heldPush{}
	}
	h.m[pairKey{d.Pair.Client, d.Pair.Seq}] = &heldPush{table: d.Pair.Table, keys: slices.Clone(d.Keys), vals: slices.Clone(d.Vals),
		clock: d.Clock, worker: d.Worker, acked: d.Pair.Acked}
}

// drop forgets the push of (client, seq): its head applied it and its
// state arrived.
func (h *heldPushes) drop(client, seq uint64) {
	delete(h.m, pairKey{client, seq})
}

// tookOver is a held push that this server now heads the keys of, and
// must replicate and apply (see Server.takeOver).
type tookOver struct {
	push    bspPush
	clock   int64
	worker  uint32
	durable chan struct{}
	// due: its clock had completed when it was taken over, so it was
	// applied with the layout (Server.install).
	due bool
}

// takeOver returns, for the slots server me heads under rm, the BSP pushes
// held for their former head, and claims their pairs in d. The caller
// (Configure) holds pairMu and has not yet taken any push of the new
// layout, so that a client's re-send of one of them is skipped.
func (h *heldPushes) takeOver(d *dedup, tables map[uint32]*tableState, rm *ring.Map, me int) []tookOver {
	if me < 0 {
		return nil
	}
	in := func(sl uint64) bool { return rm.SlotOwner(sl) == me }
	var out []tookOver
	for _, pk := range sortedPairs(h.m) {
		hp := h.m[pk]
		t := tables[hp.table]
		if t == nil {
			continue
		}
		all := keyspace.KeyList(hp.keys)
		ks, vals := keep(all, in, hp.vals, t.spec.Width)
		if ks.Len() == 0 {
			continue
		}
		rest, restVals := keep(all, func(sl uint64) bool { return !in(sl) }, hp.vals, t.spec.Width)
		if rest.Len() == 0 {
			delete(h.m, pk)
		} else {
			hp.keys, hp.vals = rest.List(), restVals
		}
		durable := d.hold(pk.client, pk.seq, hp.acked, hp.table, ks.Slots())
		pair := wire.Pair{Client: pk.client, Seq: pk.seq, Acked: hp.acked, Table: hp.table}
		out = append(out, tookOver{push: bspPush{t: t, all: ks, ks: ks, vals: vals, pair: pair}, clock: hp.clock, worker: hp.worker, durable: durable})
	}
	return out
}

func sortedPairs(m map[pairKey]*heldPush) []pairKey {
	out := make([]pairKey, 0, len(m))
	for pk := range m {
		out = append(out, pk)
	}
	slices.SortFunc(out, func(a, b pairKey) int {
		if a.client != b.client {
			return cmpU64(a.client, b.client)
		}
		return cmpU64(a.seq, b.seq)
	})
	return out
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// keep returns the keys of k in the slots that in accepts, and their values
// (vals holds width values per key of k; nil for none).
func keep(k keyspace.Keys, in func(slot uint64) bool, vals []float32, width int) (keyspace.Keys, []float32) {
	var out keyspace.Keys
	var kept []float32
	for sp := range k.Spans() {
		if !in(sp.Slot) {
			continue
		}
		out.Add(sp)
		if vals != nil {
			kept = append(kept, vals[sp.At*width:(sp.At+sp.Len())*width]...)
		}
	}
	if !out.IsRuns() && out.List() == nil {
		out = keyspace.KeyList([]uint64{})
	}
	return out, kept
}

// replicateDeferred ships a BSP push (to be applied when clock completes)
// to every other server of its keys' chains, and then calls done with nil,
// or with an error if the keys' slots moved first. The caller holds no
// lock.
func (s *Server) replicateDeferred(p bspPush, clock int64, worker uint32, done waiter) {
	ch := s.chainsNow()
	if !ch.replicates() {
		done(nil)
		return
	}
	w := p.t.spec.Width
	per := map[string]*wire.Deferred{}
	peers := map[string]ring.Server{}
	var succ []ring.Server
	var scratch []int
	for sp := range p.ks.Spans() {
		succ, scratch = ch.successors(sp.Slot, succ, scratch)
		for _, peer := range succ {
			d := per[peer.ID]
			if d == nil {
				d = &wire.Deferred{Pair: p.pair, Clock: clock, Worker: worker}
				per[peer.ID], peers[peer.ID] = d, peer
			}
			for i := range sp.Len() {
				d.Keys = append(d.Keys, sp.Key(i))
			}
			d.Vals = append(d.Vals, p.vals[sp.At*w:(sp.At+sp.Len())*w]...)
		}
	}
	ledgers := deferredLedgers(ch, p, worker)
	if len(per)+len(ledgers) == 0 {
		done(nil)
		return
	}
	if len(ledgers) > 0 {
		peers := make([]ring.Server, len(ledgers))
		for i, l := range ledgers {
			peers[i] = l.peer
		}
		done = s.retractOnFailure(done, p.pair, peers)
	}
	finish := allDone(len(per)+len(ledgers)+1, done)
	for id, d := range per {
		s.queue(peers[id], entry{deferred: d}, finish)
	}
	for _, l := range ledgers {
		s.queueLedger(l.peer, l.pair, finish)
	}
	finish(nil)
}

// ledgerTo is a pair for one BackupPS's loss ledger.
type ledgerTo struct {
	peer ring.Server
	pair wire.Pair
}

// deferredLedgers returns the pairs that the BackupPS of a BSP push's
// slots must hold in their ledgers before the push is acknowledged. The
// push is acknowledged while it waits here for its clock, long before it
// is applied and streamed; without the pair, losing every ActivePS in the
// open clock would lose it uncounted (docs/design/tiers.md, "What the
// ledger counts exactly"). The pair leaves the ledger when the state that
// carries it arrives in a round, once the clock completed and the push was
// applied.
func deferredLedgers(ch chains, p bspPush, worker uint32) []ledgerTo {
	if p.pair.Seq == 0 || ch.backup == nil {
		return nil
	}
	var out []ledgerTo
	var bk []ring.Server
	var scratch []int
	for sp := range p.all.Spans() {
		bk, scratch = ch.backups(sp.Slot, bk[:0], scratch)
		for _, peer := range bk {
			i := slices.IndexFunc(out, func(l ledgerTo) bool { return l.peer.ID == peer.ID })
			if i < 0 {
				pair := p.pair
				pair.Slots, pair.Acked = nil, 0
				if worker != wire.NoWorker {
					pair.Acked = uint64(worker) + 1 // as ledgerPair
				}
				out = append(out, ledgerTo{peer: peer, pair: pair})
				i = len(out) - 1
			}
			sl := keyspace.SlotSet(out[i].pair.Slots)
			sl.Add(sp.Slot)
			out[i].pair.Slots = sl
		}
	}
	return out
}
