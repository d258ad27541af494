package lda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/terrace-ml/terrace/internal/crc32c"
	"math/bits"
	"slices"

	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/ps"
)

// ErrCorruptState is wrapped by every error that refuses a partition state
// blob.
var ErrCorruptState = errors.New("lda: corrupt partition state")

// partState is one partition's worker state: the topic of every token of
// its documents. Documents' topic counts are rebuilt from it, and the
// word-topic counts are the table's, so nothing else is needed to resume.
// The state of a piece of a split lease holds the documents of the piece
// only (own); the pieces join into the whole (ps.SplittableState).
type partState struct {
	part data.Part
	ptr  []int // the corpus's DocPtr
	k    int
	// pass is the pass that z reflects up to the lease's offset
	// (all of it once the partition is complete), -1 before the first. A
	// lease checks it, so that a lost state is an error rather than a
	// model whose table no longer matches its topics.
	pass int
	// z holds the topics of the tokens of documents part.Lo..part.Hi-1, in
	// corpus order (not the pass's shuffled order), so that it means the
	// same whatever order the next pass takes.
	z []uint16
	// base is the corpus index of z[0]'s token.
	base int
	// own says which of the partition's documents (by d - part.Lo) the
	// state holds; nil when it holds them all. z is meaningful for those
	// only.
	own []bool
}

// newState is partition p's state before any pass: every token's initial
// topic, drawn per document from the seed (pass 0 pushes their counts).
func newState(train *data.Corpus, p data.Part, k int, seed uint64) *partState {
	base := train.DocPtr[p.Lo]
	s := &partState{part: p, ptr: train.DocPtr, k: k, pass: -1, base: base, z: make([]uint16, train.DocPtr[p.Hi]-base)}
	for d := p.Lo; d < p.Hi; d++ {
		initTopics(s.topics(train, d), k, seed, d)
	}
	return s
}

// topics returns the topics of document d's tokens, aliasing s.z.
func (s *partState) topics(train *data.Corpus, d int) []uint16 {
	return s.z[train.DocPtr[d]-s.base : train.DocPtr[d+1]-s.base]
}

// The state's byte format, version 1 (little-endian):
//
//	magic "LDAz" | version 1 | uvarint topics K | uvarint partition ID |
//	uvarint pass+1 | uvarint tokens N |
//	N topics of b = bits.Len(K-1) bits each (at least 1), packed from the
//	low bit of each byte up, the last byte padded with zeros |
//	CRC-32C (Castagnoli) of everything before it
//
// Version 2 is the state of a piece of a split lease, which holds some of
// the partition's documents only; a state that holds them all is written
// in version 1:
//
//	magic "LDAz" | version 2 | uvarint K | uvarint partition ID |
//	uvarint pass+1 | uvarint documents D | D uvarint gaps, each
//	document's index in the partition less the previous one's less 1 (the
//	first: its index) | uvarint tokens N of those documents |
//	their N topics in corpus order, packed as in version 1 | CRC-32C
//
// At K = 20 a topic takes 5 bits: a KOS partition of 8 (48,560 tokens) is
// 30,365 bytes. zstd (klauspost/compress, default level) of one byte a
// topic measured 48,574 bytes for the random first topics and 24,454 after
// 30 sweeps (27,776 for the packed bytes then): a fifth smaller at best, late
// in training, which pays neither for a dependency nor for a second pass
// over the blob at every Progress.
const (
	stateMagic = "LDAz"
	// stateVersion is the whole partition's format, piecesVersion a
	// piece's.
	stateVersion  = 1
	piecesVersion = 2
)

// topicBits is how many bits a topic takes in the byte format.
func topicBits(k int) int { return max(1, bits.Len(uint(k-1))) }

// MarshalBinary encodes the state in the byte format above.
func (s *partState) MarshalBinary() ([]byte, error) {
	b := topicBits(s.k)
	z, docs := s.z, s.ownedDocs()
	version := byte(stateVersion)
	if docs != nil {
		version, z = piecesVersion, s.topicsOf(docs)
	}
	out := make([]byte, 0, len(stateMagic)+1+4*binary.MaxVarintLen64+(len(z)*b+7)/8+4)
	out = append(out, stateMagic...)
	out = append(out, version)
	out = binary.AppendUvarint(out, uint64(s.k))
	out = binary.AppendUvarint(out, uint64(s.part.ID))
	out = binary.AppendUvarint(out, uint64(s.pass+1))
	if docs != nil {
		out = binary.AppendUvarint(out, uint64(len(docs)))
		prev := -1
		for _, d := range docs {
			out = binary.AppendUvarint(out, uint64(d-prev-1))
			prev = d
		}
	}
	out = binary.AppendUvarint(out, uint64(len(z)))
	out = packTopics(out, z, b)
	return binary.LittleEndian.AppendUint32(out, crc32c.Checksum(out)), nil
}

// packTopics appends z's topics, b bits each, low bits first.
func packTopics(out []byte, z []uint16, b int) []byte {
	var acc uint64 // bits not yet written, low first
	n := 0
	for _, t := range z {
		acc |= uint64(t) << n
		n += b
		for n >= 8 {
			out = append(out, byte(acc))
			acc >>= 8
			n -= 8
		}
	}
	if n > 0 {
		out = append(out, byte(acc))
	}
	return out
}

// ownedDocs lists the documents the state holds, by index in the
// partition; nil when it holds them all.
func (s *partState) ownedDocs() []int {
	if s.own == nil {
		return nil
	}
	var docs []int
	for i, mine := range s.own {
		if mine {
			docs = append(docs, i)
		}
	}
	return docs
}

// span returns where the tokens of the partition's i-th document lie in z.
func (s *partState) span(i int) (lo, hi int) {
	d := s.part.Lo + i
	return s.ptr[d] - s.base, s.ptr[d+1] - s.base
}

// topicsOf returns the topics of docs' tokens, in order.
func (s *partState) topicsOf(docs []int) []uint16 {
	var z []uint16
	for _, i := range docs {
		lo, hi := s.span(i)
		z = append(z, s.z[lo:hi]...)
	}
	return z
}

// UnmarshalBinary replaces the state's topics and pass with blob's: all of
// them (version 1), or those of the documents a piece's blob holds
// (version 2), which are then the documents the state holds. It refuses
// (with ErrCorruptState) a blob that fails its checksum, is cut short or
// too long, or that belongs to another partition, another number of
// topics or another corpus (a different token count), or holds a topic
// or a document out of range; s is then unchanged.
func (s *partState) UnmarshalBinary(blob []byte) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: partition %d: %s", ErrCorruptState, s.part.ID, fmt.Sprintf(format, args...))
	}
	if len(blob) < len(stateMagic)+1+4 || string(blob[:len(stateMagic)]) != stateMagic {
		return bad("%d bytes without the %q header", len(blob), stateMagic)
	}
	body, sum := blob[:len(blob)-4], binary.LittleEndian.Uint32(blob[len(blob)-4:])
	if got := crc32c.Checksum(body); got != sum {
		return bad("checksum %08x, want %08x", got, sum)
	}
	v := body[len(stateMagic)]
	if v != stateVersion && v != piecesVersion {
		return bad("version %d, want %d or %d", v, stateVersion, piecesVersion)
	}
	r := body[len(stateMagic)+1:]
	var hdr [3]uint64 // topics, partition, pass+1
	for i := range hdr {
		x, n := binary.Uvarint(r)
		if n <= 0 {
			return bad("header cut short")
		}
		hdr[i], r = x, r[n:]
	}
	switch {
	case hdr[0] != uint64(s.k):
		return bad("state of %d topics, want %d", hdr[0], s.k)
	case hdr[1] != uint64(s.part.ID):
		return bad("state of partition %d", hdr[1])
	case hdr[2] > 1<<31:
		return bad("pass %d", hdr[2])
	}
	var docs []int
	if v == piecesVersion {
		var err error
		if docs, r, err = s.readDocs(r); err != nil {
			return bad("%v", err)
		}
	}
	z, err := s.readTopics(r, docs)
	if err != nil {
		return bad("%v", err)
	}
	s.pass = int(hdr[2]) - 1
	if docs == nil {
		s.z, s.own = z, nil
		return nil
	}
	s.own = make([]bool, s.part.Len())
	for _, i := range docs {
		lo, hi := s.span(i)
		z = z[copy(s.z[lo:hi], z):]
		s.own[i] = true
	}
	return nil
}

// readDocs reads a piece's document list and returns the rest of r.
func (s *partState) readDocs(r []byte) ([]int, []byte, error) {
	n, k := binary.Uvarint(r)
	if k <= 0 || n > uint64(s.part.Len()) {
		return nil, nil, fmt.Errorf("document count cut short or above the partition's %d", s.part.Len())
	}
	r = r[k:]
	docs := make([]int, n)
	prev := -1
	for i := range docs {
		gap, k := binary.Uvarint(r)
		if k <= 0 || gap >= uint64(s.part.Len()-prev-1) {
			return nil, nil, fmt.Errorf("document %d of %d cut short or out of the partition", i, n)
		}
		prev += int(gap) + 1
		docs[i], r = prev, r[k:]
	}
	return docs, r, nil
}

// readTopics reads the token count and the packed topics of docs (all of
// the partition's if nil), checking both against the corpus.
func (s *partState) readTopics(r []byte, docs []int) ([]uint16, error) {
	want := len(s.z)
	if docs != nil {
		want = 0
		for _, i := range docs {
			lo, hi := s.span(i)
			want += hi - lo
		}
	}
	n, k := binary.Uvarint(r)
	if k <= 0 {
		return nil, errors.New("token count cut short")
	}
	if n != uint64(want) {
		return nil, fmt.Errorf("%d tokens, want %d (another corpus or partitioning?)", n, want)
	}
	r = r[k:]
	b := topicBits(s.k)
	if size := (want*b + 7) / 8; len(r) != size {
		return nil, fmt.Errorf("%d bytes of topics, want %d", len(r), size)
	}
	return unpackTopics(r, want, b, s.k)
}

// Split moves the topics of docs (documents of the partition: the rows of
// a lease's tail, none of them sampled in this pass yet) into a new state,
// which it returns; s keeps its other documents. The new state's pass is
// the one before s's: s's pass has not reached those documents.
func (s *partState) Split(docs []int) (ps.PartitionState, error) {
	tail := &partState{part: s.part, ptr: s.ptr, k: s.k, pass: s.pass - 1, base: s.base, z: slices.Clone(s.z), own: make([]bool, s.part.Len())}
	if s.own == nil {
		s.own = make([]bool, s.part.Len())
		for i := range s.own {
			s.own[i] = true
		}
	}
	for _, d := range docs {
		i := d - s.part.Lo
		if i < 0 || i >= len(s.own) || !s.own[i] {
			return nil, fmt.Errorf("lda: partition %d: document %d is not in this piece", s.part.ID, d)
		}
		s.own[i], tail.own[i] = false, true
	}
	return tail, nil
}

// Join takes into s the documents of other, the state of another piece
// of the partition, after the same pass.
func (s *partState) Join(other ps.PartitionState) error {
	o, ok := other.(*partState)
	switch {
	case !ok || o.part != s.part || o.k != s.k:
		return fmt.Errorf("%w: partition %d: cannot join %T", ErrCorruptState, s.part.ID, other)
	case o.pass != s.pass:
		return fmt.Errorf("%w: partition %d: a piece after pass %d joins one after pass %d", ErrCorruptState, s.part.ID, o.pass, s.pass)
	case s.own == nil:
		return fmt.Errorf("%w: partition %d: a piece joins a state that holds every document", ErrCorruptState, s.part.ID)
	}
	for i := range s.part.Len() {
		if o.own != nil && !o.own[i] {
			continue
		}
		if s.own[i] {
			return fmt.Errorf("%w: partition %d: document %d is in two pieces", ErrCorruptState, s.part.ID, s.part.Lo+i)
		}
		lo, hi := s.span(i)
		copy(s.z[lo:hi], o.z[lo:hi])
		s.own[i] = true
	}
	if !slices.Contains(s.own, false) {
		s.own = nil
	}
	return nil
}

// unpackTopics reads n topics of b bits from p, each below k.
func unpackTopics(p []byte, n, b, k int) ([]uint16, error) {
	z := make([]uint16, n)
	mask := uint64(1)<<b - 1
	var acc uint64
	have := 0
	for i := range z {
		for have < b {
			acc |= uint64(p[0]) << have
			p = p[1:]
			have += 8
		}
		t := acc & mask
		if t >= uint64(k) {
			return nil, fmt.Errorf("token %d has topic %d of %d", i, t, k)
		}
		z[i] = uint16(t)
		acc >>= b
		have -= b
	}
	if acc != 0 {
		return nil, errors.New("padding bits set")
	}
	return z, nil
}
