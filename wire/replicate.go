package wire

import (
	"encoding/binary"
	"fmt"
)

// Pair is one applied push, its client, sequence number and table, with
// the slots for which the message's receiver holds its effect: Slots is a
// set of slots as sorted, disjoint, non-adjacent half-open runs, flattened
// ([lo0, hi0, lo1, hi1, ...]; keyspace.SlotSet).
type Pair struct {
	Client, Seq uint64
	// Acked is the client's watermark as the head knows it: replicas, which
	// may never see the client's own messages, forget pairs below it.
	Acked uint64
	Table uint32
	Slots []uint64
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
	// More says that the next message on the connection continues this
	// one: the receiver applies none of them until the last.
	More bool
}

const (
	stateHeader     = 24
	replicateHeader = 16
)

// Parts returns the message's payload parts without copying keys or state.
func (m *Replicate) Parts() [][]byte {
	head := make([]byte, replicateHeader, replicateHeader+24*len(m.Pairs))
	binary.LittleEndian.PutUint32(head[0:], uint32(len(m.States)))
	binary.LittleEndian.PutUint32(head[4:], uint32(len(m.Pairs)))
	for _, p := range m.Pairs {
		head = binary.AppendUvarint(head, p.Client)
		head = binary.AppendUvarint(head, p.Seq)
		head = binary.AppendUvarint(head, p.Acked)
		head = binary.AppendUvarint(head, uint64(p.Table))
		head = binary.AppendUvarint(head, uint64(len(p.Slots)/2))
		prev := uint64(0)
		for i := 0; i+1 < len(p.Slots); i += 2 {
			head = binary.AppendUvarint(head, p.Slots[i]-prev)
			head = binary.AppendUvarint(head, p.Slots[i+1]-p.Slots[i])
			prev = p.Slots[i+1]
		}
	}
	binary.LittleEndian.PutUint32(head[8:], uint32(len(head)-replicateHeader))
	if m.More {
		binary.LittleEndian.PutUint32(head[12:], 1)
	}
	var pad [8]byte
	if n := len(head) % 8; n != 0 {
		head = append(head, pad[:8-n]...)
	}
	parts := [][]byte{head}
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
	if len(p) < replicateHeader {
		return Replicate{}, fmt.Errorf("%w: replicate of %d bytes", ErrTruncated, len(p))
	}
	if !aligned(p, 8) {
		return Replicate{}, fmt.Errorf("wire: unaligned payload buffer")
	}
	ns, np := int(binary.LittleEndian.Uint32(p)), int(binary.LittleEndian.Uint32(p[4:]))
	pl := uint64(binary.LittleEndian.Uint32(p[8:]))
	flags := binary.LittleEndian.Uint32(p[12:])
	if flags > 1 {
		return Replicate{}, fmt.Errorf("%w: replicate flags %#x", ErrCorrupt, flags)
	}
	rest := p[replicateHeader:]
	if padded := (pl + 7) / 8 * 8; padded > uint64(len(rest)) {
		return Replicate{}, fmt.Errorf("%w: %d bytes of pairs in %d", ErrTruncated, pl, len(rest))
	}
	pairs, err := parsePairs(rest[:pl], np)
	if err != nil {
		return Replicate{}, err
	}
	m := Replicate{Pairs: pairs, More: flags == 1}
	rest = rest[(pl+7)/8*8:]
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

// parsePairs decodes np pairs that must fill b exactly.
func parsePairs(b []byte, np int) ([]Pair, error) {
	if np > len(b)/5 {
		return nil, fmt.Errorf("%w: %d pairs in %d bytes", ErrTruncated, np, len(b))
	}
	next := func() (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, fmt.Errorf("%w: pair list", ErrTruncated)
		}
		b = b[n:]
		return v, nil
	}
	pairs := make([]Pair, np)
	for i := range pairs {
		var vals [5]uint64
		for j := range vals {
			v, err := next()
			if err != nil {
				return nil, err
			}
			vals[j] = v
		}
		if vals[3] > 1<<32-1 {
			return nil, fmt.Errorf("%w: pair %d: table %d", ErrCorrupt, i, vals[3])
		}
		runs := vals[4]
		if runs > uint64(len(b))/2 {
			return nil, fmt.Errorf("%w: pair %d: %d slot runs in %d bytes", ErrTruncated, i, runs, len(b))
		}
		p := Pair{Client: vals[0], Seq: vals[1], Acked: vals[2], Table: uint32(vals[3]), Slots: make([]uint64, 0, 2*runs)}
		prev := uint64(0)
		for r := range runs {
			gap, err := next()
			if err != nil {
				return nil, err
			}
			n, err := next()
			if err != nil {
				return nil, err
			}
			lo := prev + gap
			if (r > 0 && gap == 0) || n == 0 || lo < prev || lo+n < lo {
				return nil, fmt.Errorf("%w: pair %d: slot run %d is empty, overlapping or overflowing", ErrCorrupt, i, r)
			}
			p.Slots = append(p.Slots, lo, lo+n)
			prev = lo + n
		}
		pairs[i] = p
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the pair list", ErrCorrupt, len(b))
	}
	return pairs, nil
}
