package peernet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/terrace-ml/terrace/internal/crc32c"
	"github.com/terrace-ml/terrace/ps"
)

// frames are messages of every kind, as the reassigner sends them.
var frames = []Frame{
	{To: 1, M: ps.PeerMessage{From: 0, Progress: &ps.PeerProgress{Pass: 2, Partition: 7, Start: 100, Offset: 164, End: 4070, Rate: 5123.5}}},
	{To: 3, M: ps.PeerMessage{From: 2, Progress: &ps.PeerProgress{Pass: 0, Partition: -1, Rate: 0, Idle: true}}},
	{To: 0, M: ps.PeerMessage{From: 3, Progress: &ps.PeerProgress{Pass: -1, Partition: -1}}},
	{To: 2, M: ps.PeerMessage{From: 1, Cut: &ps.PeerCut{Pass: 1, Partition: 5, From: 3000}}},
	{To: 9, M: ps.PeerMessage{From: 8, Progress: &ps.PeerProgress{Pass: 1, Partition: 2, End: 10, Rate: 1}, Cut: &ps.PeerCut{Pass: 1, Partition: 3, From: 4}}},
}

func TestFrameRoundTrip(t *testing.T) {
	for _, f := range frames {
		b, err := Append(nil, f)
		if err != nil {
			t.Fatal(err)
		}
		n, err := Length([lengthLen]byte(b))
		if err != nil || n != len(b)-lengthLen || n > MaxFrame {
			t.Fatalf("length %d, %v for a frame of %d", n, err, len(b))
		}
		got, err := Decode(b[lengthLen:])
		if err != nil {
			t.Fatalf("%+v: %v", f, err)
		}
		if !same(got, f) {
			t.Fatalf("decoded %+v %+v %+v, sent %+v %+v %+v", got, got.M.Progress, got.M.Cut, f, f.M.Progress, f.M.Cut)
		}
	}
	if _, err := Append(nil, Frame{To: 1}); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("empty message: %v", err)
	}
}

// TestDecodeRefuses is the corruption table: every frame a peer could
// send that is not a message is refused with ErrBadFrame, never a panic.
func TestDecodeRefuses(t *testing.T) {
	good, _ := Append(nil, frames[4])
	body := good[lengthLen:]
	resum := func(b []byte) []byte {
		n := len(b) - crcLen
		binary.LittleEndian.PutUint32(b[n:], crc32c.Checksum(b[:n]))
		return b
	}
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(body)) }
	cases := map[string][]byte{
		"empty":         nil,
		"short":         body[:5],
		"oversized":     make([]byte, MaxFrame+1),
		"bad checksum":  edit(func(b []byte) []byte { b[12]++; return b }),
		"torn":          body[:len(body)-1],
		"version":       edit(func(b []byte) []byte { b[0] = 2; return resum(b) }),
		"unknown kind":  edit(func(b []byte) []byte { b[1] |= 0x80; return resum(b) }),
		"no kind":       resum(append([]byte{version, 0, 0, 0, 0, 0, 1, 0, 0, 0}, 0, 0, 0, 0)),
		"idle alone":    edit(func(b []byte) []byte { b[1] = kindIdle | kindCut; return resum(b) }),
		"size for kind": edit(func(b []byte) []byte { b[1] = kindProgress; return resum(b) }),
		"negative rank": edit(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[2:], math.MaxUint32); return resum(b) }),
		"negative row": edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[headerLen+16:], math.MaxUint64)
			return resum(b)
		}),
		"huge row": edit(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[headerLen+32:], 1<<40); return resum(b) }),
		"NaN rate": edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[headerLen+40:], math.Float64bits(math.NaN()))
			return resum(b)
		}),
		"negative rate": edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[headerLen+40:], math.Float64bits(-1))
			return resum(b)
		}),
		"infinite rate": edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[headerLen+40:], math.Float64bits(math.Inf(1)))
			return resum(b)
		}),
		"cut before row": edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[headerLen+progressLen+16:], math.MaxUint64)
			return resum(b)
		}),
	}
	for name, b := range cases {
		if f, err := Decode(b); !errors.Is(err, ErrBadFrame) {
			t.Errorf("%s: decoded %+v, %v", name, f, err)
		}
	}
	var huge [lengthLen]byte
	binary.LittleEndian.PutUint32(huge[:], 1<<30)
	if _, err := Length(huge); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a 1 GiB length prefix: %v", err)
	}
}

// FuzzDecode: no input panics the decoder, and what it accepts is what
// Append writes, byte for byte. The seed corpus is testdata/fuzz/
// FuzzDecode (a frame of each kind and a few corrupt ones).
func FuzzDecode(f *testing.F) {
	for _, fr := range frames {
		b, _ := Append(nil, fr)
		f.Add(b[lengthLen:])
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		// As sent, and with its checksum made right, so that the fuzzer
		// reaches the checks behind it.
		fixed := bytes.Clone(body)
		if n := len(fixed) - crcLen; n >= 0 {
			binary.LittleEndian.PutUint32(fixed[n:], crc32c.Checksum(fixed[:n]))
		}
		for _, body := range [][]byte{body, fixed} {
			fr, err := Decode(body)
			if err != nil {
				if !errors.Is(err, ErrBadFrame) {
					t.Fatalf("error %v does not wrap ErrBadFrame", err)
				}
				continue
			}
			b, err := Append(nil, fr)
			if err != nil {
				t.Fatalf("decoded %+v, which does not encode: %v", fr, err)
			}
			if !bytes.Equal(b[lengthLen:], body) {
				t.Fatalf("decoded %+v from %x, which encodes as %x", fr, body, b[lengthLen:])
			}
		}
	})
}

// TestFuzzCorpusPresent keeps the corpus the fuzz target's seeds name.
func TestFuzzCorpusPresent(t *testing.T) {
	files, err := os.ReadDir(filepath.Join("testdata", "fuzz", "FuzzDecode"))
	if err != nil || len(files) < 3 {
		t.Fatalf("testdata/fuzz/FuzzDecode: %d files, %v", len(files), err)
	}
}

func same(a, b Frame) bool {
	if a.To != b.To || a.M.From != b.M.From || (a.M.Progress == nil) != (b.M.Progress == nil) || (a.M.Cut == nil) != (b.M.Cut == nil) {
		return false
	}
	return (a.M.Progress == nil || *a.M.Progress == *b.M.Progress) && (a.M.Cut == nil || *a.M.Cut == *b.M.Cut)
}
