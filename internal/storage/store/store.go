package store

import (
	"fmt"
	"math/bits"
	"sync"
	"unsafe"

	"github.com/terrace-ml/terrace/internal/storage/optim"
	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/table"
)

// stripes is the number of lock stripes of a table, and groupSlots the
// number of consecutive slots that share one: slot s is guarded by stripe
// s/groupSlots%stripes. Requests on slots more than a group apart rarely
// share a lock, while a dense run takes one lock per group and looks its
// blocks up together, so that their cache misses overlap; with a lock per
// slot a dense width-1 push ran about half as fast. A group is a placement
// unit (64 slots, 4,096 keys): a pinned reply goes out in 16 KiB views of
// width-1 values and a dense push takes a lock per 4,096 keys; groups of
// 16 slots cost 4-9% more on dense pushes and pulls and nothing less on
// sparse ones (docs/design/dataplane.md, eighth session).
const (
	stripes    = 256
	groupSlots = 64
)

// A placement unit (keyspace.UnitBits) is a whole number of dense groups,
// so that the ring never splits a group between servers: this fails to
// compile otherwise.
var _ [0]struct{} = [(1 << keyspace.UnitBits) % groupSlots]struct{}{}

// Table is one table's keys, values and optimizer state on one server. Its
// methods are safe for concurrent use. Value slices are flat: width floats
// per key, keys in the order given; a slice of the wrong length panics, as
// it is the caller's bug.
type Table struct {
	width  int
	planes int // the value plane and each optimizer state plane
	stride int // width * planes: floats per key
	upd    *optim.Updater
	init   table.Init
	seed   uint64 // keyspace.Mix64(init.Seed), hoisted out of per-key init
	// perApply is max(1, applyFloats/width), hoisted out of apply, which
	// a sparse push calls for every key.
	perApply int
	st       [stripes]stripe
}

type stripe struct {
	mu     sync.RWMutex
	blocks slotMap // by slot number
	// dense holds the stripe's dense groups by group number (slot /
	// groupSlots); see dense.go.
	dense groupIndex
	keys  int64   // present keys
	bytes int64   // heap bytes of the blocks' buffers, spare ones included
	spare *spares // buffers blocks grew out of, for reuse; see freelist.go
	// Keeps the hot fields of neighbouring stripes on separate cache lines.
	_ [64]byte
}

// New returns an empty table for spec, which the caller has validated.
func New(spec table.Spec) (*Table, error) {
	upd, err := optim.New(spec.Rule)
	if err != nil {
		return nil, fmt.Errorf("store: table %q: %w", spec.Name, err)
	}
	t := &Table{
		width:  spec.Width,
		planes: 1 + upd.StateSlots(),
		upd:    upd,
		init:   spec.Init,
		seed:   keyspace.Mix64(spec.Init.Seed),
	}
	t.stride = t.width * t.planes
	t.perApply = max(1, applyFloats/t.width)
	return t, nil
}

func (t *Table) stripe(slot uint64) *stripe { return &t.st[slot/groupSlots%stripes] }

// Push applies vals to keys, which must be strictly increasing. A missing
// key is first created with the table's Init. It returns how many keys'
// updates were refused as non-finite; those keys keep their values.
func (t *Table) Push(keys []uint64, vals []float32) (refused int) {
	t.checkLen(len(keys), len(vals))
	st := make([][]float32, t.planes-1)
	if len(keys) >= minScatter && t.width <= gatherWidth && t.planes <= gatherPlanes {
		return t.pushGathered(keys, vals, st)
	}
	t.visit(pieces{keys: keys}, write, func(b block, p piece) {
		refused += t.pushPiece(b, p, keys, vals, st)
	})
	return refused
}

// pushPiece is Push for piece p, in block b; st is Push's scratch.
func (t *Table) pushPiece(b block, p piece, keys []uint64, vals []float32, st [][]float32) (refused int) {
	if p.n == 1 { // most pieces of a list of random keys
		r := b.rank(uint(bits.TrailingZeros64(p.want)))
		return t.apply(b, r, 1, vals[p.i*t.width:(p.i+1)*t.width], st)
	}
	run := keys[p.i : p.i+p.n]
	forRuns(run, func(i, n int) {
		i += p.i
		r := b.rank(uint(keys[i] % keyspace.SlotSize))
		refused += t.apply(b, r, n, vals[i*t.width:(i+n)*t.width], st)
	})
	return refused
}

// Pull copies the values of keys, which must be strictly increasing, into
// dst. A key not present reads as its initial value (the table's Init, a
// function of the key) and is not stored: only writes create keys.
func (t *Table) Pull(keys []uint64, dst []float32) {
	t.checkLen(len(keys), len(dst))
	t.visit(pieces{keys: keys}, peek, func(b block, p piece) {
		if b.bits&p.want != p.want {
			t.pullSome(b, p, keys, dst)
			return
		}
		vals := b.buf(t.stride)
		if w := t.width; p.n == 1 {
			r := b.rank(uint(bits.TrailingZeros64(p.want)))
			copy(dst[p.i*w:(p.i+1)*w], vals[r*w:(r+1)*w])
			return
		}
		forRuns(keys[p.i:p.i+p.n], func(i, n int) {
			i += p.i
			r := b.rank(uint(keys[i] % keyspace.SlotSize))
			copy(dst[i*t.width:(i+n)*t.width], vals[r*t.width:])
		})
	})
}

// pullSome is Pull for a piece whose block lacks some of its keys: those
// get their initial values, computed, not stored.
func (t *Table) pullSome(b block, p piece, keys []uint64, dst []float32) {
	vals := b.buf(t.stride)
	w := t.width
	for i := p.i; i < p.i+p.n; i++ {
		o := uint(keys[i] % keyspace.SlotSize)
		if b.bits&(1<<o) == 0 {
			t.initValue(dst[i*w:(i+1)*w], keys[i])
			continue
		}
		r := b.rank(o)
		copy(dst[i*w:(i+1)*w], vals[r*w:(r+1)*w])
	}
}

// PushRun is Push for the len(vals)/width consecutive keys from lo, which
// must not run past the last key. Where the run covers whole blocks each
// block is updated in one call, which is what makes dense pushes fast.
func (t *Table) PushRun(lo uint64, vals []float32) (refused int) {
	src := t.run(lo, len(vals))
	if t.planes == 1 {
		return t.pushFlat(lo, lo+uint64(src.n), vals)
	}
	return t.pushPieces(src, vals)
}

// pushPieces is PushRun and PushRuns piece by piece: each slot's block
// looked up and updated in one call.
func (t *Table) pushPieces(src pieces, vals []float32) (refused int) {
	st := make([][]float32, t.planes-1)
	t.visit(src, write, func(b block, p piece) {
		r := b.rank(uint(bits.TrailingZeros64(p.want)))
		refused += t.apply(b, r, p.n, vals[p.i*t.width:(p.i+p.n)*t.width], st)
	})
	return refused
}

// PullRun is Pull for the len(dst)/width consecutive keys from lo, which
// must not run past the last key.
func (t *Table) PullRun(lo uint64, dst []float32) {
	t.visit(t.run(lo, len(dst)), read, func(b block, p piece) {
		r := b.rank(uint(bits.TrailingZeros64(p.want)))
		copy(dst[p.i*t.width:(p.i+p.n)*t.width], b.buf(t.stride)[r*t.width:])
	})
}

// PushRuns is PushRun for the keys of runs, which must be increasing and
// disjoint, with their values one after another in vals: a range spread
// over several servers reaches each as many short runs, which one pass
// visits with one lock per stripe group instead of one call per run.
func (t *Table) PushRuns(runs []keyspace.Range, vals []float32) (refused int) {
	if t.planes > 1 {
		return t.pushPieces(pieces{runs: runs}, vals)
	}
	off := 0
	for _, r := range runs {
		n := int(r.Len()) * t.width
		refused += t.pushFlat(r.Lo, r.Hi, vals[off:off+n])
		off += n
	}
	return refused
}

// PullRuns is PullRun for the keys of runs (see PushRuns).
func (t *Table) PullRuns(runs []keyspace.Range, dst []float32) {
	t.visit(pieces{runs: runs}, read, func(b block, p piece) {
		r := b.rank(uint(bits.TrailingZeros64(p.want)))
		copy(dst[p.i*t.width:(p.i+p.n)*t.width], b.buf(t.stride)[r*t.width:])
	})
}

// piece is the part of a request that falls in one slot.
type piece struct {
	slot uint64
	want uint64 // the offsets in the slot of the piece's keys
	i, n int    // the piece is keys i to i+n-1 of the request
}

// pieces splits a request by slot: either strictly increasing keys, or
// (when keys is nil) the run of n keys from lo, or (when runs is set)
// the keys of increasing, disjoint runs.
type pieces struct {
	keys []uint64
	lo   uint64
	n    int
	i    int // the next key to hand out
	runs []keyspace.Range
	ri   int // the run the next key is in
	roff uint64
}

func (ps *pieces) next() (piece, bool) {
	i := ps.i
	if ps.runs != nil {
		for ps.ri < len(ps.runs) && ps.roff >= ps.runs[ps.ri].Len() {
			ps.ri, ps.roff = ps.ri+1, 0
		}
		if ps.ri == len(ps.runs) {
			return piece{}, false
		}
		r := ps.runs[ps.ri]
		k := r.Lo + ps.roff
		o := int(k % keyspace.SlotSize)
		n := int(min(uint64(keyspace.SlotSize-o), r.Len()-ps.roff))
		ps.i += n
		ps.roff += uint64(n)
		return piece{keyspace.Slot(k), span(uint(o), uint(o+n)), i, n}, true
	}
	if ps.keys == nil {
		if i >= ps.n {
			return piece{}, false
		}
		k := ps.lo + uint64(i)
		o := int(k % keyspace.SlotSize)
		n := min(keyspace.SlotSize-o, ps.n-i)
		ps.i += n
		return piece{keyspace.Slot(k), span(uint(o), uint(o+n)), i, n}, true
	}
	if i >= len(ps.keys) {
		return piece{}, false
	}
	p := keyPiece(ps.keys, i)
	ps.i += p.n
	return p, true
}

// keyPiece is the piece of strictly increasing keys that starts at
// keys[i]: the keys from i on that share its slot.
func keyPiece(keys []uint64, i int) piece {
	slot := keyspace.Slot(keys[i])
	want := uint64(1) << (keys[i] % keyspace.SlotSize)
	j := i + 1
	for ; j < len(keys) && keyspace.Slot(keys[j]) == slot; j++ {
		want |= 1 << (keys[j] % keyspace.SlotSize)
	}
	return piece{slot, want, i, j - i}
}

// run returns the pieces of the run of floats/width keys from lo.
func (t *Table) run(lo uint64, floats int) pieces {
	if floats%t.width != 0 {
		panic(fmt.Sprintf("store: %d floats is not a whole number of width-%d values", floats, t.width))
	}
	return pieces{lo: lo, n: floats / t.width}
}

// access is how visit holds a stripe's lock and what it does about keys
// a piece wants that are not present.
type access uint8

const (
	// read: the lock for reading; missing keys are created first (taking
	// the lock for writing), so fn finds every key.
	read access = iota
	// peek: the lock for reading; missing keys stay missing and fn sees the
	// block as it is. A pull uses it: an absent key's value is its initial
	// value, which is a function of the key, so reading one need not store
	// it (a sparse pull of fresh keys spent most of its time inserting).
	peek
	// write: the lock for writing; missing keys are created first.
	write
)

// visit calls fn for each piece, in order, with its slot's block, under
// the stripe's lock as mode says. Consecutive pieces in one stripe share
// one hold of its lock.
func (t *Table) visit(src pieces, mode access, fn func(block, piece)) {
	t.visitFlush(src, mode, fn, nil)
}

// visitFlush is visit with flush, if not nil, called at the end of each
// hold of a stripe's lock, after fn has seen the pieces of that hold: a
// caller that defers some of fn's work (pushGathered) does it there, while
// the blocks fn saw are still locked and where fn saw them.
func (t *Table) visitFlush(src pieces, mode access, fn func(block, piece), flush func()) {
	if len(src.keys) >= minScatter {
		t.visitByStripe(src, mode, fn, flush)
		return
	}
	var batch [groupSlots]piece
	var blocks [groupSlots]block
	var dgs [groupSlots]*denseGroup
	var ents [groupSlots]int32
	var addrs [3 * groupSlots]unsafe.Pointer
	f := found{blocks[:], dgs[:], ents[:], addrs[:]}
	var s *stripe
	n := 0
	for p, ok := src.next(); ok; p, ok = src.next() {
		ps := t.stripe(p.slot)
		if n > 0 && (ps != s || n == len(batch)) {
			t.visitBatch(s, batch[:n], &f, mode, fn, flush)
			n = 0
		}
		s = ps
		batch[n] = p
		n++
	}
	if n > 0 {
		t.visitBatch(s, batch[:n], &f, mode, fn, flush)
	}
}

// found is visitBatch's room for what it finds of each piece of a batch,
// at least as long as the batch (addrs three times): the caller's, as
// zeroing arrays on every call cost more than a short visit.
type found struct {
	blocks []block
	dgs    []*denseGroup    // the pieces' dense groups, or nil
	ents   []int32          // the slot map's entries of the pieces' blocks (slotMap.find)
	addrs  []unsafe.Pointer // touch's
}

// visitBatch is visit for pieces in stripe s. It looks all their blocks up
// before using any, so that the lookups' cache misses overlap. flush, if
// not nil, runs last, under the lock (visitFlush).
func (t *Table) visitBatch(s *stripe, batch []piece, f *found, mode access, fn func(block, piece), flush func()) {
	blocks, dgs, ents := f.blocks, f.dgs, f.ents
	locked := mode == write
	if locked {
		s.mu.Lock()
		defer s.mu.Unlock()
	} else {
		s.mu.RLock()
	}
	missing, sparse := t.lookup(s, batch, f)
	if sparse {
		// A dense run's values are read in order, which the processor
		// prefetches by itself.
		touch(blocks[:len(batch)], batch, t.width, mode != peek, f.addrs)
	}
	if missing && mode == read {
		s.mu.RUnlock()
		s.mu.Lock()
		defer s.mu.Unlock()
		locked = true
		// Another request may have created keys, and moved blocks, meanwhile.
		for j, p := range batch {
			blocks[j], ents[j] = s.blocks.find(p.slot)
			dgs[j] = s.dense.get(p.slot / groupSlots)
		}
	} else if !locked {
		defer s.mu.RUnlock()
	}
	if locked && (missing || !sparse) {
		t.writable(s, batch, blocks, dgs, ents)
	}
	for j, p := range batch {
		fn(blocks[j], p)
	}
	if flush != nil {
		flush()
	}
}

// lookup finds the blocks (and dense groups) of batch's pieces, all in
// stripe s, whose lock the caller holds. It reports whether some piece
// wants a key that is not present, and whether s has no dense groups.
func (t *Table) lookup(s *stripe, batch []piece, f *found) (missing, sparse bool) {
	blocks, dgs, ents := f.blocks, f.dgs, f.ents
	// A stripe of a sparse table has no dense groups to look for; its
	// probes' first entries are touched together first.
	if s.dense.n == 0 {
		s.blocks.touch(batch, f.addrs)
		for j, p := range batch {
			dgs[j] = nil
			blocks[j], ents[j] = s.blocks.find(p.slot)
			missing = missing || blocks[j].bits&p.want != p.want
		}
		return missing, true
	}
	var dg *denseGroup
	lastG := ^uint64(0)
	for j, p := range batch {
		// A dense run's pieces share a group: one lookup for its 64 slots.
		g, i := denseIndex(p.slot)
		if g != lastG {
			dg, lastG = s.dense.get(g), g
		}
		if dgs[j] = dg; dg != nil {
			blocks[j], ents[j] = t.denseBlock(dg, i), -1
		} else {
			blocks[j], ents[j] = s.blocks.find(p.slot)
		}
		missing = missing || blocks[j].bits&p.want != p.want
	}
	return missing, false
}

// writable makes the batch's blocks hold every key their pieces want and
// points them at memory that no pinned reply is reading; s.mu is held for
// writing.
func (t *Table) writable(s *stripe, batch []piece, blocks []block, dgs []*denseGroup, ents []int32) {
	compacted := false
	for j, p := range batch {
		if j > 0 && p.slot == batch[j-1].slot {
			// Two runs in one slot: the first's insert may have moved
			// the block since the lookup.
			blocks[j] = blocks[j-1]
		}
		nb := t.insert(s, p.slot, blocks[j], p.want, ents[j])
		compacted = compacted || (nb.bits != blocks[j].bits && nb.bits == ^uint64(0))
		blocks[j] = nb
	}
	for j := len(batch) - 2; j >= 0; j-- {
		if batch[j].slot == batch[j+1].slot {
			blocks[j] = blocks[j+1] // where the slot's last insert left it
		}
	}
	// A pinned group moves before it is written, decided once per
	// group: a reader may unpin it between two of its pieces, and all
	// must then still go to the buffer the first one went to.
	var cur, was *denseGroup
	for j, p := range batch {
		if compacted {
			// A group made dense moved its blocks (it is not pinned).
			blocks[j] = s.blocks.get(p.slot)
		}
		if dgs[j] == nil {
			continue
		}
		if dgs[j] != was {
			was, cur = dgs[j], t.ownGroup(s, p.slot)
		}
		_, i := denseIndex(p.slot)
		blocks[j] = t.denseBlock(cur, i)
	}
}

// applyFloats bounds the floats of one plane that apply hands to one
// Apply call (but always at least one key). Apply checks a whole call's
// results before it commits any, and the commit pass must still find them
// in L1: on dense width-64 runs this was about 20% faster than whole blocks.
const applyFloats = 256

// apply pushes g to the n keys of b from rank r, which are consecutive
// keys, and returns how many of them refused it.
func (t *Table) apply(b block, r, n int, g []float32, st [][]float32) (refused int) {
	if per := t.perApply; n > per {
		for k := 0; k < n; k += per {
			m := min(per, n-k)
			refused += t.apply(b, r+k, m, g[k*t.width:(k+m)*t.width], st)
		}
		return refused
	}
	buf := b.buf(t.stride)
	c := int(capKeys[b.count()]) * t.width
	lo, hi := r*t.width, (r+n)*t.width
	for p := range st {
		st[p] = buf[(p+1)*c+lo : (p+1)*c+hi]
	}
	if t.upd.Apply(buf[lo:hi], st, g) {
		return 0
	}
	if n == 1 {
		return 1
	}
	// Some key refused, and the failed call changed nothing: find which
	// ones, key by key.
	for k := range n {
		refused += t.apply(b, r+k, 1, g[k*t.width:(k+1)*t.width], st)
	}
	return refused
}

// insert adds the keys of add missing from b, slot's block in stripe s,
// with their initial values and zero state, and returns the updated block.
// at is the slot-map entry where b was found, or -1 (slotMap.setAt). The
// caller holds s.mu for writing.
func (t *Table) insert(s *stripe, slot uint64, b block, add uint64, at int32) block {
	add &^= b.bits
	if add == 0 {
		return b
	}
	if add&(add-1) == 0 {
		return t.insertOne(s, slot, b, add, at)
	}
	nb := block{bits: b.bits | add, p: b.p}
	buf := b.buf(t.stride)
	grown := capKeys[nb.count()] != capKeys[b.count()]
	if grown {
		nb.p, _ = s.newBuf(int(capKeys[nb.count()]), t.stride)
	}
	nbuf := nb.buf(t.stride)
	if b.bits != 0 {
		move(nbuf, buf, t.width, t.planes, b.bits, nb.bits)
	}
	if grown {
		s.recycle(b.p, int(capKeys[b.count()]), t.stride)
	}
	c := int(capKeys[nb.count()]) * t.width
	base := keyspace.SlotStart(slot)
	for a := add; a != 0; a &= a - 1 {
		o := uint(bits.TrailingZeros64(a))
		at := nb.rank(o) * t.width
		t.initValue(nbuf[at:at+t.width], base+uint64(o))
		for p := 1; p < t.planes; p++ {
			clear(nbuf[p*c+at : p*c+at+t.width])
		}
	}
	s.keys += int64(bits.OnesCount64(add))
	s.blocks.setAt(at, slot, nb)
	if nb.bits == ^uint64(0) {
		t.maybeCompact(s, slot)
		nb = s.blocks.get(slot)
	}
	return nb
}

// insertOne is insert for one key, add's only bit: most keys of a sparse
// push arrive alone in their block. The keys above it move up one place in
// each plane, within the buffer if its capacity still suffices, else into
// another: a spare of the stripe's (stale floats) or a new one, which make
// has zeroed; the old buffer becomes a spare (freelist.go).
func (t *Table) insertOne(s *stripe, slot uint64, b block, add uint64, at int32) block {
	o := uint(bits.TrailingZeros64(add))
	n, r, w := b.count(), b.rank(o), t.width
	nb := block{bits: b.bits | add, p: b.p}
	oc, nc := int(capKeys[n])*w, int(capKeys[n+1])*w
	lo, hi := r*w, n*w
	fresh, zeroed := oc != nc, false
	if fresh {
		var p0 *float32
		p0, zeroed = s.newBuf(int(capKeys[n+1]), t.stride)
		nbuf := bufOf(p0, int(capKeys[n+1]), t.stride)
		for p := range t.planes {
			src, dst := b.buf(t.stride)[p*oc:], nbuf[p*nc:]
			copy(dst[:lo], src[:lo])
			copy(dst[lo+w:hi+w], src[lo:hi])
			if !zeroed && p > 0 {
				clear(dst[lo : lo+w])
			}
		}
		nb.p = p0
		s.recycle(b.p, int(capKeys[n]), t.stride)
	} else {
		buf := b.buf(t.stride)
		for p := range t.planes {
			pl := buf[p*nc:]
			copy(pl[lo+w:hi+w], pl[lo:hi])
			if p > 0 {
				clear(pl[lo : lo+w])
			}
		}
	}
	if v := nb.buf(t.stride)[lo : lo+w]; !zeroed || t.init.Kind != table.Zero { // a zeroed buffer holds a zero initial value already
		t.initValue(v, keyspace.SlotStart(slot)+uint64(o))
	}
	s.keys++
	s.blocks.setAt(at, slot, nb)
	if nb.bits == ^uint64(0) {
		t.maybeCompact(s, slot)
		nb = s.blocks.get(slot)
	}
	return nb
}

// remove drops the keys of del from b, slot's block in stripe s. The caller
// holds s.mu for writing.
func (t *Table) remove(s *stripe, slot uint64, b block, del uint64) {
	del &= b.bits
	if del == 0 {
		return
	}
	s.keys -= int64(bits.OnesCount64(del))
	if t.dissolve(s, slot) {
		b = s.blocks.get(slot) // moved if it was pinned
	}
	nb := block{bits: b.bits &^ del, p: b.p}
	buf := b.buf(t.stride)
	if nb.bits == 0 {
		s.bytes -= allocBytes(len(buf))
		s.blocks.del(slot)
		return
	}
	// A block of a dissolved dense group shares its buffer with the
	// others, so it moves to one of its own even at the same capacity.
	if capKeys[nb.count()] != capKeys[b.count()] || b.count() == keyspace.SlotSize {
		s.bytes += allocBytes(int(capKeys[nb.count()])*t.stride) - allocBytes(len(buf))
		nbuf := make([]float32, int(capKeys[nb.count()])*t.stride)
		nb.p = &nbuf[0]
	}
	move(nb.buf(t.stride), buf, t.width, t.planes, b.bits, nb.bits)
	s.blocks.set(slot, nb)
}

func (t *Table) checkLen(keys, floats int) {
	if keys*t.width != floats {
		panic(fmt.Sprintf("store: %d keys of width %d need %d floats, got %d", keys, t.width, keys*t.width, floats))
	}
}

// forRuns calls fn(i, n) for each maximal run keys[i:i+n] of consecutive
// keys; within one block such a run is one span of every plane.
func forRuns(keys []uint64, fn func(i, n int)) {
	for i := 0; i < len(keys); {
		j := i + 1
		for j < len(keys) && keys[j] == keys[j-1]+1 {
			j++
		}
		fn(i, j-i)
		i = j
	}
}
