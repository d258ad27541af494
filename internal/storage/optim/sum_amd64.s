#include "textflag.h"

DATA expmask<>+0(SB)/4, $0x7f800000
GLOBL expmask<>(SB), RODATA|NOPTR, $4

// SUMS loads the 32 floats of v at DI+AX and adds those of g at SI+AX,
// into Y0-Y3.
#define SUMS \
	VMOVUPS 0(DI)(AX*1), Y0; \
	VMOVUPS 32(DI)(AX*1), Y1; \
	VMOVUPS 64(DI)(AX*1), Y2; \
	VMOVUPS 96(DI)(AX*1), Y3; \
	VADDPS 0(SI)(AX*1), Y0, Y0; \
	VADDPS 32(SI)(AX*1), Y1, Y1; \
	VADDPS 64(SI)(AX*1), Y2, Y2; \
	VADDPS 96(SI)(AX*1), Y3, Y3

// func sumAVX2(v, g []float32) bool
//
// len(v) is a multiple of 32 and len(g) >= len(v). The first pass adds
// without storing and ORs together a lane mask of every sum whose exponent
// is all ones (Inf or NaN); only if none is, the second pass adds and stores.
// Four independent registers a round keep the adds' latency hidden.
TEXT ·sumAVX2(SB), NOSPLIT, $0-49
	MOVQ v_base+0(FP), DI
	MOVQ v_len+8(FP), BX
	MOVQ g_base+24(FP), SI
	SHLQ $2, BX
	VPBROADCASTD expmask<>(SB), Y15
	VPXOR Y14, Y14, Y14
	XORQ AX, AX

check:
	CMPQ AX, BX
	JAE  checked
	SUMS
	VPAND Y15, Y0, Y0
	VPAND Y15, Y1, Y1
	VPAND Y15, Y2, Y2
	VPAND Y15, Y3, Y3
	VPCMPEQD Y15, Y0, Y0
	VPCMPEQD Y15, Y1, Y1
	VPCMPEQD Y15, Y2, Y2
	VPCMPEQD Y15, Y3, Y3
	VPOR Y0, Y1, Y1
	VPOR Y2, Y3, Y3
	VPOR Y1, Y14, Y14
	VPOR Y3, Y14, Y14
	ADDQ $128, AX
	JMP  check

checked:
	VPTEST Y14, Y14
	JNZ    refuse
	XORQ   AX, AX

commit:
	CMPQ AX, BX
	JAE  done
	SUMS
	VMOVUPS Y0, 0(DI)(AX*1)
	VMOVUPS Y1, 32(DI)(AX*1)
	VMOVUPS Y2, 64(DI)(AX*1)
	VMOVUPS Y3, 96(DI)(AX*1)
	ADDQ $128, AX
	JMP  commit

done:
	VZEROUPPER
	MOVB $1, ret+48(FP)
	RET

refuse:
	VZEROUPPER
	MOVB $0, ret+48(FP)
	RET

// func sumRunAVX2(v, g []float32) int
//
// len(g) >= len(v). Adds g to v one round of 32 floats at a time, in one
// pass, while every sum of a round is finite, and returns how many floats
// it added: the whole rounds of v, or the offset of the first round with
// an Inf or NaN sum, which it leaves untouched, as it does the floats
// short of a round at the end.
TEXT ·sumRunAVX2(SB), NOSPLIT, $0-56
	MOVQ v_base+0(FP), DI
	MOVQ v_len+8(FP), BX
	MOVQ g_base+24(FP), SI
	ANDQ $-32, BX
	SHLQ $2, BX
	VPBROADCASTD expmask<>(SB), Y15
	XORQ AX, AX

round:
	CMPQ AX, BX
	JAE  ended
	SUMS
	VPAND    Y15, Y0, Y4
	VPAND    Y15, Y1, Y5
	VPAND    Y15, Y2, Y6
	VPAND    Y15, Y3, Y7
	VPCMPEQD Y15, Y4, Y4
	VPCMPEQD Y15, Y5, Y5
	VPCMPEQD Y15, Y6, Y6
	VPCMPEQD Y15, Y7, Y7
	VPOR     Y4, Y5, Y5
	VPOR     Y6, Y7, Y7
	VPOR     Y5, Y7, Y7
	VPTEST   Y7, Y7
	JNZ      ended
	VMOVUPS  Y0, 0(DI)(AX*1)
	VMOVUPS  Y1, 32(DI)(AX*1)
	VMOVUPS  Y2, 64(DI)(AX*1)
	VMOVUPS  Y3, 96(DI)(AX*1)
	ADDQ     $128, AX
	JMP      round

ended:
	SHRQ $2, AX
	VZEROUPPER
	MOVQ AX, ret+48(FP)
	RET
