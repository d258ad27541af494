package wire

import (
	"encoding/binary"
	"fmt"
)

// Pair is one applied push: its client and sequence number.
type Pair struct {
	Client, Seq uint64
}

// State is the full state (value and optimizer state planes, Stride floats
// per key) of a table's keys: either the sorted Keys, or N keys from Lo.
type State struct {
	Table  uint32
	Stride uint32
	Keys   []uint64
	Lo     uint64
	N      uint32
	Floats []float32
}

// Len is the number of keys s covers.
func (s *State) Len() int {
	if s.Keys != nil {
		return len(s.Keys)
	}
	return int(s.N)
}

// Replicate is the body of a replication message: the pushes it reflects,
// and the state they produced.
type Replicate struct {
	Pairs  []Pair
	States []State
}

const stateHeader = 24

// Parts returns the message's payload parts without copying keys or state.
func (m *Replicate) Parts() [][]byte {
	head := make([]byte, 8, 8+16*len(m.Pairs))
	binary.LittleEndian.PutUint32(head[0:], uint32(len(m.States)))
	binary.LittleEndian.PutUint32(head[4:], uint32(len(m.Pairs)))
	for _, p := range m.Pairs {
		head = binary.LittleEndian.AppendUint64(head, p.Client)
		head = binary.LittleEndian.AppendUint64(head, p.Seq)
	}
	parts := [][]byte{head}
	var pad [8]byte
	for i := range m.States {
		s := &m.States[i]
		h := make([]byte, stateHeader)
		binary.LittleEndian.PutUint32(h[0:], s.Table)
		binary.LittleEndian.PutUint32(h[4:], s.Stride)
		binary.LittleEndian.PutUint32(h[8:], uint32(s.Len()))
		kind := uint32(0)
		if s.Keys == nil {
			kind = 1
		}
		binary.LittleEndian.PutUint32(h[12:], kind)
		binary.LittleEndian.PutUint64(h[16:], s.Lo)
		parts = append(parts, h)
		if s.Keys != nil {
			parts = append(parts, U64Bytes(s.Keys))
		}
		parts = append(parts, F32Bytes(s.Floats))
		if n := len(s.Floats) * 4 % 8; n != 0 {
			parts = append(parts, pad[:8-n])
		}
	}
	return parts
}

// ParseReplicate decodes a replication message; keys and state alias p.
func ParseReplicate(p []byte) (Replicate, error) {
	if len(p) < 8 {
		return Replicate{}, fmt.Errorf("%w: replicate of %d bytes", ErrTruncated, len(p))
	}
	if !aligned(p, 8) {
		return Replicate{}, fmt.Errorf("wire: unaligned payload buffer")
	}
	ns, np := int(binary.LittleEndian.Uint32(p)), int(binary.LittleEndian.Uint32(p[4:]))
	rest := p[8:]
	if np > len(rest)/16 {
		return Replicate{}, fmt.Errorf("%w: %d pairs in %d bytes", ErrTruncated, np, len(rest))
	}
	m := Replicate{Pairs: make([]Pair, np)}
	for i := range m.Pairs {
		m.Pairs[i] = Pair{binary.LittleEndian.Uint64(rest[16*i:]), binary.LittleEndian.Uint64(rest[16*i+8:])}
	}
	rest = rest[16*np:]
	if ns > len(rest)/stateHeader {
		return Replicate{}, fmt.Errorf("%w: %d states in %d bytes", ErrTruncated, ns, len(rest))
	}
	m.States = make([]State, ns)
	for i := range m.States {
		if len(rest) < stateHeader {
			return Replicate{}, fmt.Errorf("%w: state %d header", ErrTruncated, i)
		}
		s := State{
			Table:  binary.LittleEndian.Uint32(rest[0:]),
			Stride: binary.LittleEndian.Uint32(rest[4:]),
			Lo:     binary.LittleEndian.Uint64(rest[16:]),
		}
		n, kind := uint64(binary.LittleEndian.Uint32(rest[8:])), binary.LittleEndian.Uint32(rest[12:])
		rest = rest[stateHeader:]
		if s.Stride == 0 || s.Stride > 1<<20 || kind > 1 {
			return Replicate{}, fmt.Errorf("%w: state %d: stride %d kind %d", ErrCorrupt, i, s.Stride, kind)
		}
		if kind == 0 {
			if n*8 > uint64(len(rest)) {
				return Replicate{}, fmt.Errorf("%w: state %d keys", ErrTruncated, i)
			}
			s.Keys = BytesU64(rest[:n*8])
			if s.Keys == nil {
				s.Keys = []uint64{}
			}
			rest = rest[n*8:]
		} else {
			s.N = uint32(n)
		}
		size := n * uint64(s.Stride) * 4
		if padded := (size + 7) / 8 * 8; padded > uint64(len(rest)) {
			return Replicate{}, fmt.Errorf("%w: state %d values", ErrTruncated, i)
		}
		s.Floats = BytesF32(rest[:size])
		rest = rest[(size+7)/8*8:]
		m.States[i] = s
	}
	if len(rest) != 0 {
		return Replicate{}, fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(rest))
	}
	return m, nil
}
