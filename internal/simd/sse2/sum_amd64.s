//go:build amd64 && !purego

#include "textflag.h"

// The fused float32 sums of reduceN, 8 elements (two SSE registers) per step. Each lane adds
// in the order of the scalar code, ((x0+x1)+x2)+x3, with the same IEEE single-precision
// additions, so the results are bit-identical to it. n is a multiple of 8; o may alias an
// input element for element.

// func sum2F32(o, x0, x1 *float32, n int)
TEXT ·sum2F32(SB), NOSPLIT, $0-32
	MOVQ o+0(FP), DI
	MOVQ x0+8(FP), SI
	MOVQ x1+16(FP), R8
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	JZ   done2
loop2:
	MOVUPS 0(SI), X0
	MOVUPS 16(SI), X1
	MOVUPS 0(R8), X2
	MOVUPS 16(R8), X3
	ADDPS  X2, X0
	ADDPS  X3, X1
	MOVUPS X0, 0(DI)
	MOVUPS X1, 16(DI)
	ADDQ   $32, SI
	ADDQ   $32, R8
	ADDQ   $32, DI
	DECQ   CX
	JNZ    loop2
done2:
	RET

// func sum3F32(o, x0, x1, x2 *float32, n int)
TEXT ·sum3F32(SB), NOSPLIT, $0-40
	MOVQ o+0(FP), DI
	MOVQ x0+8(FP), SI
	MOVQ x1+16(FP), R8
	MOVQ x2+24(FP), R9
	MOVQ n+32(FP), CX
	SHRQ $3, CX
	JZ   done3
loop3:
	MOVUPS 0(SI), X0
	MOVUPS 16(SI), X1
	MOVUPS 0(R8), X2
	MOVUPS 16(R8), X3
	ADDPS  X2, X0
	ADDPS  X3, X1
	MOVUPS 0(R9), X2
	MOVUPS 16(R9), X3
	ADDPS  X2, X0
	ADDPS  X3, X1
	MOVUPS X0, 0(DI)
	MOVUPS X1, 16(DI)
	ADDQ   $32, SI
	ADDQ   $32, R8
	ADDQ   $32, R9
	ADDQ   $32, DI
	DECQ   CX
	JNZ    loop3
done3:
	RET

// func sum4F32(o, x0, x1, x2, x3 *float32, n int)
TEXT ·sum4F32(SB), NOSPLIT, $0-48
	MOVQ o+0(FP), DI
	MOVQ x0+8(FP), SI
	MOVQ x1+16(FP), R8
	MOVQ x2+24(FP), R9
	MOVQ x3+32(FP), R10
	MOVQ n+40(FP), CX
	SHRQ $3, CX
	JZ   done4
loop4:
	MOVUPS 0(SI), X0
	MOVUPS 16(SI), X1
	MOVUPS 0(R8), X2
	MOVUPS 16(R8), X3
	ADDPS  X2, X0
	ADDPS  X3, X1
	MOVUPS 0(R9), X2
	MOVUPS 16(R9), X3
	ADDPS  X2, X0
	ADDPS  X3, X1
	MOVUPS 0(R10), X2
	MOVUPS 16(R10), X3
	ADDPS  X2, X0
	ADDPS  X3, X1
	MOVUPS X0, 0(DI)
	MOVUPS X1, 16(DI)
	ADDQ   $32, SI
	ADDQ   $32, R8
	ADDQ   $32, R9
	ADDQ   $32, R10
	ADDQ   $32, DI
	DECQ   CX
	JNZ    loop4
done4:
	RET
