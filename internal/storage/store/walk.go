package store

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/terrace-ml/terrace/keyspace"
)

// Range calls fn for every stored key in [lo,hi) in increasing order, with
// its value and state planes, until fn returns false. The slices are
// copies, valid only during the call; fn may call t's other methods. Each
// slot is copied under its lock, so Range sees a consistent state per slot
// but not across slots while writes go on.
func (t *Table) Range(lo, hi uint64, fn func(key uint64, val []float32, state [][]float32) bool) {
	var buf []float32
	state := make([][]float32, t.planes-1)
	for _, slot := range t.slots(lo, hi) {
		want := t.slotSpan(slot, lo, hi)
		s := t.stripe(slot)
		s.mu.RLock()
		b := s.blocks.get(slot)
		have := b.bits & want
		if have == 0 { // deleted since t.slots looked
			s.mu.RUnlock()
			continue
		}
		// The keys in [lo,hi) of one slot are consecutive in its planes.
		n := bits.OnesCount64(have)
		r := b.rank(uint(bits.TrailingZeros64(have)))
		buf = slices.Grow(buf[:0], n*t.stride)[:n*t.stride]
		src, c := b.buf(t.stride), int(capKeys[b.count()])*t.width
		for p := range t.planes {
			copy(buf[p*n*t.width:(p+1)*n*t.width], src[p*c+r*t.width:])
		}
		s.mu.RUnlock()

		for i := 0; have != 0; i, have = i+1, have&(have-1) {
			at := i * t.width
			for p := range state {
				state[p] = buf[(p+1)*n*t.width+at : (p+1)*n*t.width+at+t.width]
			}
			key := keyspace.SlotStart(slot) + uint64(bits.TrailingZeros64(have))
			if !fn(key, buf[at:at+t.width], state) {
				return
			}
		}
	}
}

// Load stores val and state (one slice per optimizer state plane) for key
// verbatim, creating the key or overwriting it: the inverse of Range.
func (t *Table) Load(key uint64, val []float32, state [][]float32) {
	if len(val) != t.width || len(state) != t.planes-1 {
		panic(fmt.Sprintf("store: Load of %d floats and %d state planes into a table of width %d with %d", len(val), len(state), t.width, t.planes-1))
	}
	slot, o := keyspace.Slot(key), uint(key%keyspace.SlotSize)
	s := t.stripe(slot)
	s.mu.Lock()
	defer s.mu.Unlock()
	b := t.own(s, slot, t.insert(s, slot, s.blocks.get(slot), 1<<o, -1))
	buf, c := b.buf(t.stride), int(capKeys[b.count()])*t.width
	at := b.rank(o) * t.width
	copy(buf[at:at+t.width], val)
	for p, sp := range state {
		if len(sp) != t.width {
			panic(fmt.Sprintf("store: Load of a %d-float state plane into a table of width %d", len(sp), t.width))
		}
		copy(buf[(p+1)*c+at:], sp)
	}
}

// DeleteSlot removes the keys of slot whose bits are not in keep (bit o is
// key slot*SlotSize+o).
func (t *Table) DeleteSlot(slot, keep uint64) {
	s := t.stripe(slot)
	s.mu.Lock()
	if b := s.blocks.get(slot); b.bits != 0 {
		t.remove(s, slot, b, ^keep)
	}
	s.mu.Unlock()
}

// Delete removes every key in [lo,hi).
func (t *Table) Delete(lo, hi uint64) {
	for _, slot := range t.slots(lo, hi) {
		s := t.stripe(slot)
		s.mu.Lock()
		t.remove(s, slot, s.blocks.get(slot), t.slotSpan(slot, lo, hi))
		s.mu.Unlock()
	}
}

// slots returns, in increasing order, the slots that held keys of [lo,hi)
// when looked at. A range of fewer slots than the table has blocks is
// probed slot by slot; a longer one (say, all keys) is found by scanning
// the maps and sorting.
func (t *Table) slots(lo, hi uint64) []uint64 {
	if lo >= hi {
		return nil
	}
	first, last := keyspace.Slot(lo), keyspace.Slot(hi-1)
	blocks := uint64(0)
	for i := range t.st {
		s := &t.st[i]
		s.mu.RLock()
		blocks += uint64(s.blocks.len())
		s.mu.RUnlock()
	}
	var out []uint64
	if last-first < blocks {
		for slot := first; ; slot++ {
			s := t.stripe(slot)
			s.mu.RLock()
			ok := s.blocks.get(slot).bits != 0
			s.mu.RUnlock()
			if ok {
				out = append(out, slot)
			}
			if slot == last {
				return out
			}
		}
	}
	for i := range t.st {
		s := &t.st[i]
		s.mu.RLock()
		for slot := range s.blocks.all() {
			if slot >= first && slot <= last {
				out = append(out, slot)
			}
		}
		s.mu.RUnlock()
	}
	slices.Sort(out)
	return out
}

// slotSpan returns the offsets of slot that lie in [lo,hi), a range that
// overlaps the slot.
func (t *Table) slotSpan(slot, lo, hi uint64) uint64 {
	start := keyspace.SlotStart(slot)
	a, b := uint(0), uint(keyspace.SlotSize)
	if lo > start {
		a = uint(lo - start)
	}
	if hi-start < keyspace.SlotSize {
		b = uint(hi - start)
	}
	return span(a, b)
}
