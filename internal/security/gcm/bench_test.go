package gcm

import (
	"crypto/aes"
	"crypto/cipher"
	"fmt"
	"testing"
	"time"
)

// The bulk record size of tlsnet.
const benchLen = 256 << 10

func benchAEADs(b *testing.B) map[string]cipher.AEAD {
	key := make([]byte, 16)
	block, err := aes.NewCipher(key)
	if err != nil {
		b.Fatal(err)
	}
	std, err := cipher.NewGCM(block)
	if err != nil {
		b.Fatal(err)
	}
	wide, err := New(key)
	if err != nil {
		b.Fatal(err)
	}
	return map[string]cipher.AEAD{"std": std, "wide": wide}
}

// pairedBench times op on crypto/cipher's GCM and on New's, alternating
// every iteration so that both see the same load, and reports each one's
// GB/s and their ratio.
func pairedBench(b *testing.B, bytes int, op func(aead cipher.AEAD)) {
	aeads := benchAEADs(b)
	var std, wide time.Duration
	for b.Loop() {
		t0 := time.Now()
		op(aeads["std"])
		t1 := time.Now()
		op(aeads["wide"])
		std, wide = std+t1.Sub(t0), wide+time.Since(t1)
	}
	gb := float64(b.N) * float64(bytes) / 1e9
	b.ReportMetric(gb/std.Seconds(), "std_GB/s")
	b.ReportMetric(gb/wide.Seconds(), "wide_GB/s")
	b.ReportMetric(std.Seconds()/wide.Seconds(), "speedup")
}

func BenchmarkSeal256K(b *testing.B) {
	pt := make([]byte, benchLen)
	out := make([]byte, 0, benchLen+Overhead)
	nonce, ad := make([]byte, NonceSize), make([]byte, 4)
	pairedBench(b, benchLen, func(aead cipher.AEAD) { out = aead.Seal(out[:0], nonce, pt, ad) })
}

func BenchmarkOpen256K(b *testing.B) {
	nonce, ad := make([]byte, NonceSize), make([]byte, 4)
	ct := benchAEADs(b)["std"].Seal(nil, nonce, make([]byte, benchLen), ad)
	out := make([]byte, 0, benchLen)
	pairedBench(b, benchLen, func(aead cipher.AEAD) {
		var err error
		if out, err = aead.Open(out[:0], nonce, ct, ad); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkSealShort is what DefaultMinBulk is chosen from: the shortest
// length at which the wide path (forced on) beats crypto/cipher's.
func BenchmarkSealShort(b *testing.B) {
	if !hasWide {
		b.Skip("no wide path here")
	}
	key := make([]byte, 16)
	std := benchAEADs(b)["std"]
	wide, err := newAEAD(key, 0, true)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{256, 512, 1024, 2048} {
		for name, aead := range map[string]cipher.AEAD{"std": std, "wide": wide} {
			b.Run(fmt.Sprintf("%d/%s", n, name), func(b *testing.B) {
				pt := make([]byte, n)
				out := make([]byte, 0, n+Overhead)
				nonce, ad := make([]byte, NonceSize), make([]byte, 4)
				b.SetBytes(int64(n))
				for b.Loop() {
					out = aead.Seal(out[:0], nonce, pt, ad)
				}
			})
		}
	}
}

// BenchmarkSealStream seals a 64 MiB vector in 256 KiB records, as tlsnet
// does a dense push: the plaintext comes from memory, not from cache,
// which bounds the wide path well below its in-cache rate.
func BenchmarkSealStream(b *testing.B) {
	const total = 64 << 20
	pt := make([]byte, total)
	out := make([]byte, total+total/benchLen*Overhead)
	nonce, ad := make([]byte, NonceSize), make([]byte, 4)
	pairedBench(b, total, func(aead cipher.AEAD) {
		o := out[:0]
		for off := 0; off < total; off += benchLen {
			o = aead.Seal(o, nonce, pt[off:off+benchLen], ad)
		}
	})
}
