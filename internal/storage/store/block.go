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

// capKeys[n] is how many keys a block of n keys has room for. The steps are
// at most 25% apart so a partial block wastes little, while filling a block
// one key at a time allocates 18 times, not 64; a full block is exact.
var capKeys = func() (c [65]uint8) {
	steps := []uint8{1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64}
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
func move(dst, src []float32, width, planes int, from, to uint64) {
	srcCap, dstCap := int(capKeys[bits.OnesCount64(from)]), int(capKeys[bits.OnesCount64(to)])
	// Between two offsets whose presence changes, both bitmaps hold the
	// same keys, so each such segment moves as one span.
	type seg struct{ src, dst, n int }
	var segs [65]seg
	ns := 0
	changed := from ^ to
	lo := uint(0)
	for {
		hi := uint(64)
		if changed != 0 {
			hi = uint(bits.TrailingZeros64(changed))
			changed &= changed - 1
		}
		m := span(lo, hi)
		if n := bits.OnesCount64(from & m); n > 0 {
			segs[ns] = seg{bits.OnesCount64(from & below(lo)), bits.OnesCount64(to & below(lo)), n}
			ns++
		}
		if hi == 64 {
			break
		}
		lo = hi + 1
	}
	// Growing in place moves keys up, so the highest segment goes first;
	// shrinking moves them down, so the lowest goes first.
	grow := bits.OnesCount64(to) > bits.OnesCount64(from)
	for p := range planes {
		sp, dp := src[p*srcCap*width:], dst[p*dstCap*width:]
		for i := range ns {
			s := segs[i]
			if grow {
				s = segs[ns-1-i]
			}
			copy(dp[s.dst*width:(s.dst+s.n)*width], sp[s.src*width:(s.src+s.n)*width])
		}
	}
}
