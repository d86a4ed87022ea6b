//go:build amd64 && !purego

#include "textflag.h"

// x[i] *= s, 8 elements (two SSE registers) per step: MULPS is the scalar IEEE
// single-precision multiplication lane by lane, so the results are bit-identical to Go's.
// n is a multiple of 8.

// func scale8F32(x *float32, n int, s float32)
TEXT ·scale8F32(SB), NOSPLIT, $0-20
	MOVQ   x+0(FP), DI
	MOVQ   n+8(FP), CX
	MOVSS  s+16(FP), X4
	SHUFPS $0, X4, X4
	SHRQ   $3, CX
	JZ     done
loop:
	MOVUPS 0(DI), X0
	MOVUPS 16(DI), X1
	MULPS  X4, X0
	MULPS  X4, X1
	MOVUPS X0, 0(DI)
	MOVUPS X1, 16(DI)
	ADDQ   $32, DI
	DECQ   CX
	JNZ    loop
done:
	RET
