#include "textflag.h"

// Folding constants for CRC32C (the reflected polynomial 0x82F63B78): a
// 128-bit lane's low half is multiplied by (x^(D+32) mod P)'<<1 and its
// high half by (x^(D-32) mod P)'<<1, which moves the lane D bits on,
// where ' reverses 32 bits. D is 2048 (the main loop's 256 bytes), 512
// (one accumulator onto the next) and 128 (one lane onto the next).
// TestFoldConstants recomputes them.
DATA k2048<>+0(SB)/8, $0xdcb17aa4
DATA k2048<>+8(SB)/8, $0xb9e02b86
GLOBL k2048<>(SB), RODATA|NOPTR, $16

DATA k512<>+0(SB)/8, $0x740eef02
DATA k512<>+8(SB)/8, $0x9e4addf8
GLOBL k512<>(SB), RODATA|NOPTR, $16

DATA k128<>+0(SB)/8, $0xf20c0dfe
DATA k128<>+8(SB)/8, $0x14cd00bd6
GLOBL k128<>(SB), RODATA|NOPTR, $16

// func foldAVX512(state uint32, p []byte) uint32
//
// len(p) is at least 256 and a multiple of 16. The state is XORed into
// the first four bytes; each round multiplies the four accumulators'
// lanes 2048 bits on and XORs in the next 256 bytes; the accumulators
// then fold into one lane, the remaining 16-byte blocks fold into it, and
// two CRC32 instructions reduce its 128 bits, which the folds kept
// congruent to the whole buffer, to the register's 32.
TEXT ·foldAVX512(SB), NOSPLIT, $0-36
	MOVL state+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX

	VMOVDQU64 (SI), Z1
	VMOVDQU64 64(SI), Z2
	VMOVDQU64 128(SI), Z3
	VMOVDQU64 192(SI), Z4
	VMOVD     AX, X0
	VPXORQ    Z0, Z1, Z1
	ADDQ      $256, SI
	SUBQ      $256, CX

	VBROADCASTI32X4 k2048<>(SB), Z0
	CMPQ            CX, $256
	JB              combine

	PCALIGN $32
loop:
	VPCLMULQDQ $0x00, Z0, Z1, Z5
	VPCLMULQDQ $0x11, Z0, Z1, Z1
	VPCLMULQDQ $0x00, Z0, Z2, Z6
	VPCLMULQDQ $0x11, Z0, Z2, Z2
	VPCLMULQDQ $0x00, Z0, Z3, Z7
	VPCLMULQDQ $0x11, Z0, Z3, Z3
	VPCLMULQDQ $0x00, Z0, Z4, Z8
	VPCLMULQDQ $0x11, Z0, Z4, Z4
	VPTERNLOGD $0x96, (SI), Z5, Z1
	VPTERNLOGD $0x96, 64(SI), Z6, Z2
	VPTERNLOGD $0x96, 128(SI), Z7, Z3
	VPTERNLOGD $0x96, 192(SI), Z8, Z4
	ADDQ       $256, SI
	SUBQ       $256, CX
	CMPQ       CX, $256
	JAE        loop

combine:
	VBROADCASTI32X4 k512<>(SB), Z0
	VPCLMULQDQ      $0x00, Z0, Z1, Z5
	VPCLMULQDQ      $0x11, Z0, Z1, Z1
	VPTERNLOGD      $0x96, Z2, Z5, Z1
	VPCLMULQDQ      $0x00, Z0, Z1, Z5
	VPCLMULQDQ      $0x11, Z0, Z1, Z1
	VPTERNLOGD      $0x96, Z3, Z5, Z1
	VPCLMULQDQ      $0x00, Z0, Z1, Z5
	VPCLMULQDQ      $0x11, Z0, Z1, Z1
	VPTERNLOGD      $0x96, Z4, Z5, Z1

	VMOVDQU       k128<>(SB), X0
	VEXTRACTI32X4 $1, Z1, X2
	VEXTRACTI32X4 $2, Z1, X3
	VEXTRACTI32X4 $3, Z1, X4
	VPCLMULQDQ    $0x00, X0, X1, X5
	VPCLMULQDQ    $0x11, X0, X1, X1
	VPTERNLOGD    $0x96, X2, X5, X1
	VPCLMULQDQ    $0x00, X0, X1, X5
	VPCLMULQDQ    $0x11, X0, X1, X1
	VPTERNLOGD    $0x96, X3, X5, X1
	VPCLMULQDQ    $0x00, X0, X1, X5
	VPCLMULQDQ    $0x11, X0, X1, X1
	VPTERNLOGD    $0x96, X4, X5, X1

blocks:
	CMPQ       CX, $16
	JB         reduce
	VPCLMULQDQ $0x00, X0, X1, X5
	VPCLMULQDQ $0x11, X0, X1, X1
	VPTERNLOGD $0x96, (SI), X5, X1
	ADDQ       $16, SI
	SUBQ       $16, CX
	JMP        blocks

reduce:
	VMOVQ   X1, R8
	VPEXTRQ $1, X1, R9
	XORL    AX, AX
	CRC32Q  R8, AX
	CRC32Q  R9, AX
	MOVL    AX, ret+32(FP)
	VZEROUPPER
	RET
