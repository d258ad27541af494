package store

import "unsafe"

// A stripe keeps one buffer per capacity step that a block grew out of,
// and hands it to the next block that grows into that step, so that a
// fresh key's growth can reuse memory instead of asking the allocator (and
// its zeroing) for a small buffer each time. Only buffers of ordinary
// blocks that an insert has just replaced go in: nothing else refers to
// them (blocks live in the slot map under the stripe's lock, every reader
// copies under that lock, and only dense groups, whose blocks are full and
// never grow, are pinned). A recycled buffer's stale floats are never
// read: a block reads only the ranks of its present keys, and an insert
// writes every plane of each key it adds.
//
// The spares are bounded by a thirty-second of the stripe's buffers, and
// dropped when the stripe compacts a dense group (it is filling up, and
// dense tables must stay under 5 bytes a value).

// spareShare bounds a stripe's spares to 1/spareShare of its bytes.
const spareShare = 32

// capSteps is the number of capacity steps below a full block, capStep[c]
// the step of capacity c (-1 for 0 and 64).
const capSteps = 9

var capStep = func() (s [65]int8) {
	for i := range s {
		s[i] = -1
	}
	k := int8(-1)
	for n := 1; n < 64; n++ {
		if c := capKeys[n]; c < 64 && s[c] < 0 {
			k++
			s[c] = k
		}
	}
	return s
}()

// spares holds at most one buffer per capacity step, each of that step's
// capacity times the table's stride.
type spares struct {
	p     [capSteps]*float32
	bytes int64
}

// newBuf returns a buffer for capacity c (keys) of a table with the given
// stride, and whether make has zeroed it (a spare holds stale floats). The
// caller holds s.mu for writing.
func (s *stripe) newBuf(c, stride int) (*float32, bool) {
	if k := capStep[c]; k >= 0 && s.spare.p[k] != nil {
		p := s.spare.p[k]
		s.spare.p[k] = nil
		s.spare.bytes -= allocBytes(c * stride)
		return p, false
	}
	s.bytes += allocBytes(c * stride)
	buf := make([]float32, c*stride)
	return &buf[0], true
}

// recycle takes p, the buffer of capacity c (keys) that a block just
// left, as its step's spare, or drops it. The caller holds s.mu for
// writing and must not use p again.
func (s *stripe) recycle(p *float32, c, stride int) {
	if p == nil {
		return
	}
	n := allocBytes(c * stride)
	if k := capStep[c]; k >= 0 && s.spare.p[k] == nil && (s.spare.bytes+n)*spareShare <= s.bytes {
		s.spare.p[k] = p
		s.spare.bytes += n
		return
	}
	s.bytes -= n
}

// dropSpares lets the allocator have the stripe's spares back.
func (s *stripe) dropSpares() {
	s.bytes -= s.spare.bytes
	s.spare = spares{}
}

// bufOf returns the floats of buffer p of capacity c for stride.
func bufOf(p *float32, c, stride int) []float32 { return unsafe.Slice(p, c*stride) }
