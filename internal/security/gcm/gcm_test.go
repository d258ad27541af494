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
	if _, ok := got.(*aead); ok != wide {
		t.Fatalf("newAEAD(wide=%v) returned %T", wide, got)
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

// check seals pt under both AEADs, compares the output, and opens the
// reference's ciphertext with got.
func check(t *testing.T, got, want cipher.AEAD, nonce, pt, ad []byte) {
	t.Helper()
	ct := got.Seal(nil, nonce, pt, ad)
	wct := want.Seal(nil, nonce, pt, ad)
	if !bytes.Equal(ct, wct) {
		t.Fatalf("len %d, ad %d: sealed differs from crypto/cipher's\n got tag %x\nwant tag %x",
			len(pt), len(ad), ct[len(ct)-Overhead:], wct[len(wct)-Overhead:])
	}
	back, err := got.Open(nil, nonce, wct, ad)
	if err != nil || !bytes.Equal(back, pt) {
		t.Fatalf("len %d, ad %d: open: %v", len(pt), len(ad), err)
	}
}

func requireWide(t *testing.T) {
	if !hasWide {
		t.Skip("no AVX-512 VAES/VPCLMULQDQ here; New returns crypto/cipher's GCM, tested by TestFallback")
	}
}

func TestEveryLengthMatchesStd(t *testing.T) {
	requireWide(t)
	rng := rand.NewChaCha8([32]byte{1})
	var got, want cipher.AEAD
	for n := 0; n <= 4096; n++ {
		if n%97 == 0 {
			got, want = pair(t, rng, true)
		}
		ad := randBytes(rng, int(rng.Uint64()%70))
		check(t, got, want, randBytes(rng, NonceSize), randBytes(rng, n), ad)
	}
}

func TestLargeMatchesStd(t *testing.T) {
	requireWide(t)
	rng := rand.NewChaCha8([32]byte{2})
	for _, n := range []int{256 << 10, 256<<10 - 1, 256<<10 + 17, 1<<20 + 511, 3<<20 + 1} {
		got, want := pair(t, rng, true)
		check(t, got, want, randBytes(rng, NonceSize), randBytes(rng, n), randBytes(rng, 4))
	}
}

// TestUnaligned puts plaintext, additional data and output at every
// offset within a cache line.
func TestUnaligned(t *testing.T) {
	requireWide(t)
	rng := rand.NewChaCha8([32]byte{3})
	got, want := pair(t, rng, true)
	nonce := randBytes(rng, NonceSize)
	for off := range 64 {
		n := 2000 + off*37
		ptBuf := randBytes(rng, n+64)
		adBuf := randBytes(rng, 64+64)
		pt, ad := ptBuf[off:off+n], adBuf[off:off+1+off]
		wct := want.Seal(nil, nonce, pt, ad)
		out := make([]byte, n+Overhead+64)
		ct := got.Seal(out[(off*7)%64:][:0], nonce, pt, ad)
		if !bytes.Equal(ct, wct) {
			t.Fatalf("offset %d: sealed differs", off)
		}
		ctBuf := make([]byte, len(wct)+64)
		copy(ctBuf[off:], wct)
		back, err := got.Open(out[(off*11)%64:][:0], nonce, ctBuf[off:off+len(wct)], ad)
		if err != nil || !bytes.Equal(back, pt) {
			t.Fatalf("offset %d: open: %v", off, err)
		}
	}
}

// TestInPlace seals and opens with dst aliasing the input exactly, as
// crypto/cipher allows (and tlsnet does not, today, but may).
func TestInPlace(t *testing.T) {
	requireWide(t)
	rng := rand.NewChaCha8([32]byte{4})
	got, want := pair(t, rng, true)
	for _, n := range []int{0, 1, 15, 16, 511, 512, 513, 4095, 256 << 10} {
		nonce, ad := randBytes(rng, NonceSize), randBytes(rng, 4)
		pt := randBytes(rng, n)
		wct := want.Seal(nil, nonce, pt, ad)
		buf := make([]byte, n, n+Overhead)
		copy(buf, pt)
		if ct := got.Seal(buf[:0], nonce, buf, ad); !bytes.Equal(ct, wct) {
			t.Fatalf("len %d: in-place seal differs", n)
		}
		buf = buf[:n+Overhead]
		back, err := got.Open(buf[:0], nonce, buf, ad)
		if err != nil || !bytes.Equal(back, pt) {
			t.Fatalf("len %d: in-place open: %v", n, err)
		}
	}
}

func TestInexactOverlapPanics(t *testing.T) {
	requireWide(t)
	got, _ := pair(t, rand.NewChaCha8([32]byte{5}), true)
	buf := make([]byte, 4096)
	defer func() {
		if recover() == nil {
			t.Fatal("Seal into a shifted alias of its input did not panic")
		}
	}()
	got.Seal(buf[1:1], make([]byte, NonceSize), buf[:2048], nil)
}

// TestOpenRejectsEveryFlippedBit flips each bit of the ciphertext, tag and
// additional data in turn; each must fail and leave no plaintext behind.
func TestOpenRejectsEveryFlippedBit(t *testing.T) {
	requireWide(t)
	rng := rand.NewChaCha8([32]byte{6})
	got, _ := pair(t, rng, true)
	for _, n := range []int{0, 33, 1500} {
		nonce, ad, pt := randBytes(rng, NonceSize), randBytes(rng, 13), randBytes(rng, n)
		ct := got.Seal(nil, nonce, pt, ad)
		for _, b := range [][]byte{ct, ad} {
			for i := range len(b) * 8 {
				b[i/8] ^= 1 << (i % 8)
				out := make([]byte, 0, len(ct))
				res, err := got.Open(out, nonce, ct, ad)
				if err != ErrOpen || res != nil {
					t.Fatalf("len %d: bit %d flipped: Open = %v, %v", n, i, len(res), err)
				}
				if !bytes.Equal(out[:cap(out)], make([]byte, cap(out))) {
					t.Fatalf("len %d: bit %d flipped: plaintext left in dst", n, i)
				}
				b[i/8] ^= 1 << (i % 8)
			}
		}
		if _, err := got.Open(nil, nonce, ct, ad); err != nil {
			t.Fatalf("len %d: unflipped: %v", n, err)
		}
	}
}

// TestFallback checks the path every other CPU takes (and short inputs
// take here): New with the wide path off is crypto/cipher's GCM, and the
// default threshold hands short inputs to it.
func TestFallback(t *testing.T) {
	rng := rand.NewChaCha8([32]byte{7})
	for _, wide := range []bool{false, hasWide} {
		got, want := pair(t, rng, wide)
		if g, ok := got.(*aead); ok {
			g.minBulk = DefaultMinBulk
		}
		for _, n := range []int{0, 1, 100, DefaultMinBulk - 1, DefaultMinBulk, 70000} {
			check(t, got, want, randBytes(rng, NonceSize), randBytes(rng, n), randBytes(rng, 4))
		}
	}
	if g, err := New(make([]byte, 32)); err != nil || g.NonceSize() != NonceSize || g.Overhead() != Overhead {
		t.Fatalf("AES-256 key: %v", err)
	}
	if _, err := New(make([]byte, 5)); err == nil {
		t.Fatal("5-byte key accepted")
	}
}
