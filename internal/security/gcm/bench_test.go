package gcm

import (
	"crypto/aes"
	"crypto/cipher"
	"fmt"
	"testing"
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

func BenchmarkSeal256K(b *testing.B) {
	for _, name := range []string{"std", "wide"} {
		aead := benchAEADs(b)[name]
		b.Run(name, func(b *testing.B) {
			pt := make([]byte, benchLen)
			out := make([]byte, 0, benchLen+Overhead)
			nonce, ad := make([]byte, NonceSize), make([]byte, 4)
			b.SetBytes(benchLen)
			for b.Loop() {
				out = aead.Seal(out[:0], nonce, pt, ad)
			}
		})
	}
}

func BenchmarkOpen256K(b *testing.B) {
	for _, name := range []string{"std", "wide"} {
		aead := benchAEADs(b)[name]
		b.Run(name, func(b *testing.B) {
			nonce, ad := make([]byte, NonceSize), make([]byte, 4)
			ct := aead.Seal(nil, nonce, make([]byte, benchLen), ad)
			out := make([]byte, 0, benchLen)
			b.SetBytes(benchLen)
			for b.Loop() {
				var err error
				if out, err = aead.Open(out[:0], nonce, ct, ad); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
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
	for _, name := range []string{"std", "wide"} {
		aead := benchAEADs(b)[name]
		b.Run(name, func(b *testing.B) {
			pt := make([]byte, total)
			out := make([]byte, total+total/benchLen*Overhead)
			nonce, ad := make([]byte, NonceSize), make([]byte, 4)
			b.SetBytes(total)
			for b.Loop() {
				o := out[:0]
				for off := 0; off < total; off += benchLen {
					o = aead.Seal(o, nonce, pt[off:off+benchLen], ad)
				}
			}
		})
	}
}
