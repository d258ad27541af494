package server

import (
	"cmp"
	"slices"

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
	var agg aggregate
	for _, bt := range todo {
		for _, e := range bt.entries {
			if e.rolledBack() {
				continue
			}
			if e.copy != nil || e.deferred != nil {
				b.entry(e)
				continue
			}
			agg.add(e)
		}
	}
	agg.export(&b)
	return append(b.msgs, b.cur)
}

// rolledBack reports whether e carries the state of a store a rewind
// emptied (emptyTablesLocked): a rebuild's copy, or a push applied
// before the rewind, still queued. Sent after it, stamped with the new
// epoch, the state read from the old store replaced the checkpoint's
// values on the peer, which had loaded it itself, and the updates the
// rewind rolled back came back (simulation, TERRACE_SIM_MIX=rewind seeds
// 17 and 134). The entry's waiters are answered with its round's.
func (e entry) rolledBack() bool {
	if e.copy != nil {
		return e.copy.t.emptied.Load()
	}
	return slices.ContainsFunc(e.items, func(it item) bool { return it.t.emptied.Load() })
}

// aggregate is the pushes of a round merged by key: a key pushed n times
// since the last round ships its state once, not n times (the ActivePS's
// aggregation, docs/design/tiers.md). The state is read when the round is
// built, so it holds every push applied by then; each push's pairs are
// claimed for the slots its own keys lie in. The peer installs a round's
// messages all at once (importRound), so a pair may travel in another
// message of the round than the state it covers.
type aggregate struct {
	tables []*tableState // in the order first seen
	lists  map[*tableState][]uint64
	runs   map[*tableState][]keyspace.Range
	claims []claim
}

// claim is one push's pairs and the slots of the keys it pushed.
type claim struct {
	pairs []wire.Pair
	slots keyspace.SlotSet
}

func (a *aggregate) add(e entry) {
	if a.lists == nil {
		a.lists, a.runs = map[*tableState][]uint64{}, map[*tableState][]keyspace.Range{}
	}
	var slots keyspace.SlotSet
	for _, it := range e.items {
		if _, ok := a.lists[it.t]; !ok {
			if _, ok := a.runs[it.t]; !ok {
				a.tables = append(a.tables, it.t)
			}
		}
		if it.keys.IsRuns() {
			a.runs[it.t] = append(a.runs[it.t], it.keys.Runs()...)
		} else if len(it.keys.List()) > 0 {
			a.lists[it.t] = append(a.lists[it.t], it.keys.List()...)
		}
		slots = keyspace.Union(slots, it.keys.Slots())
	}
	if len(e.pairs) > 0 && len(slots) > 0 {
		a.claims = append(a.claims, claim{e.pairs, slots})
	}
}

// export adds the merged states, then every push's pairs, to b.
func (a *aggregate) export(b *builder) {
	b.base, b.in = nil, nil
	for _, t := range a.tables {
		if list := a.lists[t]; len(list) > 0 {
			slices.Sort(list)
			b.keys(t, keyspace.KeyList(slices.Compact(list)))
		}
		if runs := a.runs[t]; len(runs) > 0 {
			b.keys(t, mergeRuns(runs))
		}
	}
	b.in = nil
	for _, c := range a.claims {
		b.claimFor(c.pairs, c.slots)
	}
}

// mergeRuns returns the union of runs as one set of sorted, disjoint runs.
func mergeRuns(runs []keyspace.Range) keyspace.Keys {
	slices.SortFunc(runs, func(x, y keyspace.Range) int { return cmp.Compare(x.Lo, y.Lo) })
	var k keyspace.Keys
	cur := runs[0]
	for _, r := range runs[1:] {
		if r.Lo <= cur.Hi {
			cur.Hi = max(cur.Hi, r.Hi)
			continue
		}
		k.AddRun(cur.Lo, cur.Hi)
		cur = r
	}
	k.AddRun(cur.Lo, cur.Hi)
	return k
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
		b.keys(it.t, it.keys)
	}
	b.claim()
}

// keys adds the current state of t's keys, in pieces of whole slots that
// fit a message.
func (b *builder) keys(t *tableState, keys keyspace.Keys) {
	st := t.store.Stride()
	per := max(keyspace.SlotSize, maxReplicateFrame/(4*st+8))
	if keys.IsRuns() {
		per = max(keyspace.SlotSize, maxReplicateFrame/(4*st))
	}
	pieces(keys, per, func(k keyspace.Keys) {
		f := make([]float32, k.Len()*st)
		if k.IsRuns() {
			r := k.Runs()[0]
			t.store.ExportRun(r.Lo, f)
			b.add(wire.State{Table: t.id, Stride: uint32(st), Lo: r.Lo, N: uint32(r.Len()), Floats: f})
			return
		}
		t.store.Export(k.List(), f)
		b.add(wire.State{Table: t.id, Stride: uint32(st), Keys: k.List(), Floats: f})
	})
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
	b.claimFor(b.base, b.in)
	b.in = nil
}

// claimFor adds pairs to the current message, each scoped to slots (and
// to its own slots, where it names them).
func (b *builder) claimFor(pairs []wire.Pair, slots keyspace.SlotSet) {
	for _, p := range pairs {
		sl := slots
		if p.Slots != nil {
			sl = keyspace.Intersect(p.Slots, slots)
		}
		if len(sl) > 0 {
			b.cur.Pairs = append(b.cur.Pairs, wire.Pair{Client: p.Client, Seq: p.Seq, Acked: p.Acked, Table: p.Table, Slots: sl})
		}
	}
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
