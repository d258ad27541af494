package store

import (
	"sync/atomic"

	"github.com/terrace-ml/terrace/keyspace"
)

// A dense group is a group of groupSlots consecutive slots (one stripe's
// unit, 4,096 keys) whose blocks are all full. Its blocks' buffers are cut
// from one allocation, in slot order, so that for a table without
// optimizer state the group's values are one contiguous run of memory,
// and the stripe's dense index finds all 64 blocks with one lookup instead
// of 64. A dense width-1 push spent 16% of its CPU in the per-slot map
// lookups before (docs/bench.md); a pull can send a dense group's values
// to the socket from where they lie (PinRun).
//
// Sparse tables never form dense groups and pay nothing for them: the
// per-slot map stays the source of truth, and a dense group is only an
// index over it plus the shared buffer.
type denseGroup struct {
	buf []float32 // block i's buffer is the i-th 64*stride floats
	// pins counts the readers that send buf to a socket without copying
	// it. A writer must not change a pinned buffer: it moves the group to
	// a new buffer first (own), and the readers keep the old one.
	pins atomic.Int32
}

// groupIndex finds a stripe's dense groups by group number. A dense push
// looks one up per 4,096 keys, right after summing 64 MiB has pushed the
// index out of every cache: in a map that cost two or three misses a
// lookup, 4 ms of a 14 ms push. The groups of a stripe are every
// stripes-th, so near holds group g at g/stripes, the first nearGroups of
// them, in one array; far, a map, holds those beyond (keys past 2^30),
// which only tables that spread dense groups over a huge key space have.
type groupIndex struct {
	near []*denseGroup
	far  map[uint64]*denseGroup
	n    int // groups held
}

// nearGroups bounds near: at most 32 KiB a stripe, 8 MiB a table.
const nearGroups = 4096

func (x *groupIndex) get(g uint64) *denseGroup {
	if i := g / stripes; i < uint64(len(x.near)) {
		return x.near[i]
	} else if i < nearGroups {
		return nil
	}
	return x.far[g]
}

// set makes dg group g's dense group; nil forgets it.
func (x *groupIndex) set(g uint64, dg *denseGroup) {
	was := x.get(g) != nil
	switch i := g / stripes; {
	case i < nearGroups:
		if i >= uint64(len(x.near)) {
			if dg == nil {
				return
			}
			x.near = append(x.near, make([]*denseGroup, int(i)+1-len(x.near))...)
		}
		x.near[i] = dg
	case dg == nil:
		delete(x.far, g)
	default:
		if x.far == nil {
			x.far = make(map[uint64]*denseGroup)
		}
		x.far[g] = dg
	}
	switch now := dg != nil; {
	case now && !was:
		x.n++
	case was && !now:
		x.n--
	}
}

// denseIndex returns slot's group number and position in it.
func denseIndex(slot uint64) (g uint64, i int) { return slot / groupSlots, int(slot % groupSlots) }

// maybeCompact makes slot's group dense if all its blocks are full. The
// caller holds s.mu for writing, and slot's block is full.
func (t *Table) maybeCompact(s *stripe, slot uint64) {
	g, _ := denseIndex(slot)
	if s.dense.get(g) != nil {
		return
	}
	first := g * groupSlots
	var bs [groupSlots]block
	for i := range bs {
		b := s.blocks.get(first + uint64(i))
		if b.bits != ^uint64(0) {
			return
		}
		bs[i] = b
	}
	s.dropSpares()
	per := keyspace.SlotSize * t.stride
	dg := &denseGroup{buf: make([]float32, groupSlots*per)}
	for i, b := range bs {
		dst := dg.buf[i*per : (i+1)*per]
		s.bytes -= allocBytes(per)
		copy(dst, b.buf(t.stride))
		b.p = &dst[0]
		s.blocks.set(first+uint64(i), b)
	}
	s.bytes += allocBytes(len(dg.buf))
	s.dense.set(g, dg)
}

// dissolve forgets slot's dense group, if any, before one of its blocks
// changes shape (a key removed); it reports whether there was one. The
// group's blocks stay where they are, as ordinary blocks, after moving
// to a new buffer if a reader has pinned the current one (ordinary blocks
// are written in place), and the block that changes shape gets a buffer
// of its own (see remove). The caller holds s.mu for writing.
func (t *Table) dissolve(s *stripe, slot uint64) bool {
	g, _ := denseIndex(slot)
	if s.dense.get(g) == nil {
		return false
	}
	t.own(s, slot, block{})
	s.dense.set(g, nil)
	return true
}

// own returns slot's block after moving its dense group, if any, to a new
// buffer when a reader has pinned the current one, so that the caller may
// write the block's values in place. The caller holds s.mu for writing.
func (t *Table) own(s *stripe, slot uint64, b block) block {
	dg := t.ownGroup(s, slot)
	if dg == nil {
		return b
	}
	_, i := denseIndex(slot)
	return t.denseBlock(dg, i)
}

// ownGroup returns slot's dense group (nil if none), first moved to a new
// buffer if a reader has pinned it. The caller holds s.mu for writing.
func (t *Table) ownGroup(s *stripe, slot uint64) *denseGroup {
	g, _ := denseIndex(slot)
	dg := s.dense.get(g)
	if dg == nil || dg.pins.Load() == 0 {
		return dg
	}
	per := keyspace.SlotSize * t.stride
	ng := &denseGroup{buf: make([]float32, len(dg.buf))}
	copy(ng.buf, dg.buf)
	first := g * groupSlots
	for j := range groupSlots {
		s.blocks.set(first+uint64(j), block{bits: ^uint64(0), p: &ng.buf[j*per]})
	}
	s.dense.set(g, ng)
	return ng
}

// groupKeys is the number of keys of a dense group.
const groupKeys = groupSlots * keyspace.SlotSize

// pushFlat is PushRun of keys [lo, hi) for a table without optimizer
// state, where a dense group holds its 4,096 keys' values in one run of
// memory: each group the run covers whole is updated under one hold of
// its stripe's lock in one pass over its values, without looking its
// blocks up. The rest of the run (its ends, and groups not dense yet) goes
// piece by piece. A dense width-1 push spent a third of the server's
// handling in the 16 lookups and calls per group this skips.
func (t *Table) pushFlat(lo, hi uint64, vals []float32) (refused int) {
	w := t.width
	from := lo // the first key not yet pushed
	for g := (lo + groupKeys - 1) / groupKeys; (g+1)*groupKeys <= hi; g++ {
		at := g * groupKeys
		v := vals[int(at-lo)*w : int(at-lo+groupKeys)*w]
		n, ok := t.pushGroup(g, v)
		if !ok {
			continue
		}
		refused += n
		if from < at {
			refused += t.pushPieces(pieces{lo: from, n: int(at - from)}, vals[int(from-lo)*w:])
		}
		from = at + groupKeys
	}
	if from < hi {
		refused += t.pushPieces(pieces{lo: from, n: int(hi - from)}, vals[int(from-lo)*w:])
	}
	return refused
}

// pushGroup applies vals to the keys of group g if it is dense, and
// reports whether it was; see pushFlat.
func (t *Table) pushGroup(g uint64, vals []float32) (refused int, ok bool) {
	s := t.stripe(g * groupSlots)
	s.mu.Lock()
	defer s.mu.Unlock()
	dg := s.dense.get(g)
	if dg == nil {
		return 0, false
	}
	if dg.pins.Load() != 0 {
		dg = t.ownGroup(s, g*groupSlots)
	}
	return t.applyFlat(dg.buf, vals), true
}

// applyFlat is apply for consecutive keys whose values (and nothing else)
// lie one after another in v: a table without optimizer state.
func (t *Table) applyFlat(v, g []float32) (refused int) {
	w := t.width
	if r, ok := t.upd.SumKeys(v, g, w); ok {
		return r
	}
	step := t.perApply * w
	for lo := 0; lo < len(v); lo += step {
		hi := min(lo+step, len(v))
		if t.upd.Apply(v[lo:hi], nil, g[lo:hi]) {
			continue
		}
		// Some key refused, and the failed call changed nothing.
		for k := lo; k < hi; k += w {
			if !t.upd.Apply(v[k:k+w], nil, g[k:k+w]) {
				refused++
			}
		}
	}
	return refused
}

// denseBlock is block i of dense group dg: full, its buffer cut from dg's.
func (t *Table) denseBlock(dg *denseGroup, i int) block {
	return block{bits: ^uint64(0), p: &dg.buf[i*keyspace.SlotSize*t.stride]}
}

// Pin holds the dense groups whose values a PinRun handed out; the zero
// value is ready, and one Pin may be reused after Release.
type Pin struct {
	groups []*denseGroup
	// Views are the run's values, in order: one slice per dense group.
	Views [][]float32
}

// Release lets writers change the pinned values in place again.
func (p *Pin) Release() {
	for _, g := range p.groups {
		g.pins.Add(-1)
	}
	clear(p.groups)
	p.groups = p.groups[:0]
	clear(p.Views)
	p.Views = p.Views[:0]
}

// PinRun hands out, in p.Views, the values of the n consecutive keys from
// lo without copying them, if the table keeps only values (no optimizer
// state) and every key of the run lies in a dense group; the values do not
// change until p.Release, as writers move a pinned group first. It reports
// false, with p empty, otherwise; the caller then copies with PullRun.
func (t *Table) PinRun(lo uint64, n int, p *Pin) bool {
	if t.planes != 1 || n <= 0 {
		return false
	}
	w := t.width
	for k := lo; k < lo+uint64(n); {
		slot := keyspace.Slot(k)
		g, i := denseIndex(slot)
		s := t.stripe(slot)
		s.mu.RLock()
		dg := s.dense.get(g)
		if dg == nil {
			s.mu.RUnlock()
			p.Release()
			return false
		}
		dg.pins.Add(1)
		s.mu.RUnlock()
		p.groups = append(p.groups, dg)
		from := (i*keyspace.SlotSize + int(k%keyspace.SlotSize)) * w
		take := min(uint64(n)-(k-lo), uint64(groupSlots*keyspace.SlotSize)-uint64(from/w))
		p.Views = append(p.Views, dg.buf[from:from+int(take)*w])
		k += take
	}
	return true
}
