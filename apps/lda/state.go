package lda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/bits"

	"github.com/terrace-ml/terrace/data"
)

// ErrCorruptState is wrapped by every error that refuses a partition state
// blob.
var ErrCorruptState = errors.New("lda: corrupt partition state")

// partState is one partition's worker state: the topic of every token of
// its documents. Documents' topic counts are rebuilt from it, and the
// word-topic counts are the table's, so nothing else is needed to resume.
type partState struct {
	part data.Part
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
}

// newState is partition p's state before any pass: every token's initial
// topic, drawn per document from the seed (pass 0 pushes their counts).
func newState(train *data.Corpus, p data.Part, k int, seed uint64) *partState {
	base := train.DocPtr[p.Lo]
	s := &partState{part: p, k: k, pass: -1, base: base, z: make([]uint16, train.DocPtr[p.Hi]-base)}
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
// At K = 20 a topic takes 5 bits: a KOS partition of 8 (48,560 tokens) is
// 30,365 bytes. zstd (klauspost/compress, default level) of one byte a
// topic measured 48,574 bytes for the random first topics and 24,454 after
// 30 sweeps (27,776 for the packed bytes then): a fifth smaller at best, late
// in training, which pays neither for a dependency nor for a second pass
// over the blob at every Progress.
const (
	stateMagic   = "LDAz"
	stateVersion = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// topicBits is how many bits a topic takes in the byte format.
func topicBits(k int) int { return max(1, bits.Len(uint(k-1))) }

// MarshalBinary encodes the state in the byte format above.
func (s *partState) MarshalBinary() ([]byte, error) {
	b := topicBits(s.k)
	out := make([]byte, 0, len(stateMagic)+1+4*binary.MaxVarintLen64+(len(s.z)*b+7)/8+4)
	out = append(out, stateMagic...)
	out = append(out, stateVersion)
	out = binary.AppendUvarint(out, uint64(s.k))
	out = binary.AppendUvarint(out, uint64(s.part.ID))
	out = binary.AppendUvarint(out, uint64(s.pass+1))
	out = binary.AppendUvarint(out, uint64(len(s.z)))
	var acc uint64 // bits not yet written, low first
	n := 0
	for _, t := range s.z {
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
	return binary.LittleEndian.AppendUint32(out, crc32.Checksum(out, castagnoli)), nil
}

// UnmarshalBinary replaces the state's topics and pass with blob's. It
// refuses (with ErrCorruptState) a blob that fails its checksum, is cut
// short or too long, or that belongs to another partition, another number
// of topics or another corpus (a different token count), or holds a topic
// out of range; s is then unchanged.
func (s *partState) UnmarshalBinary(blob []byte) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: partition %d: %s", ErrCorruptState, s.part.ID, fmt.Sprintf(format, args...))
	}
	if len(blob) < len(stateMagic)+1+4 || string(blob[:len(stateMagic)]) != stateMagic {
		return bad("%d bytes without the %q header", len(blob), stateMagic)
	}
	body, sum := blob[:len(blob)-4], binary.LittleEndian.Uint32(blob[len(blob)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return bad("checksum %08x, want %08x", got, sum)
	}
	if v := body[len(stateMagic)]; v != stateVersion {
		return bad("version %d, want %d", v, stateVersion)
	}
	r := body[len(stateMagic)+1:]
	var hdr [4]uint64 // topics, partition, pass+1, tokens
	for i := range hdr {
		v, n := binary.Uvarint(r)
		if n <= 0 {
			return bad("header cut short")
		}
		hdr[i], r = v, r[n:]
	}
	switch {
	case hdr[0] != uint64(s.k):
		return bad("state of %d topics, want %d", hdr[0], s.k)
	case hdr[1] != uint64(s.part.ID):
		return bad("state of partition %d", hdr[1])
	case hdr[3] != uint64(len(s.z)):
		return bad("%d tokens, want %d (another corpus or partitioning?)", hdr[3], len(s.z))
	case hdr[2] > 1<<31:
		return bad("pass %d", hdr[2])
	}
	b := topicBits(s.k)
	if want := (len(s.z)*b + 7) / 8; len(r) != want {
		return bad("%d bytes of topics, want %d", len(r), want)
	}
	z, err := unpackTopics(r, len(s.z), b, s.k)
	if err != nil {
		return bad("%v", err)
	}
	s.z, s.pass = z, int(hdr[2])-1
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
