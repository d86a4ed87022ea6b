//go:build amd64 && !purego

#include "textflag.h"

// func plusZeroNT128(dst, src *float32, n int)
// Sets dst[i] = src[i] + 0 for n bytes (a multiple of 128; dst 16-byte aligned) with ADDPS
// and non-temporal stores (MOVNTDQ), then SFENCE so that the stores are ordered before
// whatever the caller publishes next.
TEXT ·plusZeroNT128(SB), NOSPLIT, $0-24
	MOVQ  dst+0(FP), DI
	MOVQ  src+8(FP), SI
	MOVQ  n+16(FP), CX
	SHRQ  $7, CX
	JZ    done
	XORPS X8, X8

loop:
	MOVUPS 0(SI), X0
	MOVUPS 16(SI), X1
	MOVUPS 32(SI), X2
	MOVUPS 48(SI), X3
	MOVUPS 64(SI), X4
	MOVUPS 80(SI), X5
	MOVUPS 96(SI), X6
	MOVUPS 112(SI), X7
	ADDPS  X8, X0
	ADDPS  X8, X1
	ADDPS  X8, X2
	ADDPS  X8, X3
	ADDPS  X8, X4
	ADDPS  X8, X5
	ADDPS  X8, X6
	ADDPS  X8, X7
	MOVNTO X0, 0(DI)
	MOVNTO X1, 16(DI)
	MOVNTO X2, 32(DI)
	MOVNTO X3, 48(DI)
	MOVNTO X4, 64(DI)
	MOVNTO X5, 80(DI)
	MOVNTO X6, 96(DI)
	MOVNTO X7, 112(DI)
	ADDQ   $128, SI
	ADDQ   $128, DI
	DECQ   CX
	JNZ    loop
	SFENCE

done:
	RET
