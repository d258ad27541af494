package gcm

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"math/rand/v2"
	"testing"
)

// pair returns the package's AEAD (wide path for every length when the CPU
// has it) and crypto/cipher's for the same random key.
func pair(t testing.TB, rng *rand.ChaCha8, wide bool) (got, want cipher.AEAD) {
	t.Helper()
	key := make([]byte, 16)
	rng.Read(key)
	got, err := newAEAD(key, 0, wide)
	if err != nil {
		t.Fatal(err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	want, err = cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	return got, want
}

func randBytes(rng *rand.ChaCha8, n int) []byte {
	b := make([]byte, n)
	rng.Read(b)
	return b
}

func TestKeySchedule(t *testing.T) {
	// FIPS 197 Appendix A.1.
	key := []byte{0x2b, 0x7e, 0x15, 0x16, 0x28, 0xae, 0xd2, 0xa6, 0xab, 0xf7, 0x15, 0x88, 0x09, 0xcf, 0x4f, 0x3c}
	var rk [176]byte
	expandKey128(key, &rk)
	want := []byte{0xd0, 0x14, 0xf9, 0xa8, 0xc9, 0xee, 0x25, 0x89, 0xe1, 0x3f, 0x0c, 0xc8, 0xb6, 0x63, 0x0c, 0xa6}
	if !bytes.Equal(rk[160:], want) {
		t.Fatalf("last round key %x, want %x", rk[160:], want)
	}
}

func TestSealOpenMatchesStd(t *testing.T) {
	if !hasWide {
		t.Skip("no VAES/VPCLMULQDQ/AVX-512 here; New returns crypto/cipher's GCM")
	}
	rng := rand.NewChaCha8([32]byte{1})
	got, want := pair(t, rng, true)
	for n := 0; n <= 4096; n++ {
		if n%97 == 0 {
			got, want = pair(t, rng, true)
		}
		nonce := randBytes(rng, 12)
		ad := randBytes(rng, int(rng.Uint64()%40))
		pt := randBytes(rng, n)
		ct := got.Seal(nil, nonce, pt, ad)
		wct := want.Seal(nil, nonce, pt, ad)
		if !bytes.Equal(ct, wct) {
			t.Fatalf("len %d: sealed %x\nwant %x", n, ct, wct)
		}
		back, err := got.Open(nil, nonce, wct, ad)
		if err != nil || !bytes.Equal(back, pt) {
			t.Fatalf("len %d: open: %v", n, err)
		}
	}
}
