package lda

import (
	"encoding/binary"
	"errors"
	"github.com/terrace-ml/terrace/internal/crc32c"
	"slices"
	"strings"
	"testing"

	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/ps"
)

// testState is partition 1 of a small corpus, with k topics.
func testState(t *testing.T, k int) (*data.Corpus, *partState) {
	t.Helper()
	c, err := data.ParseDocWords(strings.NewReader("0 0 3\n0 5 2\n1 2 1\n2 1 4\n2 3 1\n3 4 7\n4 0 2\n"), "tiny")
	if err != nil {
		t.Fatal(err)
	}
	parts := data.Partition(c.NumDocs(), 2)
	return c, newState(c, parts[1], k, 7)
}

func TestStateRoundTrip(t *testing.T) {
	for _, k := range []int{1, 2, 20, 50, 256, 257, 65535} {
		c, s := testState(t, k)
		if len(s.z) != 9 { // documents 3 and 4
			t.Fatalf("partition 1 has %d tokens, want 9", len(s.z))
		}
		s.pass = 4
		for i := range s.z {
			s.z[i] = uint16((i * 7919) % k)
		}
		blob, err := s.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if want := len(stateMagic) + 1 + 4 + (9*topicBits(k)+7)/8 + 4; k < 128 && len(blob) != want {
			t.Errorf("k=%d: %d bytes, want %d", k, len(blob), want)
		}
		_, got := testState(t, k)
		if err := got.UnmarshalBinary(blob); err != nil {
			t.Fatalf("k=%d: %v", k, err)
		}
		if !slices.Equal(got.z, s.z) || got.pass != 4 {
			t.Errorf("k=%d: restored topics %v pass %d, want %v pass 4", k, got.z, got.pass, s.z)
		}
		if d := got.topics(c, 4); !slices.Equal(d, s.z[7:]) {
			t.Errorf("k=%d: document 4's topics %v, want %v", k, d, s.z[7:])
		}
	}
}

// reseal replaces blob's checksum with the right one, so that a test
// reaches the checks behind it.
func reseal(blob []byte) []byte {
	body := blob[:len(blob)-4]
	return binary.LittleEndian.AppendUint32(slices.Clone(body), crc32c.Checksum(body))
}

func TestStateRefusesCorruptBlobs(t *testing.T) {
	const k = 20 // 5 bits a topic: 9 tokens take 6 bytes, the last 3 bits padding
	_, s := testState(t, k)
	s.pass = 2
	good, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	hdr := len(stateMagic) + 1 // the uvarints follow: topics, partition, pass+1, tokens
	edit := func(f func(b []byte) []byte) []byte { return f(slices.Clone(good)) }
	for _, tc := range []struct {
		name, want string
		blob       []byte
	}{
		{"empty", "0 bytes without", nil},
		{"other magic", "without the", edit(func(b []byte) []byte { b[0] = 'X'; return b })},
		{"flipped bit", "checksum", edit(func(b []byte) []byte { b[len(b)-6] ^= 0x10; return b })},
		{"cut short", "checksum", good[:len(good)-1]},
		{"cut to the header", "header cut short", reseal(append(slices.Clone(good[:hdr+2]), 0x80, 0, 0, 0, 0))},
		{"version 3", "version 3, want 1 or 2", edit(func(b []byte) []byte { b[hdr-1] = 3; return reseal(b) })},
		{"other topic count", "state of 21 topics, want 20", edit(func(b []byte) []byte { b[hdr]++; return reseal(b) })},
		{"other partition", "state of partition 0", edit(func(b []byte) []byte { b[hdr+1] = 0; return reseal(b) })},
		{"other corpus", "10 tokens, want 9", edit(func(b []byte) []byte { b[hdr+3]++; return reseal(b) })},
		{"topic out of range", "has topic 31 of 20", edit(func(b []byte) []byte { b[hdr+4] |= 0x1f; return reseal(b) })},
		{"padding set", "padding bits set", edit(func(b []byte) []byte { b[len(b)-5] |= 0x80; return reseal(b) })},
		{"trailing byte", "7 bytes of topics, want 6", reseal(append(slices.Clone(good[:len(good)-4]), 0, 0, 0, 0, 0))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, got := testState(t, k)
			before := slices.Clone(got.z)
			err := got.UnmarshalBinary(tc.blob)
			if !errors.Is(err, ErrCorruptState) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "partition 1") {
				t.Fatalf("error %v, want ErrCorruptState naming partition 1 and saying %q", err, tc.want)
			}
			if !slices.Equal(got.z, before) || got.pass != -1 {
				t.Error("a refused blob changed the state")
			}
		})
	}
}

// TestStateSize pins the packing: 5 bits a topic at K = 20 for a KOS
// partition, against the 2 bytes a topic takes in memory.
func TestStateSize(t *testing.T) {
	corpus, err := data.ReadDocWords(kosDocWords)
	if err != nil {
		t.Fatal(err)
	}
	train, _ := split(corpus, 10)
	s := newState(train, data.Partition(train.NumDocs(), 8)[0], 20, 1)
	blob, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if max := len(s.z)*5/8 + 32; len(blob) > max {
		t.Errorf("%d tokens in %d bytes, want at most %d", len(s.z), len(blob), max)
	}
	t.Logf("partition 0: %d tokens in %d bytes (%.2f bits a token)", len(s.z), len(blob), float64(8*len(blob))/float64(len(s.z)))
}

// TestStatePieces: a state split into the pieces of a split lease writes
// each piece's documents only (version 2), and the pieces, restored each
// into a fresh state, join into the whole; the tail is a pass behind,
// since the holder's pass had not reached it.
func TestStatePieces(t *testing.T) {
	c, err := data.ParseDocWords(strings.NewReader("0 0 3\n0 5 2\n1 2 1\n2 1 4\n2 3 1\n3 4 7\n4 0 2\n5 1 1\n"), "tiny")
	if err != nil {
		t.Fatal(err)
	}
	const k = 20
	part := data.Partition(c.NumDocs(), 1)[0] // documents 0 to 5
	whole := newState(c, part, k, 7)
	whole.pass = 3
	for i := range whole.z {
		whole.z[i] = uint16((i * 7919) % k)
	}
	want := slices.Clone(whole.z)
	head := newState(c, part, k, 7)
	if err := head.UnmarshalBinary(must(whole.MarshalBinary())); err != nil {
		t.Fatal(err)
	}
	tail, err := head.Split([]int{4, 1}) // a tail in the pass's order
	if err != nil {
		t.Fatal(err)
	}
	tailTail, err := tail.(*partState).Split([]int{4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := head.Split([]int{4}); err == nil {
		t.Error("split off a document the piece no longer holds")
	}
	var pieces []*partState
	for _, p := range []ps.PartitionState{head, tail, tailTail} {
		blob := must(p.MarshalBinary())
		if blob[len(stateMagic)] != piecesVersion {
			t.Fatalf("a piece written in version %d", blob[len(stateMagic)])
		}
		got := newState(c, part, k, 1) // other initial topics
		if err := got.UnmarshalBinary(blob); err != nil {
			t.Fatal(err)
		}
		pieces = append(pieces, got)
	}
	if pieces[1].pass != 2 || pieces[2].pass != 1 {
		t.Errorf("tail passes %d and %d, want 2 and 1", pieces[1].pass, pieces[2].pass)
	}
	if err := pieces[0].Join(pieces[1]); err == nil {
		t.Error("joined a piece a pass behind")
	}
	pieces[1].pass, pieces[2].pass = 3, 3 // as their holders leave them
	for _, p := range pieces[1:] {
		if err := pieces[0].Join(p); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(pieces[0].z, want) || pieces[0].own != nil {
		t.Errorf("joined topics %v (own %v), want %v", pieces[0].z, pieces[0].own, want)
	}
	if blob := must(pieces[0].MarshalBinary()); blob[len(stateMagic)] != stateVersion {
		t.Errorf("the joined whole written in version %d, want %d", blob[len(stateMagic)], stateVersion)
	}
	if err := pieces[0].Join(pieces[1]); err == nil || !errors.Is(err, ErrCorruptState) {
		t.Errorf("joining a document twice: %v, want ErrCorruptState", err)
	}
}

// TestStateRefusesCorruptPieces: a piece's blob naming a document outside
// the partition, or token counts that do not match its documents, is
// refused and leaves the state as it was.
func TestStateRefusesCorruptPieces(t *testing.T) {
	const k = 20
	_, s := testState(t, k) // partition 1: documents 3 and 4
	tail, err := s.Split([]int{4})
	if err != nil {
		t.Fatal(err)
	}
	good := must(tail.MarshalBinary())
	hdr := len(stateMagic) + 1 + 3 // K, partition, pass+1: one byte each here
	for name, tc := range map[string]struct {
		blob []byte
		want string
	}{
		"document out of range": {reseal(append(append(slices.Clone(good[:hdr]), 1, 2), good[hdr+2:len(good)-4]...)), "out of the partition"},
		"too many documents":    {reseal(append(append(slices.Clone(good[:hdr]), 3), good[hdr+1:len(good)-4]...)), "above the partition's 2"},
		"tokens of another":     {reseal(append(append(slices.Clone(good[:hdr]), 1, 0), good[hdr+2:len(good)-4]...)), "tokens, want"},
	} {
		_, got := testState(t, k)
		before := slices.Clone(got.z)
		if err := got.UnmarshalBinary(tc.blob); !errors.Is(err, ErrCorruptState) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrCorruptState saying %q", name, err, tc.want)
		}
		if !slices.Equal(got.z, before) || got.own != nil {
			t.Errorf("%s: a refused blob changed the state", name)
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
