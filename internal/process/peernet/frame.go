package peernet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/terrace-ml/terrace/internal/crc32c"
	"math"

	"github.com/terrace-ml/terrace/ps"
)

// The frame format (docs/design/stragglers.md): a 4-byte little-endian
// length of the body, then the body:
//
//	version u8 (1) | kind u8 | from u32 | to u32
//	[kindProgress: pass, partition, start, offset, end int64 | rate float64]
//	[kindCut:      pass, partition, from int64]
//	crc32c u32 of the body before it
//
// Fixed widths keep the decoder a handful of bounds checks; a frame is
// at most MaxFrame bytes.
const (
	version = 1

	kindProgress = 1 << 0
	kindCut      = 1 << 1
	kindIdle     = 1 << 2 // with kindProgress: PeerProgress.Idle
	kindsKnown   = kindProgress | kindCut | kindIdle

	headerLen   = 1 + 1 + 4 + 4
	progressLen = 6 * 8
	cutLen      = 3 * 8
	crcLen      = 4
	lengthLen   = 4

	// MaxFrame is the longest body a valid frame has.
	MaxFrame = headerLen + progressLen + cutLen + crcLen
)

// Errors of Decode; both wrap ErrBadFrame.
var (
	// ErrBadFrame is a frame that is not a peer message.
	ErrBadFrame = errors.New("peernet: bad frame")
	// ErrTooLarge is a length prefix beyond MaxFrame.
	ErrTooLarge = fmt.Errorf("%w: too large", ErrBadFrame)
)

// Frame is one message on the wire: m from rank From (m.From) to rank To.
type Frame struct {
	To int
	M  ps.PeerMessage
}

// Append appends f's frame, length prefix included, to b. It fails on a
// message with neither progress nor a cut, or a rank out of range.
func Append(b []byte, f Frame) ([]byte, error) {
	m := f.M
	if m.Progress == nil && m.Cut == nil {
		return b, fmt.Errorf("%w: a message with neither progress nor a cut", ErrBadFrame)
	}
	if !rank(m.From) || !rank(f.To) {
		return b, fmt.Errorf("%w: ranks %d to %d", ErrBadFrame, m.From, f.To)
	}
	n := headerLen + crcLen
	var kind byte
	if p := m.Progress; p != nil {
		n += progressLen
		kind |= kindProgress
		if p.Idle {
			kind |= kindIdle
		}
	}
	if m.Cut != nil {
		n += cutLen
		kind |= kindCut
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	start := len(b)
	b = append(b, version, kind)
	b = binary.LittleEndian.AppendUint32(b, uint32(m.From))
	b = binary.LittleEndian.AppendUint32(b, uint32(f.To))
	if p := m.Progress; p != nil {
		for _, v := range []int{p.Pass, p.Partition, p.Start, p.Offset, p.End} {
			b = binary.LittleEndian.AppendUint64(b, uint64(int64(v)))
		}
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p.Rate))
	}
	if k := m.Cut; k != nil {
		for _, v := range []int{k.Pass, k.Partition, k.From} {
			b = binary.LittleEndian.AppendUint64(b, uint64(int64(v)))
		}
	}
	return binary.LittleEndian.AppendUint32(b, crc32c.Checksum(b[start:])), nil
}

// Length reads a frame's length prefix, refusing one no valid frame has.
func Length(prefix [lengthLen]byte) (int, error) {
	n := binary.LittleEndian.Uint32(prefix[:])
	switch {
	case n > MaxFrame:
		return 0, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, n, MaxFrame)
	case n < headerLen+crcLen:
		return 0, fmt.Errorf("%w: %d bytes, at least %d", ErrBadFrame, n, headerLen+crcLen)
	}
	return int(n), nil
}

// Decode decodes a frame's body (what follows its length prefix). It
// refuses, with an error wrapping ErrBadFrame that says why, anything
// Append would not have written.
func Decode(body []byte) (Frame, error) {
	if len(body) > MaxFrame {
		return Frame{}, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(body), MaxFrame)
	}
	if len(body) < headerLen+crcLen {
		return Frame{}, fmt.Errorf("%w: %d bytes, at least %d", ErrBadFrame, len(body), headerLen+crcLen)
	}
	payload, sum := body[:len(body)-crcLen], binary.LittleEndian.Uint32(body[len(body)-crcLen:])
	if got := crc32c.Checksum(payload); got != sum {
		return Frame{}, fmt.Errorf("%w: checksum %08x, computed %08x", ErrBadFrame, sum, got)
	}
	if payload[0] != version {
		return Frame{}, fmt.Errorf("%w: version %d, want %d", ErrBadFrame, payload[0], version)
	}
	kind := payload[1]
	want := headerLen
	if kind&kindProgress != 0 {
		want += progressLen
	}
	if kind&kindCut != 0 {
		want += cutLen
	}
	switch {
	case kind&^kindsKnown != 0, kind&(kindProgress|kindCut) == 0, kind&kindIdle != 0 && kind&kindProgress == 0:
		return Frame{}, fmt.Errorf("%w: kind %#x", ErrBadFrame, kind)
	case len(payload) != want:
		return Frame{}, fmt.Errorf("%w: kind %#x in %d bytes, want %d", ErrBadFrame, kind, len(body), want+crcLen)
	}
	from, to := int(int32(binary.LittleEndian.Uint32(payload[2:]))), int(int32(binary.LittleEndian.Uint32(payload[6:])))
	if !rank(from) || !rank(to) {
		return Frame{}, fmt.Errorf("%w: ranks %d to %d", ErrBadFrame, from, to)
	}
	f := Frame{To: to, M: ps.PeerMessage{From: from}}
	rest := payload[headerLen:]
	next := func() int64 {
		v := int64(binary.LittleEndian.Uint64(rest))
		rest = rest[8:]
		return v
	}
	if kind&kindProgress != 0 {
		var v [5]int64
		for i := range v {
			v[i] = next()
		}
		rate := math.Float64frombits(uint64(next()))
		// Pass and Partition are -1 while the worker holds nothing.
		if !row(v[0], -1) || !row(v[1], -1) || !row(v[2], 0) || !row(v[3], 0) || !row(v[4], 0) {
			return Frame{}, fmt.Errorf("%w: progress %v out of range", ErrBadFrame, v)
		}
		if math.IsNaN(rate) || math.IsInf(rate, 0) || rate < 0 {
			return Frame{}, fmt.Errorf("%w: rate %v", ErrBadFrame, rate)
		}
		f.M.Progress = &ps.PeerProgress{Pass: int(v[0]), Partition: int(v[1]), Start: int(v[2]), Offset: int(v[3]), End: int(v[4]),
			Rate: rate, Idle: kind&kindIdle != 0}
	}
	if kind&kindCut != 0 {
		pass, part, from := next(), next(), next()
		if !row(pass, 0) || !row(part, 0) || !row(from, 0) {
			return Frame{}, fmt.Errorf("%w: cut (%d, %d, %d) out of range", ErrBadFrame, pass, part, from)
		}
		f.M.Cut = &ps.PeerCut{Pass: int(pass), Partition: int(part), From: int(from)}
	}
	return f, nil
}

// rank reports whether r can be a worker's rank on the wire.
func rank(r int) bool { return r >= 0 && r <= math.MaxInt32 }

// maxRow bounds the counts a frame carries (passes, partitions, rows): far
// above any data set, and below what an int of 32 bits could not hold.
const maxRow = math.MaxInt32

func row(v, least int64) bool { return v >= least && v <= maxRow }
