package store

import (
	"sync/atomic"

	"github.com/terrace-ml/terrace/keyspace"
)

// A dense group is a group of groupSlots consecutive slots (one stripe's
// unit, 1,024 keys) whose blocks are all full. Its blocks' buffers are cut
// from one allocation, in slot order, so that for a table without
// optimizer state the group's values are one contiguous run of memory,
// and the stripe's dense map finds all 16 blocks with one lookup instead of
// 16. A dense width-1 push spent 16% of its CPU in the per-slot map
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

// denseIndex returns slot's group number and position in it.
func denseIndex(slot uint64) (g uint64, i int) { return slot / groupSlots, int(slot % groupSlots) }

// maybeCompact makes slot's group dense if all its blocks are full. The
// caller holds s.mu for writing, and slot's block is full.
func (t *Table) maybeCompact(s *stripe, slot uint64) {
	g, _ := denseIndex(slot)
	if s.dense[g] != nil {
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
	if s.dense == nil {
		s.dense = make(map[uint64]*denseGroup)
	}
	s.dense[g] = dg
}

// dissolve forgets slot's dense group, if any, before one of its blocks
// changes shape (a key removed); it reports whether there was one. The
// group's blocks stay where they are, as ordinary blocks, after moving
// to a new buffer if a reader has pinned the current one (ordinary blocks
// are written in place), and the block that changes shape gets a buffer
// of its own (see remove). The caller holds s.mu for writing.
func (t *Table) dissolve(s *stripe, slot uint64) bool {
	g, _ := denseIndex(slot)
	if s.dense[g] == nil {
		return false
	}
	t.own(s, slot, block{})
	delete(s.dense, g)
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
	dg := s.dense[g]
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
	s.dense[g] = ng
	return ng
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
		dg := s.dense[g]
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
