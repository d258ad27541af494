package crc32c

import (
	"fmt"
	"hash/crc32"
	"math/bits"
	"math/rand"
	"testing"
)

// TestUpdateMatchesHashCRC32 checks every length up to past a few of the
// fold's 256-byte rounds, at every alignment of the first byte, from
// random registers, against hash/crc32; and a long buffer summed in
// uneven pieces against the same buffer in one.
func TestUpdateMatchesHashCRC32(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	buf := make([]byte, 4096+64)
	r.Read(buf)
	for n := 0; n <= 2100; n++ {
		off := n % 64
		p := buf[off : off+n]
		crc := r.Uint32()
		if got, want := Update(crc, p), crc32.Update(crc, table, p); got != want {
			t.Fatalf("Update(%#x, %d bytes at offset %d) = %#x, hash/crc32 gives %#x", crc, n, off, got, want)
		}
	}
	long := make([]byte, 3<<20+13)
	r.Read(long)
	want := crc32.Checksum(long, table)
	if got := Checksum(long); got != want {
		t.Fatalf("Checksum of %d bytes = %#x, want %#x", len(long), got, want)
	}
	var crc uint32
	for p := long; len(p) > 0; {
		k := min(len(p), 1+r.Intn(200000))
		crc = Update(crc, p[:k])
		p = p[k:]
	}
	if crc != want {
		t.Fatalf("summed in pieces: %#x, want %#x", crc, want)
	}
}

// TestFlippedBitChangesSum flips each bit of a folded buffer in turn: a
// fold that dropped a lane, or a round, would miss some of them.
func TestFlippedBitChangesSum(t *testing.T) {
	p := make([]byte, 1024+48)
	rand.New(rand.NewSource(2)).Read(p)
	want := Checksum(p)
	for i := range len(p) * 8 {
		p[i/8] ^= 1 << (i % 8)
		if got := Checksum(p); got == want || got != crc32.Checksum(p, table) {
			t.Fatalf("bit %d flipped: %#x (unflipped %#x, hash/crc32 %#x)", i, got, want, crc32.Checksum(p, table))
		}
		p[i/8] ^= 1 << (i % 8)
	}
}

// TestFoldConstants recomputes the constants in crc32c_amd64.s.
func TestFoldConstants(t *testing.T) {
	const poly = 0x1EDC6F41 // CRC32C, normal form, x^32 implied
	xnmodp := func(n int) uint32 {
		r := uint32(1)
		for range n {
			top := r & 0x80000000
			r <<= 1
			if top != 0 {
				r ^= poly
			}
		}
		return r
	}
	k := func(n int) string { return fmt.Sprintf("%#x", uint64(bits.Reverse32(xnmodp(n)))<<1) }
	for _, c := range []struct {
		d      int
		lo, hi string
	}{{2048, "0xdcb17aa4", "0xb9e02b86"}, {512, "0x740eef02", "0x9e4addf8"}, {128, "0xf20c0dfe", "0x14cd00bd6"}} {
		if lo, hi := k(c.d+32), k(c.d-32); lo != c.lo || hi != c.hi {
			t.Errorf("D=%d: constants %s, %s; the assembly has %s, %s", c.d, lo, hi, c.lo, c.hi)
		}
	}
}

// BenchmarkUpdate compares the fold with hash/crc32 on buffers the cache
// holds and, at 64 MiB, on ones it does not (six buffers in turn).
func BenchmarkUpdate(b *testing.B) {
	for _, n := range []int{256, 512, 1024, 4096, 64 << 10, 1 << 20, 64 << 20} {
		k := 1
		if n == 64<<20 {
			k = 6
		}
		bufs := make([][]byte, k)
		for i := range bufs {
			bufs[i] = make([]byte, n)
			rand.New(rand.NewSource(int64(i))).Read(bufs[i])
		}
		b.Run(fmt.Sprintf("fold/%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for i := 0; b.Loop(); i++ {
				Checksum(bufs[i%k])
			}
		})
		b.Run(fmt.Sprintf("hash-crc32/%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for i := 0; b.Loop(); i++ {
				crc32.Checksum(bufs[i%k], table)
			}
		})
	}
}
