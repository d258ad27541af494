package store

import (
	"math/bits"

	"github.com/terrace-ml/terrace/keyspace"
)

// Stride is the number of floats of a key's full state: its value and each
// optimizer state plane, width floats each.
func (t *Table) Stride() int { return t.stride }

// Export copies the full state of keys (strictly increasing) into dst,
// Stride floats per key: the value, then each state plane. Missing keys are
// created first (the keys exported are those just pushed, so they are
// present but for a race with a delete). Replication ships this state, not
// the pushed gradient, so that applying it twice or late does no harm.
func (t *Table) Export(keys []uint64, dst []float32) {
	t.checkState(len(keys), len(dst))
	t.visit(pieces{keys: keys}, read, func(b block, p piece) { t.copyState(b, p, keys, dst, false) })
}

// ExportRun is Export for the len(dst)/Stride consecutive keys from lo.
func (t *Table) ExportRun(lo uint64, dst []float32) {
	t.visit(pieces{lo: lo, n: len(dst) / t.stride}, read, func(b block, p piece) { t.copyState(b, p, nil, dst, false) })
}

// Import stores the full state in src (as Export lays it out) for keys,
// creating missing keys and overwriting present ones.
func (t *Table) Import(keys []uint64, src []float32) {
	t.checkState(len(keys), len(src))
	t.visit(pieces{keys: keys}, write, func(b block, p piece) { t.copyState(b, p, keys, src, true) })
}

// ImportRun is Import for the len(src)/Stride consecutive keys from lo.
func (t *Table) ImportRun(lo uint64, src []float32) {
	t.visit(pieces{lo: lo, n: len(src) / t.stride}, write, func(b block, p piece) { t.copyState(b, p, nil, src, true) })
}

// copyState moves piece p's keys between block b and the flat state vector
// ext, into the block if in is set.
func (t *Table) copyState(b block, p piece, keys []uint64, ext []float32, in bool) {
	w, room := t.width, int(capKeys[b.count()])
	buf := b.buf(t.stride)
	for j := 0; j < p.n; j++ {
		i := p.i + j
		var o uint
		if keys != nil {
			o = uint(keys[i] % 64)
		} else {
			o = uint(bits.TrailingZeros64(p.want)) + uint(j)
		}
		r := b.rank(o)
		for pl := range t.planes {
			blk := buf[(pl*room+r)*w : (pl*room+r+1)*w]
			e := ext[i*t.stride+pl*w : i*t.stride+(pl+1)*w]
			if in {
				copy(blk, e)
			} else {
				copy(e, blk)
			}
		}
	}
}

func (t *Table) checkState(keys, floats int) {
	if keys*t.stride != floats {
		panic("store: state vector of the wrong length")
	}
}

// Keys returns the present keys in [lo, hi), sorted; a range handoff uses
// it to find what to copy.
func (t *Table) Keys(lo, hi uint64) []uint64 {
	var keys []uint64
	for _, slot := range t.slots(lo, hi) {
		s := t.stripe(slot)
		s.mu.RLock()
		have := s.blocks.get(slot).bits & t.slotSpan(slot, lo, hi)
		s.mu.RUnlock()
		for ; have != 0; have &= have - 1 {
			keys = append(keys, keyspace.SlotStart(slot)+uint64(bits.TrailingZeros64(have)))
		}
	}
	return keys
}

// Present returns the bitmap of slot's present keys (bit o is key
// slot*SlotSize+o).
func (t *Table) Present(slot uint64) uint64 {
	s := t.stripe(slot)
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.blocks.get(slot).bits
}

// Slots calls fn, in slot order, with every slot that holds keys and the
// bitmap of its present keys (bit o is key slot*SlotSize+o).
func (t *Table) Slots(fn func(slot, present uint64)) {
	for _, slot := range t.slots(0, ^uint64(0)) {
		s := t.stripe(slot)
		s.mu.RLock()
		bits := s.blocks.get(slot).bits
		s.mu.RUnlock()
		if bits != 0 {
			fn(slot, bits)
		}
	}
}
