package store

import (
	"math/bits"
	"unsafe"
)

// Stats is what a table holds.
type Stats struct {
	Keys   int64 // stored keys
	Values int64 // stored float32 values: Keys * width
	// Bytes estimates the heap the table uses: block buffers (rounded up as
	// the allocator does), stripe maps and the table itself.
	Bytes int64
}

// BytesPerValue returns Bytes/Values, or 0 for an empty table.
func (s Stats) BytesPerValue() float64 {
	if s.Values == 0 {
		return 0
	}
	return float64(s.Bytes) / float64(s.Values)
}

// Stats reports what t holds. Stripes are read one after another, so under
// concurrent writes the figures are not one instant's.
func (t *Table) Stats() Stats {
	st := Stats{Bytes: int64(unsafe.Sizeof(*t))}
	for i := range t.st {
		s := &t.st[i]
		s.mu.RLock()
		st.Keys += s.keys
		st.Bytes += s.bytes + s.blocks.bytes() + s.dense.bytes()
		s.mu.RUnlock()
	}
	st.Values = st.Keys * int64(t.width)
	return st
}

// allocBytes approximates the size class the allocator rounds a []float32
// of n floats up to: classes are about 1/8 apart below 32 KiB, and larger
// objects take whole 8 KiB pages.
func allocBytes(n int) int64 {
	b := int64(n) * 4
	if b > 32<<10 {
		return (b + 8<<10 - 1) &^ (8<<10 - 1)
	}
	step := int64(1) << max(3, bits.Len64(uint64(b-1))-4) // an eighth of the power of two below b, at least 8
	return (b + step - 1) &^ (step - 1)
}

// bytes approximates the heap bytes of x and its groups' headers.
func (x *groupIndex) bytes() int64 {
	return int64(cap(x.near))*8 + int64(len(x.far))*16 + int64(x.n)*int64(unsafe.Sizeof(denseGroup{}))
}
