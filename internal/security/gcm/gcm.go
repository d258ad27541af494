package gcm

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/fips140"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"unsafe"
)

const (
	// NonceSize and Overhead are those of crypto/cipher's standard GCM.
	NonceSize = 12
	Overhead  = 16

	// chunk is what one pass of the assembly loop seals or opens: 32
	// blocks, eight 512-bit registers of four blocks each, so that the
	// serial part of GHASH (adding the state in, summing the lanes,
	// reducing) comes once per 512 bytes.
	chunk = 512

	// DefaultMinBulk is the shortest plaintext the wide path takes;
	// below it crypto/cipher's GCM is faster (BenchmarkSealShort: 210
	// against 257 ns at 512 bytes, 365 against 283 at 1 KiB), because
	// the wide path's per-call cost (broadcasting 11 round keys, the tail
	// done a block at a time) is not yet paid back.
	DefaultMinBulk = 1024
)

// ErrOpen is returned by Open when the tag does not match; its text is
// crypto/cipher's, so callers that log it see the same message either way.
var ErrOpen = errors.New("cipher: message authentication failed")

// New returns an AES-GCM AEAD for key. A 16-byte key on a CPU with
// AVX512F, AVX512BW, AVX512VL, VAES and VPCLMULQDQ (and an OS that saves
// the 512-bit state) gets the wide path for inputs of at least
// DefaultMinBulk bytes; any other key or CPU, or a process in FIPS 140-3
// mode (GODEBUG=fips140=on), gets crypto/cipher's GCM itself.
func New(key []byte) (cipher.AEAD, error) {
	// In FIPS 140-3 mode only the validated module may encrypt.
	return newAEAD(key, DefaultMinBulk, hasWide && !fips140.Enabled())
}

func newAEAD(key []byte, minBulk int, wide bool) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	std, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	if !wide || len(key) != 16 {
		return std, nil
	}
	g := &aead{block: block, std: std, minBulk: minBulk}
	expandKey128(key, &g.rk)
	var h [16]byte
	block.Encrypt(h[:], h[:])
	powersOfH(&h, &g.htab)
	return g, nil
}

// aead is the wide path. Its GHASH state lives byte-reversed (the order
// in which PCLMULQDQ multiplies GCM's bit-reflected field elements), as do
// the powers of H, which also carry a factor x^-1 that cancels the one
// bit of shift a carry-less product of reflected operands is off by.
type aead struct {
	block   cipher.Block
	std     cipher.AEAD
	minBulk int
	rk      [11 * 16]byte // AES-128 round keys, in AES-NI's byte order
	htab    [32][16]byte  // htab[i] = H^(32-i) * x^-1, byte-reversed
}

func (g *aead) NonceSize() int { return NonceSize }
func (g *aead) Overhead() int  { return Overhead }

// begin returns the GHASH state after the additional data and the counter
// block of the first block of text (counter 2; 1 masks the tag).
func (g *aead) begin(nonce, ad []byte) (s, ctr [16]byte) {
	g.ghashPadded(&s, ad)
	copy(ctr[:], nonce)
	binary.BigEndian.PutUint32(ctr[12:], 2)
	return s, ctr
}

func (g *aead) Seal(dst, nonce, plaintext, ad []byte) []byte {
	if len(nonce) != NonceSize {
		panic("crypto/cipher: incorrect nonce length given to GCM")
	}
	if len(plaintext) < g.minBulk {
		return g.std.Seal(dst, nonce, plaintext, ad)
	}
	ret, out := sliceForAppend(dst, len(plaintext)+Overhead)
	if inexactOverlap(out, plaintext) {
		panic("crypto/cipher: invalid buffer overlap")
	}
	s, ctr := g.begin(nonce, ad)
	n := len(plaintext) / chunk
	if n > 0 {
		sealChunks(&g.rk, &ctr, &out[0], &plaintext[0], n, &s, &g.htab)
		binary.BigEndian.PutUint32(ctr[12:], 2+uint32(32*n))
	}
	done := n * chunk
	g.ctrTail(&ctr, out[done:len(plaintext)], plaintext[done:])
	g.ghashPadded(&s, out[done:len(plaintext)])
	g.finish(&s, nonce, len(ad), len(plaintext), out[len(plaintext):])
	return ret
}

func (g *aead) Open(dst, nonce, ciphertext, ad []byte) ([]byte, error) {
	if len(nonce) != NonceSize {
		panic("crypto/cipher: incorrect nonce length given to GCM")
	}
	if len(ciphertext) < Overhead {
		return nil, ErrOpen
	}
	if len(ciphertext)-Overhead < g.minBulk {
		return g.std.Open(dst, nonce, ciphertext, ad)
	}
	tag := ciphertext[len(ciphertext)-Overhead:]
	ciphertext = ciphertext[:len(ciphertext)-Overhead]
	ret, out := sliceForAppend(dst, len(ciphertext))
	if inexactOverlap(out, ciphertext) {
		panic("crypto/cipher: invalid buffer overlap")
	}
	s, ctr := g.begin(nonce, ad)
	n := len(ciphertext) / chunk
	if n > 0 {
		openChunks(&g.rk, &ctr, &out[0], &ciphertext[0], n, &s, &g.htab)
		binary.BigEndian.PutUint32(ctr[12:], 2+uint32(32*n))
	}
	done := n * chunk
	// Hash the tail before decrypting it: out may be ciphertext itself.
	g.ghashPadded(&s, ciphertext[done:])
	g.ctrTail(&ctr, out[done:], ciphertext[done:])
	var want [16]byte
	g.finish(&s, nonce, len(ad), len(ciphertext), want[:])
	if subtle.ConstantTimeCompare(want[:], tag) != 1 {
		clear(out)
		return nil, ErrOpen
	}
	return ret, nil
}

// ghashPadded folds b into the GHASH state, its last block zero-padded.
func (g *aead) ghashPadded(s *[16]byte, b []byte) {
	if full := len(b) &^ 15; full > 0 {
		ghashBlocks(s, &g.htab[31], &b[0], full/16)
		b = b[full:]
	}
	if len(b) > 0 {
		var last [16]byte
		copy(last[:], b)
		ghashBlocks(s, &g.htab[31], &last[0], 1)
	}
}

// ctrTail encrypts src (under 512 bytes) into dst in counter mode from ctr.
func (g *aead) ctrTail(ctr *[16]byte, dst, src []byte) {
	var ks [16]byte
	for len(src) > 0 {
		g.block.Encrypt(ks[:], ctr[:])
		binary.BigEndian.PutUint32(ctr[12:], binary.BigEndian.Uint32(ctr[12:])+1)
		n := subtle.XORBytes(dst, src, ks[:])
		dst, src = dst[n:], src[n:]
	}
}

// finish hashes the lengths block and writes E(K, J0) xor GHASH to tag.
func (g *aead) finish(s *[16]byte, nonce []byte, adLen, textLen int, tag []byte) {
	var lens [16]byte
	binary.BigEndian.PutUint64(lens[:8], uint64(adLen)*8)
	binary.BigEndian.PutUint64(lens[8:], uint64(textLen)*8)
	ghashBlocks(s, &g.htab[31], &lens[0], 1)
	var j0 [16]byte
	copy(j0[:], nonce)
	j0[15] = 1
	g.block.Encrypt(j0[:], j0[:])
	for i := range 16 {
		tag[i] = j0[i] ^ s[15-i]
	}
}

func sliceForAppend(in []byte, n int) (head, tail []byte) {
	if total := len(in) + n; cap(in) >= total {
		head = in[:total]
	} else {
		head = make([]byte, total)
		copy(head, in)
	}
	tail = head[len(in):]
	return
}

// inexactOverlap reports whether x and y share memory at different
// offsets, which crypto/cipher forbids (exact aliasing is allowed).
func inexactOverlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 || &x[0] == &y[0] {
		return false
	}
	xs, ys := uintptr(unsafe.Pointer(&x[0])), uintptr(unsafe.Pointer(&y[0]))
	return xs <= ys+uintptr(len(y)-1) && ys <= xs+uintptr(len(x)-1)
}
