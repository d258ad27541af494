package server

import (
	"errors"
	"slices"
	"sync"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/keyspace"
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

// A BSP push waits on its head until its clock completes, but it is
// acknowledged before then, so the other servers of its chains hold it too
// (wire.Deferred) until state carrying its pair reaches them. A server
// that becomes head of a held push's keys applies them: at the flush of the
// push's clock, or at once if that clock has completed.

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

// heldPushes are the BSP pushes held for their heads, by pair.
type heldPushes struct {
	mu sync.Mutex
	m  map[pairKey]*heldPush
}

func (h *heldPushes) add(d wire.Deferred) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[pairKey]*heldPush{}
	}
	h.m[pairKey{d.Pair.Client, d.Pair.Seq}] = &heldPush{table: d.Pair.Table, keys: slices.Clone(d.Keys), vals: slices.Clone(d.Vals),
		clock: d.Clock, worker: d.Worker, acked: d.Pair.Acked}
}

// drop forgets the push of (client, seq): its head applied it and its
// state arrived.
func (h *heldPushes) drop(client, seq uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, pairKey{client, seq})
}

// replicateDeferred ships a BSP push (keys ks, update vals, to be applied
// when clock completes) to every other server of its keys' chains, and then
// calls done with nil, or with an error if the keys' slots moved first.
func (s *Server) replicateDeferred(t *tableState, ks keySet, vals []float32, pair wire.Pair, clock int64, worker uint32, done func(error)) {
	s.mu.RLock()
	ch := s.chains
	s.mu.RUnlock()
	if !ch.replicates() {
		done(nil)
		return
	}
	w := t.spec.Width
	per := map[string]*wire.Deferred{}
	peers := map[string]ring.Server{}
	var succ []ring.Server
	var scratch []int
	last := ^uint64(0)
	add := func(key uint64, v []float32) {
		if sl := keyspace.Slot(key); sl != last {
			succ, scratch = ch.successors(sl, succ, scratch)
			last = sl
		}
		for _, p := range succ {
			d := per[p.ID]
			if d == nil {
				d = &wire.Deferred{Pair: pair, Clock: clock, Worker: worker}
				per[p.ID], peers[p.ID] = d, p
			}
			d.Keys = append(d.Keys, key)
			d.Vals = append(d.Vals, v...)
		}
	}
	if ks.runs == nil {
		for i, key := range ks.keys {
			add(key, vals[i*w:(i+1)*w])
		}
	} else {
		off := 0
		for _, r := range ks.runs {
			for key := r[0]; key < r[1]; key++ {
				add(key, vals[off:off+w])
				off += w
			}
		}
	}
	if len(per) == 0 {
		done(nil)
		return
	}
	finish := allDone(len(per), done)
	for id, d := range per {
		r := s.replicatorFor(peers[id])
		if r == nil {
			finish(errors.New("server is shutting down"))
			continue
		}
		r.add(entry{deferred: d}, finish)
	}
}

// takeOver applies, for the slots this server heads under rm (it is server
// me), the BSP pushes it holds for their former head. Called by Configure,
// under applyMu and mu: the pushes' pairs are claimed before any push of
// the new layout is taken, so that a client's re-send of one is skipped.
func (s *Server) takeOver(rm *ring.Map, me int) {
	if me < 0 {
		return
	}
	in := func(sl uint64) bool { return rm.SlotOwner(sl) == me }
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	for pk, hp := range s.held.m {
		t := s.tables[hp.table]
		if t == nil {
			continue
		}
		w := t.spec.Width
		all := keySet{keys: hp.keys, n: len(hp.keys)}
		ks, vals := all.keep(in, hp.vals, w)
		if ks.n == 0 {
			continue
		}
		rest, restVals := all.keep(func(sl uint64) bool { return !in(sl) }, hp.vals, w)
		if rest.n == 0 {
			delete(s.held.m, pk)
		} else {
			hp.keys, hp.vals = rest.keys, restVals
		}
		var slots keyspace.SlotSet
		slots.AddKeys(ks.keys)
		durable := s.dedup.hold(pk.client, pk.seq, hp.acked, hp.table, slots)
		// The push was on this server and its old head; it must be on
		// this server's chains too before a re-send of it is answered.
		pair := wire.Pair{Client: pk.client, Seq: pk.seq, Acked: hp.acked, Table: hp.table}
		go s.replicateDeferred(t, ks, vals, pair, hp.clock, hp.worker, func(error) { close(durable) })
		apply := func() { s.applyDeferred(t, ks, ks, vals, pk.client, pk.seq, pair.Acked) }
		if !s.bsp.add(hp.clock, hp.worker, apply) {
			go apply()
		}
	}
}

// heads returns whether this server heads a slot under its current layout.
func (s *Server) heads() func(slot uint64) bool {
	s.mu.RLock()
	rm, me := s.ring, s.me
	s.mu.RUnlock()
	return func(sl uint64) bool { return rm != nil && me >= 0 && rm.SlotOwner(sl) == me }
}
