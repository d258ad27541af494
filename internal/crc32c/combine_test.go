package crc32c

import (
	"math/rand"
	"testing"
)

// TestCombineMatchesUpdate: a buffer summed in pieces, each from zero and
// combined, gives the sum of the whole, for pieces of every length around
// the fold's thresholds and for any running sum before them.
func TestCombineMatchesUpdate(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	buf := make([]byte, 3<<20)
	rng.Read(buf)
	lens := []int{0, 1, 3, 4, 15, 16, 255, 256, 511, 512, 513, 4096, 16 << 10, 65537, 1 << 20, 3 << 20}
	for _, a := range []int{0, 1, 28, 4096} {
		for _, n := range lens {
			if a+n > len(buf) {
				continue
			}
			head, tail := buf[:a], buf[a:a+n]
			for _, start := range []uint32{0, 0xFFFFFFFF, rng.Uint32()} {
				want := Update(Update(start, head), tail)
				got := ShiftBy(n).Combine(Update(start, head), Update(0, tail))
				if got != want {
					t.Fatalf("head %d, tail %d, start %#x: combined %#x, whole %#x", a, n, start, got, want)
				}
			}
		}
	}
	// Many pieces in a row, as a frame's runs.
	crc, want := Checksum(buf[:28]), Checksum(buf)
	for off := 28; off < len(buf); {
		n := min(len(buf)-off, 512+rng.Intn(40000))
		crc = ShiftBy(n).Combine(crc, Checksum(buf[off:off+n]))
		off += n
	}
	if crc != want {
		t.Fatalf("in pieces %#x, whole %#x", crc, want)
	}
}
