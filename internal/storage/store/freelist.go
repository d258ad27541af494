package store

import "unsafe"

// A stripe keeps a few buffers per capacity step that blocks grew out of,
// and hands them to the next blocks that grow into that step, so that a
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

// sparesPerStep is how many buffers of one step a stripe keeps.
const sparesPerStep = 4

// spares holds at most sparesPerStep buffers per capacity step, each of
// that step's capacity times the table's stride. A stripe allocates it
// with its first spare, so that tables that never grow a block (dense
// ones) do not pay for it.
type spares struct {
	p     [capSteps][sparesPerStep]*float32
	n     [capSteps]uint8
	bytes int64
}

// newBuf returns a buffer for capacity c (keys) of a table with the given
// stride, and whether make has zeroed it (a spare holds stale floats). The
// caller holds s.mu for writing.
func (s *stripe) newBuf(c, stride int) (*float32, bool) {
	if sp, k := s.spare, capStep[c]; sp != nil && k >= 0 && sp.n[k] > 0 {
		sp.n[k]--
		p := sp.p[k][sp.n[k]]
		sp.p[k][sp.n[k]] = nil
		sp.bytes -= allocBytes(c * stride)
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
	if s.spare == nil {
		s.spare = new(spares)
	}
	sp := s.spare
	if k := capStep[c]; k >= 0 && sp.n[k] < sparesPerStep && (sp.bytes+n)*spareShare <= s.bytes {
		sp.p[k][sp.n[k]] = p
		sp.n[k]++
		sp.bytes += n
		return
	}
	s.bytes -= n
}

// dropSpares lets the allocator have the stripe's spares back.
func (s *stripe) dropSpares() {
	if s.spare != nil {
		s.bytes -= s.spare.bytes
		s.spare = nil
	}
}

// bufOf returns the floats of buffer p of capacity c for stride.
func bufOf(p *float32, c, stride int) []float32 { return unsafe.Slice(p, c*stride) }
