package store

import (
	"math/bits"
	"unsafe"
)

// block holds the present keys of one slot. Its buffer has capKeys[n]*stride
// floats for n present keys: plane p (the value, then each optimizer state
// plane) starts at p*capKeys[n]*width and holds the n keys in key order, so
// a run of consecutive present keys is one contiguous span in every plane.
//
// The buffer is kept as a bare pointer, its length recomputed from the
// bitmap, because blocks live by value in the stripe maps: a slice header
// or a pointer to a separate header would cost 8 to 32 more bytes per block
// in the map plus an allocation, which took dense width-1 storage from 4.9
// to 5.1 bytes per value.
type block struct {
	bits uint64   // bit o is set when key slot*SlotSize+o is present
	p    *float32 // first float of the buffer; nil when bits == 0
}

func (b block) count() int { return bits.OnesCount64(b.bits) }

// rank returns the position among b's present keys of slot offset o.
func (b block) rank(o uint) int { return bits.OnesCount64(b.bits & below(o)) }

// buf returns b's buffer for a table with the given stride.
func (b block) buf(stride int) []float32 {
	if b.p == nil {
		return nil
	}
	return unsafe.Slice(b.p, int(capKeys[b.count()])*stride)
}

// below returns the offsets [0,o); o may be 64.
func below(o uint) uint64 { return 1<<o - 1 }

// span returns the offsets [lo,hi); hi may be 64.
func span(lo, hi uint) uint64 { return below(hi) &^ below(lo) }

// capKeys[n] is how many keys a block of n keys has room for; a full block
// is exact. Keys of a sparse table arrive one at a time in random slots,
// and each step is a new buffer and a move, the bulk of creating a key: the
// steps are 1.5x to 2x apart, so filling a block one key at a time
// allocates 10 times, not 64. With steps at most 25% apart (18 of them)
// pushes of fresh random keys took about 10% more processor time, and the
// memory they saved was mostly lost to the allocator's size classes
// anyway: 7.2 against 7.5 bytes per key for 2.2 million random keys of 10
// million (width 1).
var capKeys = func() (c [65]uint8) {
	steps := []uint8{1, 2, 4, 8, 12, 16, 24, 32, 48, 64}
	for n := 1; n <= 64; n++ {
		i := 0
		for int(steps[i]) < n {
			i++
		}
		c[n] = steps[i]
	}
	return c
}()

// move copies the planes of the keys present in both from and to out of
// src (laid out for from) into dst (laid out for to). In place (dst and src
// the same buffer) it must only add keys or only remove them.
//
// Between two offsets whose presence changes, both bitmaps hold the same
// keys, so each such segment moves as one span. Growing in place moves
// keys up, so the segments go from the highest down; otherwise from the
// lowest up. (A list of the segments cost more than the moves: zeroing
// its array was a sixth of a sparse insert's move.)
func move(dst, src []float32, width, planes int, from, to uint64) {
	srcCap, dstCap := int(capKeys[bits.OnesCount64(from)]), int(capKeys[bits.OnesCount64(to)])
	seg := func(lo, hi uint) {
		n := bits.OnesCount64(from & span(lo, hi))
		if n == 0 {
			return
		}
		si, di := bits.OnesCount64(from&below(lo))*width, bits.OnesCount64(to&below(lo))*width
		for p := range planes {
			s, d := p*srcCap*width+si, p*dstCap*width+di
			copy(dst[d:d+n*width], src[s:s+n*width])
		}
	}
	changed := from ^ to
	if bits.OnesCount64(to) > bits.OnesCount64(from) {
		hi := uint(64)
		for changed != 0 {
			c := uint(63 - bits.LeadingZeros64(changed))
			changed &^= 1 << c
			seg(c+1, hi)
			hi = c
		}
		seg(0, hi)
		return
	}
	lo := uint(0)
	for changed != 0 {
		c := uint(bits.TrailingZeros64(changed))
		changed &= changed - 1
		seg(lo, c)
		lo = c + 1
	}
	seg(lo, 64)
}
