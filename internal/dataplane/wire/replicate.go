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

// Replace names slots of a table whose state and pairs a replication
// message replaces wholesale: the receiver forgets its keys and pairs there
// before it installs the message's states and pairs (a full copy of the
// slots). Slots is a flattened run list, as in Pair.
type Replace struct {
	Table uint32
	Slots []uint64
}

// Deferred is a BSP push that its head holds until its clock completes:
// the receiver holds it too, so that if the head fails first, the push
// (already acknowledged) is applied by the next head. Pair.Slots is unused.
type Deferred struct {
	Pair   Pair
	Clock  int64
	Worker uint32
	// Keys and Vals (len(Keys) × width) are the push's keys in the
	// receiver's slots and their update.
	Keys []uint64
	Vals []float32
}

// Replicate is the body of a replication message: the pushes it reflects,
// and the state they produced.
type Replicate struct {
	Pairs    []Pair
	Replace  []Replace
	States   []State
	Deferred []Deferred
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
	head := m.appendHeader(make([]byte, replicateHeader, replicateHeader+24*len(m.Pairs)))
	parts := [][]byte{head}
	states := m.States
	for _, d := range m.Deferred {
		width := 0
		if len(d.Keys) > 0 {
			width = len(d.Vals) / len(d.Keys)
		}
		states = append(states[:len(states):len(states)], State{Table: d.Pair.Table, Stride: uint32(width), Keys: d.Keys, Floats: d.Vals})
	}
	for i := range states {
		parts = states[i].appendParts(parts)
	}
	return parts
}

// pad8 is the zero padding that aligns each part to 8 bytes.
var pad8 [8]byte

// appendHeader encodes the fixed header and the pair list (pairs, replaced
// slot sets, deferred pushes' headers), padded to 8 bytes.
func (m *Replicate) appendHeader(head []byte) []byte {
	binary.LittleEndian.PutUint32(head[0:], uint32(len(m.States)))
	binary.LittleEndian.PutUint32(head[4:], uint32(len(m.Pairs)))
	for _, p := range m.Pairs {
		head = binary.AppendUvarint(head, p.Client)
		head = binary.AppendUvarint(head, p.Seq)
		head = binary.AppendUvarint(head, p.Acked)
		head = appendSlots(head, p.Table, p.Slots)
	}
	for _, r := range m.Replace {
		head = appendSlots(head, r.Table, r.Slots)
	}
	for _, d := range m.Deferred {
		head = binary.AppendUvarint(head, d.Pair.Client)
		head = binary.AppendUvarint(head, d.Pair.Seq)
		head = binary.AppendUvarint(head, d.Pair.Acked)
		head = binary.AppendUvarint(head, uint64(d.Clock))
		head = binary.AppendUvarint(head, uint64(d.Worker))
	}
	binary.LittleEndian.PutUint32(head[8:], uint32(len(head)-replicateHeader))
	flags := uint32(len(m.Replace))<<16 | uint32(len(m.Deferred))<<1
	if m.More {
		flags |= 1
	}
	binary.LittleEndian.PutUint32(head[12:], flags)
	if n := len(head) % 8; n != 0 {
		head = append(head, pad8[:8-n]...)
	}
	return head
}

// appendParts appends s's header, keys (if listed) and padded floats.
func (s *State) appendParts(parts [][]byte) [][]byte {
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
		parts = append(parts, pad8[:8-n])
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
	nr, nd := int(flags>>16), int(flags&0xfffe>>1)
	rest := p[replicateHeader:]
	if padded := (pl + 7) / 8 * 8; padded > uint64(len(rest)) {
		return Replicate{}, fmt.Errorf("%w: %d bytes of pairs in %d", ErrTruncated, pl, len(rest))
	}
	pairs, replace, deferred, err := parsePairs(rest[:pl], np, nr, nd)
	if err != nil {
		return Replicate{}, err
	}
	m := Replicate{Pairs: pairs, Replace: replace, More: flags&1 == 1}
	rest = rest[(pl+7)/8*8:]
	if ns+nd > len(rest)/stateHeader {
		return Replicate{}, fmt.Errorf("%w: %d states in %d bytes", ErrTruncated, ns+nd, len(rest))
	}
	all := make([]State, ns+nd)
	for i := range all {
		if all[i], rest, err = parseState(rest, i); err != nil {
			return Replicate{}, err
		}
	}
	if len(rest) != 0 {
		return Replicate{}, fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(rest))
	}
	m.States = all[:ns]
	for i, d := range deferred {
		st := all[ns+i]
		if st.Keys == nil {
			return Replicate{}, fmt.Errorf("%w: deferred push %d without a key list", ErrCorrupt, i)
		}
		d.Pair.Table, d.Keys, d.Vals = st.Table, st.Keys, st.Floats
		m.Deferred = append(m.Deferred, d)
	}
	return m, nil
}

// parseState decodes the i-th state at the start of b and returns the rest.
func parseState(b []byte, i int) (State, []byte, error) {
	if len(b) < stateHeader {
		return State{}, nil, fmt.Errorf("%w: state %d header", ErrTruncated, i)
	}
	s := State{
		Table:  binary.LittleEndian.Uint32(b[0:]),
		Stride: binary.LittleEndian.Uint32(b[4:]),
		Lo:     binary.LittleEndian.Uint64(b[16:]),
	}
	n, kind := uint64(binary.LittleEndian.Uint32(b[8:])), binary.LittleEndian.Uint32(b[12:])
	b = b[stateHeader:]
	if s.Stride == 0 || s.Stride > 1<<20 || kind > 1 {
		return State{}, nil, fmt.Errorf("%w: state %d: stride %d kind %d", ErrCorrupt, i, s.Stride, kind)
	}
	if kind == 0 {
		if n*8 > uint64(len(b)) {
			return State{}, nil, fmt.Errorf("%w: state %d keys", ErrTruncated, i)
		}
		s.Keys = BytesU64(b[:n*8])
		if s.Keys == nil {
			s.Keys = []uint64{}
		}
		b = b[n*8:]
	} else {
		s.N = uint32(n)
	}
	size := n * uint64(s.Stride) * 4
	if padded := (size + 7) / 8 * 8; padded > uint64(len(b)) {
		return State{}, nil, fmt.Errorf("%w: state %d values", ErrTruncated, i)
	}
	s.Floats = BytesF32(b[:size])
	return s, b[(size+7)/8*8:], nil
}

// appendSlots encodes a table and a slot run list: the table, the number
// of runs, and each run as its gap from the previous run's end and its length.
func appendSlots(b []byte, table uint32, slots []uint64) []byte {
	b = binary.AppendUvarint(b, uint64(table))
	b = binary.AppendUvarint(b, uint64(len(slots)/2))
	prev := uint64(0)
	for i := 0; i+1 < len(slots); i += 2 {
		b = binary.AppendUvarint(b, slots[i]-prev)
		b = binary.AppendUvarint(b, slots[i+1]-slots[i])
		prev = slots[i+1]
	}
	return b
}

// uvarints reads a pair list's uvarints from b, front to back.
type uvarints struct{ b []byte }

func (u *uvarints) next() (uint64, error) {
	v, n := binary.Uvarint(u.b)
	if n <= 0 {
		return 0, fmt.Errorf("%w: pair list", ErrTruncated)
	}
	u.b = u.b[n:]
	return v, nil
}

// fill reads len(vals) uvarints.
func (u *uvarints) fill(vals []uint64) error {
	for j := range vals {
		v, err := u.next()
		if err != nil {
			return err
		}
		vals[j] = v
	}
	return nil
}

// slots reads what appendSlots wrote, checking that the runs are sorted,
// disjoint, non-adjacent and non-empty; what names the set in errors.
func (u *uvarints) slots(what string) (uint32, []uint64, error) {
	var head [2]uint64
	if err := u.fill(head[:]); err != nil {
		return 0, nil, err
	}
	table, runs := head[0], head[1]
	if table > 1<<32-1 {
		return 0, nil, fmt.Errorf("%w: %s: table %d", ErrCorrupt, what, table)
	}
	if runs > uint64(len(u.b))/2 {
		return 0, nil, fmt.Errorf("%w: %s: %d slot runs in %d bytes", ErrTruncated, what, runs, len(u.b))
	}
	out := make([]uint64, 0, 2*runs)
	prev := uint64(0)
	for r := range runs {
		var run [2]uint64
		if err := u.fill(run[:]); err != nil {
			return 0, nil, err
		}
		gap, n := run[0], run[1]
		lo := prev + gap
		if (r > 0 && gap == 0) || n == 0 || lo < prev || lo+n < lo {
			return 0, nil, fmt.Errorf("%w: %s: slot run %d is empty, overlapping or overflowing", ErrCorrupt, what, r)
		}
		out = append(out, lo, lo+n)
		prev = lo + n
	}
	return uint32(table), out, nil
}

// parsePairs decodes np pairs, nr replaced slot sets and nd deferred
// pushes' headers, which must fill b exactly.
func parsePairs(b []byte, np, nr, nd int) ([]Pair, []Replace, []Deferred, error) {
	if 5*uint64(np)+2*uint64(nr)+5*uint64(nd) > uint64(len(b)) {
		return nil, nil, nil, fmt.Errorf("%w: %d pairs, %d slot sets and %d deferred pushes in %d bytes", ErrTruncated, np, nr, nd, len(b))
	}
	u := &uvarints{b}
	pairs := make([]Pair, np)
	for i := range pairs {
		var vals [3]uint64
		if err := u.fill(vals[:]); err != nil {
			return nil, nil, nil, err
		}
		table, sl, err := u.slots(fmt.Sprintf("pair %d", i))
		if err != nil {
			return nil, nil, nil, err
		}
		pairs[i] = Pair{Client: vals[0], Seq: vals[1], Acked: vals[2], Table: table, Slots: sl}
	}
	var replace []Replace
	for i := range nr {
		table, sl, err := u.slots(fmt.Sprintf("replaced slot set %d", i))
		if err != nil {
			return nil, nil, nil, err
		}
		replace = append(replace, Replace{Table: table, Slots: sl})
	}
	var deferred []Deferred
	for range nd {
		var vals [5]uint64
		if err := u.fill(vals[:]); err != nil {
			return nil, nil, nil, err
		}
		if vals[3] > 1<<63-1 || vals[4] > 1<<32-1 {
			return nil, nil, nil, fmt.Errorf("%w: deferred push clock %d worker %d", ErrCorrupt, vals[3], vals[4])
		}
		deferred = append(deferred, Deferred{Pair: Pair{Client: vals[0], Seq: vals[1], Acked: vals[2]}, Clock: int64(vals[3]), Worker: uint32(vals[4])})
	}
	if len(u.b) != 0 {
		return nil, nil, nil, fmt.Errorf("%w: %d bytes after the pair list", ErrCorrupt, len(u.b))
	}
	return pairs, replace, deferred, nil
}
