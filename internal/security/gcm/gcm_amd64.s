#include "textflag.h"

// Register plan of sealChunks and openChunks, which take 512-byte chunks
// (32 blocks) a pass:
//   Z0-Z3   four blocks each: counters, then keystream
//   Z4-Z7, Z12, Z13, Z29, Z30: 32 byte-reversed blocks of ciphertext for GHASH
//   Z8, Z9, Z11 GHASH's unreduced low, middle and high sums; Z10 scratch
//   X14     the GHASH state; X15 the reduction constant
//   Z16-Z26 the 11 round keys, each broadcast to all four lanes
//   Z27     the next four counters, byte-reversed (the counter in dword 0,
//           so VPADDD steps it modulo 2^32 as GCM's inc32 does)
//   Z28     4 in each lane's dword 0; Z31 the byte-reversal mask
// The 32 powers of H (times x^-1, byte-reversed; H^32 first) stay in
// memory at R8 and are read as operands of VPCLMULQDQ.

DATA bswapMask<>+0(SB)/8, $0x08090a0b0c0d0e0f
DATA bswapMask<>+8(SB)/8, $0x0001020304050607
GLOBL bswapMask<>(SB), (NOPTR+RODATA), $16

// x^63 + x^62 + x^57 in the high quadword, 1 in the low: multiplying a
// quadword by the high half and swapping quadwords folds 64 bits of a
// reflected product down by 64 bits modulo x^128 + x^7 + x^2 + x + 1.
DATA gfPoly<>+0(SB)/8, $0x0000000000000001
DATA gfPoly<>+8(SB)/8, $0xc200000000000000
GLOBL gfPoly<>(SB), (NOPTR+RODATA), $16

DATA ctrInit<>+0(SB)/8, $0
DATA ctrInit<>+8(SB)/8, $0
DATA ctrInit<>+16(SB)/8, $1
DATA ctrInit<>+24(SB)/8, $0
DATA ctrInit<>+32(SB)/8, $2
DATA ctrInit<>+40(SB)/8, $0
DATA ctrInit<>+48(SB)/8, $3
DATA ctrInit<>+56(SB)/8, $0
GLOBL ctrInit<>(SB), (NOPTR+RODATA), $64

DATA inc4<>+0(SB)/8, $4
DATA inc4<>+8(SB)/8, $0
GLOBL inc4<>(SB), (NOPTR+RODATA), $16

#define SETUP \
	VBROADCASTI32X4 bswapMask<>(SB), Z31 \
	VMOVDQU gfPoly<>(SB), X15 \
	VBROADCASTI32X4 0(AX), Z16 \
	VBROADCASTI32X4 16(AX), Z17 \
	VBROADCASTI32X4 32(AX), Z18 \
	VBROADCASTI32X4 48(AX), Z19 \
	VBROADCASTI32X4 64(AX), Z20 \
	VBROADCASTI32X4 80(AX), Z21 \
	VBROADCASTI32X4 96(AX), Z22 \
	VBROADCASTI32X4 112(AX), Z23 \
	VBROADCASTI32X4 128(AX), Z24 \
	VBROADCASTI32X4 144(AX), Z25 \
	VBROADCASTI32X4 160(AX), Z26 \
	VBROADCASTI32X4 (BX), Z27 \
	VPSHUFB Z31, Z27, Z27 \
	VPADDD ctrInit<>(SB), Z27, Z27 \
	VBROADCASTI32X4 inc4<>(SB), Z28 \
	VMOVDQU (DX), X14

#define ROUND(k) \
	VAESENC k, Z0, Z0 \
	VAESENC k, Z1, Z1 \
	VAESENC k, Z2, Z2 \
	VAESENC k, Z3, Z3

// KEYSTREAM leaves E(K, counter) for the next 16 counters in Z0-Z3.
#define KEYSTREAM \
	VPSHUFB Z31, Z27, Z0 \
	VPADDD Z28, Z27, Z27 \
	VPSHUFB Z31, Z27, Z1 \
	VPADDD Z28, Z27, Z27 \
	VPSHUFB Z31, Z27, Z2 \
	VPADDD Z28, Z27, Z27 \
	VPSHUFB Z31, Z27, Z3 \
	VPADDD Z28, Z27, Z27 \
	VPXORD Z16, Z0, Z0 \
	VPXORD Z16, Z1, Z1 \
	VPXORD Z16, Z2, Z2 \
	VPXORD Z16, Z3, Z3 \
	ROUND(Z17) \
	ROUND(Z18) \
	ROUND(Z19) \
	ROUND(Z20) \
	ROUND(Z21) \
	ROUND(Z22) \
	ROUND(Z23) \
	ROUND(Z24) \
	ROUND(Z25) \
	VAESENCLAST Z26, Z0, Z0 \
	VAESENCLAST Z26, Z1, Z1 \
	VAESENCLAST Z26, Z2, Z2 \
	VAESENCLAST Z26, Z3, Z3

// MULACC adds the three partial products of data d by powers h (lane by
// lane) into Z8 (low), Z9 (middle) and Z11 (high), unreduced.
#define MULACC(d, h) \
	VPCLMULQDQ $0x00, h, d, Z10 \
	VPXORD Z10, Z8, Z8 \
	VPCLMULQDQ $0x01, h, d, Z10 \
	VPXORD Z10, Z9, Z9 \
	VPCLMULQDQ $0x10, h, d, Z10 \
	VPXORD Z10, Z9, Z9 \
	VPCLMULQDQ $0x11, h, d, Z10 \
	VPXORD Z10, Z11, Z11

// FOLDLANES xors the four lanes of zmm r into its low lane (xmm x).
#define FOLDLANES(r, y, x) \
	VEXTRACTI64X4 $1, r, Y10 \
	VPXOR Y10, y, y \
	VEXTRACTI128 $1, y, X10 \
	VPXOR X10, x, x

// REDUCE reduces the 256-bit product X11:X9:X8 (high, middle, low) into
// the GHASH state X14, folding the low 128 bits up in two 64-bit steps.
#define REDUCE \
	VPCLMULQDQ $0x01, X8, X15, X10 \
	VPSHUFD $0x4e, X8, X8 \
	VPXOR X8, X9, X9 \
	VPXOR X10, X9, X9 \
	VPCLMULQDQ $0x01, X9, X15, X10 \
	VPSHUFD $0x4e, X9, X9 \
	VPXOR X9, X11, X11 \
	VPXOR X10, X11, X14

// GHASH32 folds the 32 byte-reversed blocks in Z4-Z7, Z12, Z13, Z29,
// Z30 into X14: the state joins the first block, each block is multiplied
// by its own power of H, and the sum is reduced once.
#define GHASH32 \
	VPXORD Z14, Z4, Z4 \
	VPCLMULQDQ $0x00, 0(R8), Z4, Z8 \
	VPCLMULQDQ $0x01, 0(R8), Z4, Z9 \
	VPCLMULQDQ $0x10, 0(R8), Z4, Z10 \
	VPCLMULQDQ $0x11, 0(R8), Z4, Z11 \
	VPXORD Z10, Z9, Z9 \
	MULACC(Z5, 64(R8)) \
	MULACC(Z6, 128(R8)) \
	MULACC(Z7, 192(R8)) \
	MULACC(Z12, 256(R8)) \
	MULACC(Z13, 320(R8)) \
	MULACC(Z29, 384(R8)) \
	MULACC(Z30, 448(R8)) \
	FOLDLANES(Z8, Y8, X8) \
	FOLDLANES(Z9, Y9, X9) \
	FOLDLANES(Z11, Y11, X11) \
	REDUCE

// XORSTORE xors the keystream in Z0-Z3 with 256 bytes at SI and stores
// the result at DI.
#define XORSTORE \
	VPXORD 0(SI), Z0, Z0 \
	VPXORD 64(SI), Z1, Z1 \
	VPXORD 128(SI), Z2, Z2 \
	VPXORD 192(SI), Z3, Z3 \
	VMOVDQU64 Z0, 0(DI) \
	VMOVDQU64 Z1, 64(DI) \
	VMOVDQU64 Z2, 128(DI) \
	VMOVDQU64 Z3, 192(DI) \
	ADDQ $256, SI \
	ADDQ $256, DI

// STORECT is XORSTORE that also keeps the result (the ciphertext)
// byte-reversed in a, b, c, d for GHASH.
#define STORECT(a, b, c, d) \
	XORSTORE \
	VPSHUFB Z31, Z0, a \
	VPSHUFB Z31, Z1, b \
	VPSHUFB Z31, Z2, c \
	VPSHUFB Z31, Z3, d

// LOADCT loads 256 bytes of ciphertext at SI byte-reversed into a, b, c, d.
#define LOADCT(a, b, c, d, off) \
	VMOVDQU64 off+0(SI), a \
	VMOVDQU64 off+64(SI), b \
	VMOVDQU64 off+128(SI), c \
	VMOVDQU64 off+192(SI), d \
	VPSHUFB Z31, a, a \
	VPSHUFB Z31, b, b \
	VPSHUFB Z31, c, c \
	VPSHUFB Z31, d, d


// CHUNKARGS loads sealChunks' and openChunks' arguments (the same for
// both) and runs SETUP.
#define CHUNKARGS \
	MOVQ rk+0(FP), AX \
	MOVQ ctr+8(FP), BX \
	MOVQ dst+16(FP), DI \
	MOVQ src+24(FP), SI \
	MOVQ n+32(FP), CX \
	MOVQ s+40(FP), DX \
	MOVQ htab+48(FP), R8 \
	SETUP

// func sealChunks(rk *[176]byte, ctr *[16]byte, dst, src *byte, n int, s *[16]byte, htab *[16][16]byte)
TEXT ·sealChunks(SB), NOSPLIT, $0-56
	CHUNKARGS

	// The loop hashes the previous chunk's ciphertext while it encrypts
	// this one, so that GHASH never waits on the AES rounds it follows;
	// the first chunk is only encrypted, the last only hashed.
	KEYSTREAM
	STORECT(Z4, Z5, Z6, Z7)
	KEYSTREAM
	STORECT(Z12, Z13, Z29, Z30)
	DECQ CX
	JZ sealLast

sealLoop:
	KEYSTREAM
	GHASH32
	STORECT(Z4, Z5, Z6, Z7)
	KEYSTREAM
	STORECT(Z12, Z13, Z29, Z30)
	DECQ CX
	JNZ sealLoop

sealLast:
	GHASH32
	VMOVDQU X14, (DX)
	VZEROUPPER
	RET

// func openChunks(rk *[176]byte, ctr *[16]byte, dst, src *byte, n int, s *[16]byte, htab *[16][16]byte)
TEXT ·openChunks(SB), NOSPLIT, $0-56
	CHUNKARGS

openLoop:
	// Hash the ciphertext first: dst may be src, and the plaintext
	// overwrites it below.
	LOADCT(Z4, Z5, Z6, Z7, 0)
	LOADCT(Z12, Z13, Z29, Z30, 256)
	GHASH32
	KEYSTREAM
	XORSTORE
	KEYSTREAM
	XORSTORE
	DECQ CX
	JNZ openLoop

	VMOVDQU X14, (DX)
	VZEROUPPER
	RET

// func ghashBlocks(s *[16]byte, h *[16]byte, b *byte, n int)
TEXT ·ghashBlocks(SB), NOSPLIT, $0-32
	MOVQ s+0(FP), DX
	MOVQ h+8(FP), AX
	MOVQ b+16(FP), SI
	MOVQ n+24(FP), CX
	VMOVDQU bswapMask<>(SB), X13
	VMOVDQU gfPoly<>(SB), X15
	VMOVDQU (AX), X4
	VMOVDQU (DX), X14

ghashLoop:
	VMOVDQU (SI), X0
	VPSHUFB X13, X0, X0
	VPXOR X14, X0, X0
	VPCLMULQDQ $0x00, X4, X0, X8
	VPCLMULQDQ $0x01, X4, X0, X9
	VPCLMULQDQ $0x10, X4, X0, X10
	VPCLMULQDQ $0x11, X4, X0, X11
	VPXOR X10, X9, X9
	REDUCE
	ADDQ $16, SI
	DECQ CX
	JNZ ghashLoop

	VMOVDQU X14, (DX)
	VZEROUPPER
	RET
