package wire

import (
	"bytes"
	"errors"
	"net"
	"testing"

	"github.com/terrace-ml/terrace/internal/crc32c"
)

// unsummedBytes is an unsummed frame as a connection that authenticates
// writes it.
func unsummedBytes(h Header, parts ...[]byte) []byte {
	var b bytes.Buffer
	f := NewFrameOn(h, true, parts...)
	bufs := f.AppendTo(nil)
	bufs.WriteTo(&b)
	return b.Bytes()
}

func readOne(raw []byte, authenticated bool) ([]byte, error) {
	r := NewReader(bytes.NewReader(raw), 0)
	r.Authenticated = authenticated
	h, err := r.Next()
	if err != nil {
		return nil, err
	}
	return r.Payload(h)
}

// TestUnsummedFrames: a frame for a connection that authenticates its
// bytes leaves its payload out of the CRC, and only such a connection
// takes it; its header is still checked; written to any other
// connection, it is summed.
func TestUnsummedFrames(t *testing.T) {
	payload := bytes.Repeat([]byte{7, 1}, 40)
	h := Header{Type: TPush, Epoch: 3, ReqID: 9}
	raw := unsummedBytes(h, payload[:10], payload[10:])
	if p, err := readOne(raw, true); err != nil || !bytes.Equal(p, payload) {
		t.Fatalf("authenticated reader: %v, payload %v", err, p)
	}
	if _, err := readOne(raw, false); !errors.Is(err, ErrUnsummed) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("unauthenticated reader took an unsummed frame: %v", err)
	}
	flipped := bytes.Clone(raw)
	flipped[9] ^= 1 // the epoch: the header is still summed
	if _, err := readOne(flipped, true); !errors.Is(err, ErrChecksum) {
		t.Fatalf("header bit flip in an unsummed frame: %v, want %v", err, ErrChecksum)
	}
	unknown := bytes.Clone(raw)
	unknown[4] |= 2
	if _, err := readOne(unknown, true); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("unknown flag: %v, want %v", err, ErrCorrupt)
	}

	// The same frame written to a connection that does not authenticate
	// (a retry elsewhere) is summed there, and the frame is left as it was.
	f := NewFrameOn(h, true, payload[:10], payload[10:])
	var hdr [HeaderSize]byte
	bufs := f.AppendSummedTo(nil, &hdr)
	var b bytes.Buffer
	bufs.WriteTo(&b)
	summed := b.Bytes()
	if !bytes.Equal(summed, frameBytes(t, h, payload)) {
		t.Fatal("an unsummed frame summed by its writer differs from the same frame built summed")
	}
	if p, err := readOne(summed, false); err != nil || !bytes.Equal(p, payload) {
		t.Fatalf("summed by the writer: %v", err)
	}
	summed[HeaderSize+3] ^= 1
	if _, err := readOne(summed, false); !errors.Is(err, ErrChecksum) {
		t.Fatalf("payload bit flip after summing: %v", err)
	}
	if !f.Unsummed() || !bytes.Equal(f.AppendTo(net.Buffers(nil))[0], raw[:HeaderSize]) {
		t.Fatal("AppendSummedTo changed the frame")
	}
	var w bytes.Buffer
	if _, err := f.WriteTo(&w); err != nil || !bytes.Equal(w.Bytes(), frameBytes(t, h, payload)) {
		t.Fatalf("WriteTo of an unsummed frame must write it summed: %v", err)
	}
}

// TestSumTailWith: a writer that sums an unsummed frame's last parts with
// the frame's tail sum (a push spread over servers, ps.spreadSums) writes
// the frame built summed; the tail sum gets the CRC32C of the header and
// the parts before, and a wrong one is caught by the reader.
func TestSumTailWith(t *testing.T) {
	payload := bytes.Repeat([]byte{7, 1, 2}, 700)
	h := Header{Type: TPush, Epoch: 3, ReqID: 9}
	parts := [][]byte{payload[:10], payload[10:600], payload[600:1500], payload[1500:]}
	for _, bad := range []bool{false, true} {
		f := NewFrameOn(h, true, parts...)
		f.SumTailWith(2, func(crc uint32) uint32 {
			for _, p := range parts[2:] {
				crc = crc32c.Update(crc, p)
			}
			if bad {
				crc ^= 1
			}
			return crc
		})
		var hdr [HeaderSize]byte
		var b bytes.Buffer
		bufs := f.AppendSummedTo(nil, &hdr)
		bufs.WriteTo(&b)
		p, err := readOne(b.Bytes(), false)
		switch {
		case bad && !errors.Is(err, ErrChecksum):
			t.Fatalf("a wrong tail sum: %v, want %v", err, ErrChecksum)
		case !bad && (err != nil || !bytes.Equal(p, payload) || !bytes.Equal(b.Bytes(), frameBytes(t, h, payload))):
			t.Fatalf("summed with its tail sum: %v; differs from the frame built summed", err)
		}
	}
	// Rebuilt, the frame forgets the tail sum.
	f := NewFrameOn(h, true, parts...)
	f.SumTailWith(2, func(uint32) uint32 { return 0 })
	f.ResetOn(h, true, parts...)
	var w bytes.Buffer
	if _, err := f.WriteTo(&w); err != nil || !bytes.Equal(w.Bytes(), frameBytes(t, h, payload)) {
		t.Fatalf("a reset frame kept its tail sum: %v", err)
	}
}
