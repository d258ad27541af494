package gcm

import "golang.org/x/sys/cpu"

// hasWide reports whether the wide path can run: x/sys/cpu sets these only
// when the OS also saves the 512-bit registers (XCR0's opmask and ZMM
// bits).
var hasWide = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL &&
	cpu.X86.HasAVX512VAES && cpu.X86.HasAVX512VPCLMULQDQ

// sealChunks encrypts n 512-byte chunks of src into dst in counter mode
// from the big-endian counter block ctr and folds the ciphertext into the
// byte-reversed GHASH state s.
//
//go:noescape
func sealChunks(rk *[11 * 16]byte, ctr *[16]byte, dst, src *byte, n int, s *[16]byte, htab *[32][16]byte)

// openChunks is sealChunks' inverse: it folds the ciphertext src into s,
// then decrypts it into dst (which may be src itself).
//
//go:noescape
func openChunks(rk *[11 * 16]byte, ctr *[16]byte, dst, src *byte, n int, s *[16]byte, htab *[32][16]byte)

// ghashBlocks folds n 16-byte blocks at b into s, one at a time, by h
// (H * x^-1, byte-reversed).
//
//go:noescape
func ghashBlocks(s *[16]byte, h *[16]byte, b *byte, n int)
