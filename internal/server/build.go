package server

import (
	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/keyspace"
)

// build reads the batches' current state into replication messages. Frames
// are cut at slot boundaries and each carries the pairs of its entries
// scoped to the slots whose state it carries; all but the last are marked
// More, and the peer imports none until it has the last, so that a peer
// never holds an effect without its pair.
func (s *Server) build(todo []batch) []wire.Replicate {
	b := builder{s: s}
	for _, bt := range todo {
		for _, e := range bt.entries {
			b.entry(e)
		}
	}
	return append(b.msgs, b.cur)
}

type builder struct {
	s    *Server
	msgs []wire.Replicate
	cur  wire.Replicate
	size int
	// in is the slots of the current entry's state in cur, and base the
	// pairs they carry.
	in   keyspace.SlotSet
	base []wire.Pair
}

func (b *builder) entry(e entry) {
	if e.deferred != nil {
		b.cur.Deferred = append(b.cur.Deferred, *e.deferred)
		return
	}
	b.base, b.in = e.pairs, nil
	items := e.items
	if e.copy != nil {
		// The copy replaces the peer's state and pairs in its slots, those
		// without keys here too.
		id := e.copy.t.id
		b.cur.Replace = append(b.cur.Replace, wire.Replace{Table: id, Slots: e.copy.slots})
		b.s.pairMu.Lock()
		b.base = b.s.dedup.scoped(id, e.copy.slots) // before the state is read
		b.s.pairMu.Unlock()
		items = e.copy.items()
	}
	for _, it := range items {
		st := it.t.store.Stride()
		per := max(keyspace.SlotSize, maxReplicateFrame/(4*st+8))
		if it.keys.IsRuns() {
			per = max(keyspace.SlotSize, maxReplicateFrame/(4*st))
		}
		pieces(it.keys, per, func(k keyspace.Keys) {
			f := make([]float32, k.Len()*st)
			if k.IsRuns() {
				r := k.Runs()[0]
				it.t.store.ExportRun(r.Lo, f)
				b.add(wire.State{Table: it.t.id, Stride: uint32(st), Lo: r.Lo, N: uint32(r.Len()), Floats: f})
				return
			}
			it.t.store.Export(k.List(), f)
			b.add(wire.State{Table: it.t.id, Stride: uint32(st), Keys: k.List(), Floats: f})
		})
	}
	b.claim()
}

// add adds a state to the current message, and starts the next once the
// message is full.
func (b *builder) add(st wire.State) {
	b.cur.States = append(b.cur.States, st)
	for sp := range stateKeys(st).Spans() {
		b.in.Add(sp.Slot) // in increasing order within an item: appends
	}
	b.size += 4 * len(st.Floats)
	if b.size >= maxReplicateFrame {
		b.claim()
		b.cur.More = true
		b.msgs, b.cur, b.size = append(b.msgs, b.cur), wire.Replicate{}, 0
	}
}

// claim adds the entry's pairs to the current message, scoped to the slots
// of the entry's state in it.
func (b *builder) claim() {
	for _, p := range b.base {
		sl := b.in
		if p.Slots != nil {
			sl = keyspace.Intersect(p.Slots, b.in)
		}
		if len(sl) > 0 {
			b.cur.Pairs = append(b.cur.Pairs, wire.Pair{Client: p.Client, Seq: p.Seq, Acked: p.Acked, Table: p.Table, Slots: sl})
		}
	}
	b.in = nil
}

// pieces cuts k into pieces of whole slots, each a piece of its list or a
// single run, of about per keys (fewer where a run ends).
func pieces(k keyspace.Keys, per int, fn func(keyspace.Keys)) {
	if !k.IsRuns() {
		list, start := k.List(), 0
		for sp := range k.Spans() {
			if end := sp.At + len(sp.List); end-start >= per {
				fn(keyspace.KeyList(list[start:end]))
				start = end
			}
		}
		if start < len(list) {
			fn(keyspace.KeyList(list[start:]))
		}
		return
	}
	var lo, hi uint64
	for sp := range k.Spans() {
		if hi > lo && (sp.Lo != hi || int(hi-lo) >= per) {
			fn(keyspace.KeyRun(lo, int(hi-lo)))
			lo = sp.Lo
		} else if hi == lo {
			lo = sp.Lo
		}
		hi = sp.Lo + uint64(sp.N)
	}
	if hi > lo {
		fn(keyspace.KeyRun(lo, int(hi-lo)))
	}
}

// stateKeys returns the keys whose state st carries.
func stateKeys(st wire.State) keyspace.Keys {
	if st.Keys != nil {
		return keyspace.KeyList(st.Keys)
	}
	return keyspace.KeyRun(st.Lo, int(st.N))
}
