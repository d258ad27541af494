package store

import (
	"math/bits"
	"unsafe"
)

// The misses of a batch's lookups and of its blocks are put in flight
// together before any piece's work begins: each piece's slot-map entry, and
// after the lookups each block's wanted value and both ends of its value
// plane, so that a batch waits for memory about once instead of once per
// piece. They are prefetches, not loads: a load holds its place in the
// processor's reorder buffer until its line arrives, so with plain loads
// the buffer filled while only part of a batch's misses were in flight,
// and pushes took a fifth to a quarter more processor time
// (docs/design/dataplane.md, "Prefetches, not loads").

// touch prefetches each block's wanted value and, if the piece creates
// keys (only if create: a pull creates none), both ends of its value plane,
// which insert moves next. Every block with keys has room for at least
// count()*width floats, so the addresses stay in its buffer. addrs is room
// for three addresses a block.
func touch(blocks []block, batch []piece, width int, create bool, addrs []unsafe.Pointer) {
	n := 0
	for j, b := range blocks {
		if b.p == nil {
			continue
		}
		c := b.count()
		want := batch[j].want
		r := min(b.rank(uint(bits.TrailingZeros64(want))), c-1)
		first := unsafe.Pointer(b.p)
		addrs[n] = unsafe.Add(first, 4*r*width)
		n++
		if create && b.bits&want != want {
			// An insert moves the whole value plane.
			addrs[n] = first
			addrs[n+1] = unsafe.Add(first, 4*(c*width-1))
			n += 2
		}
	}
	prefetch(addrs[:n])
}

// touch prefetches the entry (both lines, when its 24 bytes straddle two)
// that each piece's probe will read first; addrs is room for two
// addresses a piece.
func (m *slotMap) touch(batch []piece, addrs []unsafe.Pointer) {
	if m.n == 0 {
		return
	}
	n := 0
	for _, p := range batch {
		e := &m.ents[m.home(p.slot)]
		addrs[n] = unsafe.Pointer(e)
		n++
		if uintptr(addrs[n-1])%64 > 64-unsafe.Sizeof(*e) {
			addrs[n] = unsafe.Pointer(&e.b.p)
			n++
		}
	}
	prefetch(addrs[:n])
}
