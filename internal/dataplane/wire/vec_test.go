package wire

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

// shortVec is a VecReader on src that, like readv on a socket, fills the
// buffers in order and returns after a random number of bytes.
type shortVec struct {
	src io.Reader
	rng *rand.Rand
}

func (v *shortVec) ReadVec(bufs [][]byte) (int, error) {
	want := 1 + v.rng.IntN(5000)
	n := 0
	for _, b := range bufs {
		if n == want {
			break
		}
		k, err := v.src.Read(b[:min(len(b), want-n)])
		n += k
		if err != nil {
			if n > 0 && err == io.EOF {
				return n, nil
			}
			return n, err
		}
		if k < min(len(b), want-n+k) {
			break
		}
	}
	return n, nil
}

// TestReadPayloadVec: a payload read into a prefix and many bodies by
// short vectored reads, which end anywhere in a body or across several,
// arrives whole and checked; a flipped bit and a torn payload are refused.
func TestReadPayloadVec(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	head := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	var sizes []int
	var body []byte
	for range 40 {
		n := rng.IntN(3000)
		sizes = append(sizes, n)
		for range n {
			body = append(body, byte(rng.Uint32()))
		}
	}
	good := frameBytes(t, Header{Type: TReply, Epoch: 1, ReqID: 2}, head, body)
	read := func(raw []byte, vec bool) ([][]byte, error) {
		src := bytes.NewReader(raw)
		r := NewReader(src, 0)
		if vec {
			r.Vec = &shortVec{src: src, rng: rng}
		}
		h, err := r.Next()
		if err != nil {
			return nil, err
		}
		bodies := make([][]byte, len(sizes))
		for i, n := range sizes {
			bodies[i] = make([]byte, n)
		}
		return bodies, r.ReadPayloadVec(h, make([]byte, len(head)), bodies)
	}
	for _, vec := range []bool{true, false} {
		for range 20 {
			bodies, err := read(good, vec)
			if err != nil {
				t.Fatalf("vec %v: %v", vec, err)
			}
			if got := bytes.Join(bodies, nil); !bytes.Equal(got, body) {
				t.Fatalf("vec %v: bodies differ from what was sent", vec)
			}
		}
		flipped := bytes.Clone(good)
		flipped[len(flipped)-100] ^= 4
		if _, err := read(flipped, vec); !errors.Is(err, ErrChecksum) {
			t.Errorf("vec %v: a flipped bit: %v", vec, err)
		}
		if _, err := read(good[:len(good)-10], vec); !errors.Is(err, ErrTruncated) {
			t.Errorf("vec %v: a torn payload: %v", vec, err)
		}
	}
}
