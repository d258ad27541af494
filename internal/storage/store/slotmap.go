package store

import (
	"iter"
	"math/bits"
	"unsafe"
)

// slotMap holds a stripe's blocks by slot number: open addressing with
// linear probing, the slot and its block side by side in one 24-byte
// entry. A sparse push or pull of random keys finds each key's block with
// one probe, and its cost was the probe's cache misses: Go's map reaches
// an entry through a directory, a table and a group's control word, one
// dependent load after another, where an entry here is one load from the
// hash, and a batch's probes are short enough for the processor to
// overlap their misses (docs/design/dataplane.md, "Sparse").
//
// A stored block always holds a key, so an entry with no bits is empty;
// an empty entry is all zeros.
type slotMap struct {
	ents  []slotEnt // a power of two long, or nil
	n     int       // entries in use
	shift uint8     // 64 - log2(len(ents))
}

type slotEnt struct {
	slot uint64
	b    block
}

// maxLoad bounds the share of entries in use, as num/den: as full as Go's
// maps get, so that a stripe's map takes about the memory a Go map did
// (at 3/4, 100,000 keys one per block took 54 bytes a key instead of 39,
// 66 under the race detector). A probe for a present slot reads about 4.5
// entries at the worst load, 1.5 at the mean; sparse pushes and pulls
// measured the same at 3/4 and 7/8.
const maxLoadNum, maxLoadDen = 7, 8

// home is slot's first entry: Fibonacci hashing, as a stripe's slots share
// their bits 4 to 11 (slot/groupSlots%stripes is the stripe).
func (m *slotMap) home(slot uint64) int { return int((slot * 0x9e3779b97f4a7c15) >> m.shift) }

// get returns slot's block, with no bits if it has none.
func (m *slotMap) get(slot uint64) block {
	if m.n == 0 {
		return block{}
	}
	mask := len(m.ents) - 1
	for i := m.home(slot); ; i = (i + 1) & mask {
		if e := &m.ents[i]; e.slot == slot || e.b.bits == 0 {
			return e.b
		}
	}
}

// find is get that also returns the index of slot's entry, or -1 if it
// has none, for setAt.
func (m *slotMap) find(slot uint64) (block, int32) {
	if m.n == 0 {
		return block{}, -1
	}
	mask := len(m.ents) - 1
	for i := m.home(slot); ; i = (i + 1) & mask {
		if e := &m.ents[i]; e.slot == slot || e.b.bits == 0 {
			if e.b.bits == 0 {
				return block{}, -1
			}
			return e.b, int32(i)
		}
	}
}

// setAt is set for a slot that find said was at entry i, where it still is
// unless the map has grown since: then (or for i < 0) it probes again. A
// batch of inserts writes each block back where its lookup found it,
// instead of probing for it a second time.
func (m *slotMap) setAt(i int32, slot uint64, b block) {
	if i >= 0 && int(i) < len(m.ents) {
		if e := &m.ents[i]; e.slot == slot && e.b.bits != 0 {
			e.b = b
			return
		}
	}
	m.set(slot, b)
}

// set stores b, which holds at least one key, as slot's block.
func (m *slotMap) set(slot uint64, b block) {
	if m.n == 0 && m.ents == nil {
		m.resize(8)
	}
	for {
		mask := len(m.ents) - 1
		i := m.home(slot)
		for ; m.ents[i].b.bits != 0; i = (i + 1) & mask {
			if m.ents[i].slot == slot {
				m.ents[i].b = b
				return
			}
		}
		if (m.n+1)*maxLoadDen > len(m.ents)*maxLoadNum {
			m.resize(2 * len(m.ents))
			continue
		}
		m.ents[i] = slotEnt{slot, b}
		m.n++
		return
	}
}

// del removes slot's block, if any. The entries after it in its run move
// back where their probes would look for them first, so no tombstones
// lengthen later probes.
func (m *slotMap) del(slot uint64) {
	if m.n == 0 {
		return
	}
	mask := len(m.ents) - 1
	i := m.home(slot)
	for ; m.ents[i].slot != slot; i = (i + 1) & mask {
		if m.ents[i].b.bits == 0 {
			return
		}
	}
	if m.ents[i].b.bits == 0 {
		return
	}
	for j := (i + 1) & mask; m.ents[j].b.bits != 0; j = (j + 1) & mask {
		// The entry at j may fill the hole at i unless its home lies
		// cyclically in (i, j].
		h := m.home(m.ents[j].slot)
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			m.ents[i] = m.ents[j]
			i = j
		}
	}
	m.ents[i] = slotEnt{}
	m.n--
}

func (m *slotMap) resize(n int) {
	old := m.ents
	m.ents = make([]slotEnt, n)
	m.shift = uint8(64 - bits.TrailingZeros(uint(n))) // n is a power of two
	mask := n - 1
	for _, e := range old {
		if e.b.bits == 0 {
			continue
		}
		i := m.home(e.slot)
		for m.ents[i].b.bits != 0 {
			i = (i + 1) & mask
		}
		m.ents[i] = e
	}
}

// len returns how many slots hold blocks.
func (m *slotMap) len() int { return m.n }

// all yields every slot and its block, in no particular order; the map
// must not change meanwhile.
func (m *slotMap) all() iter.Seq2[uint64, block] {
	return func(yield func(uint64, block) bool) {
		for _, e := range m.ents {
			if e.b.bits != 0 && !yield(e.slot, e.b) {
				return
			}
		}
	}
}

// bytes returns the heap of m: its entries and header.
func (m *slotMap) bytes() int64 {
	return int64(unsafe.Sizeof(*m)) + int64(len(m.ents))*int64(unsafe.Sizeof(slotEnt{}))
}
