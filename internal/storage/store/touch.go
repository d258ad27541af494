package store

import (
	"math/bits"
	"unsafe"
)

// touch loads each piece's first wanted value and both ends of its
// block's value plane, so that a batch's cache misses on its values are in
// flight together: the loads are independent, and the processor issues
// them all before the first returns, where the visit that follows would
// take them one after the other, each behind the work on the piece
// before. For a key being created the block's current buffer is what
// insert moves next. It is not inlined, so that the loads, whose result
// nobody uses, stay. Every block with keys has room for at least
// count()*width floats, so the loads stay in its buffer.
//
//go:noinline
func touch(blocks []block, batch []piece, width int) (x uint32) {
	for j, b := range blocks {
		if b.p == nil {
			continue
		}
		// The wanted value, and the ends of the value plane, which an
		// insert moves.
		n := b.count()
		r := min(b.rank(uint(bits.TrailingZeros64(batch[j].want))), n-1)
		x ^= *(*uint32)(unsafe.Add(unsafe.Pointer(b.p), 4*r*width))
		x ^= *(*uint32)(unsafe.Add(unsafe.Pointer(b.p), 4*(n*width-1)))
		x ^= *(*uint32)(unsafe.Pointer(b.p))
	}
	return x
}

// touch loads the first entry each piece's probe will read, so that the
// probes' cache misses are in flight together, where each probe's loop
// would wait for its own before the next began.
//
//go:noinline
func (m *slotMap) touch(batch []piece) (x uint64) {
	if m.n == 0 {
		return 0
	}
	for _, p := range batch {
		x ^= m.ents[m.home(p.slot)].slot
	}
	return x
}
