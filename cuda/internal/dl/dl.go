//go:build cgo

package dl

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

// gp_call calls f as a function of n integer-class arguments returning int.
// Every argument of the C APIs called through it (pointers, size_t, int,
// unsigned, enums) is of the INTEGER class in the x86-64 System V and AAPCS64
// calling conventions, so each travels in a general-purpose register or an
// 8-byte stack slot, and a callee declared with int parameters reads the low
// half of its slot. Floating-point arguments are never passed by value here
// (cuBLAS takes alpha and beta by pointer).
static int gp_call(void* f, const uintptr_t* a, int n) {
	typedef uintptr_t u;
	switch (n) {
	case 0: return ((int(*)(void))f)();
	case 1: return ((int(*)(u))f)(a[0]);
	case 2: return ((int(*)(u,u))f)(a[0],a[1]);
	case 3: return ((int(*)(u,u,u))f)(a[0],a[1],a[2]);
	case 4: return ((int(*)(u,u,u,u))f)(a[0],a[1],a[2],a[3]);
	case 5: return ((int(*)(u,u,u,u,u))f)(a[0],a[1],a[2],a[3],a[4]);
	case 6: return ((int(*)(u,u,u,u,u,u))f)(a[0],a[1],a[2],a[3],a[4],a[5]);
	case 7: return ((int(*)(u,u,u,u,u,u,u))f)(a[0],a[1],a[2],a[3],a[4],a[5],a[6]);
	case 8: return ((int(*)(u,u,u,u,u,u,u,u))f)(a[0],a[1],a[2],a[3],a[4],a[5],a[6],a[7]);
	case 9: return ((int(*)(u,u,u,u,u,u,u,u,u))f)(a[0],a[1],a[2],a[3],a[4],a[5],a[6],a[7],a[8]);
	case 10: return ((int(*)(u,u,u,u,u,u,u,u,u,u))f)(a[0],a[1],a[2],a[3],a[4],a[5],a[6],a[7],a[8],a[9]);
	case 11: return ((int(*)(u,u,u,u,u,u,u,u,u,u,u))f)(a[0],a[1],a[2],a[3],a[4],a[5],a[6],a[7],a[8],a[9],a[10]);
	case 12: return ((int(*)(u,u,u,u,u,u,u,u,u,u,u,u))f)(a[0],a[1],a[2],a[3],a[4],a[5],a[6],a[7],a[8],a[9],a[10],a[11]);
	case 13: return ((int(*)(u,u,u,u,u,u,u,u,u,u,u,u,u))f)(a[0],a[1],a[2],a[3],a[4],a[5],a[6],a[7],a[8],a[9],a[10],a[11],a[12]);
	case 14: return ((int(*)(u,u,u,u,u,u,u,u,u,u,u,u,u,u))f)(a[0],a[1],a[2],a[3],a[4],a[5],a[6],a[7],a[8],a[9],a[10],a[11],a[12],a[13]);
	case 15: return ((int(*)(u,u,u,u,u,u,u,u,u,u,u,u,u,u,u))f)(a[0],a[1],a[2],a[3],a[4],a[5],a[6],a[7],a[8],a[9],a[10],a[11],a[12],a[13],a[14]);
	case 16: return ((int(*)(u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u))f)(a[0],a[1],a[2],a[3],a[4],a[5],a[6],a[7],a[8],a[9],a[10],a[11],a[12],a[13],a[14],a[15]);
	case 17: return ((int(*)(u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u))f)(a[0],a[1],a[2],a[3],a[4],a[5],a[6],a[7],a[8],a[9],a[10],a[11],a[12],a[13],a[14],a[15],a[16]);
	case 18: return ((int(*)(u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u))f)(a[0],a[1],a[2],a[3],a[4],a[5],a[6],a[7],a[8],a[9],a[10],a[11],a[12],a[13],a[14],a[15],a[16],a[17]);
	case 19: return ((int(*)(u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u))f)(a[0],a[1],a[2],a[3],a[4],a[5],a[6],a[7],a[8],a[9],a[10],a[11],a[12],a[13],a[14],a[15],a[16],a[17],a[18]);
	case 20: return ((int(*)(u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u))f)(a[0],a[1],a[2],a[3],a[4],a[5],a[6],a[7],a[8],a[9],a[10],a[11],a[12],a[13],a[14],a[15],a[16],a[17],a[18],a[19]);
	case 21: return ((int(*)(u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u))f)(a[0],a[1],a[2],a[3],a[4],a[5],a[6],a[7],a[8],a[9],a[10],a[11],a[12],a[13],a[14],a[15],a[16],a[17],a[18],a[19],a[20]);
	case 22: return ((int(*)(u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u))f)(a[0],a[1],a[2],a[3],a[4],a[5],a[6],a[7],a[8],a[9],a[10],a[11],a[12],a[13],a[14],a[15],a[16],a[17],a[18],a[19],a[20],a[21]);
	case 23: return ((int(*)(u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u))f)(a[0],a[1],a[2],a[3],a[4],a[5],a[6],a[7],a[8],a[9],a[10],a[11],a[12],a[13],a[14],a[15],a[16],a[17],a[18],a[19],a[20],a[21],a[22]);
	case 24: return ((int(*)(u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u,u))f)(a[0],a[1],a[2],a[3],a[4],a[5],a[6],a[7],a[8],a[9],a[10],a[11],a[12],a[13],a[14],a[15],a[16],a[17],a[18],a[19],a[20],a[21],a[22],a[23]);
	}
	return -1;
}

// gp_call_str calls f as const char* f(int), the shape of every *GetErrorString.
static const char* gp_call_str(void* f, int code) { return ((const char*(*)(int))f)(code); }

// gp_call_id calls f as int f(uintptr_t, int, struct{char[128]}, int): ncclCommInitRank,
// whose ncclUniqueId travels by value (on the stack), which gp_call cannot express.
typedef struct { char internal[128]; } gp_id128;
static int gp_call_id(void* f, uintptr_t a0, int a1, const void* id, int a3) {
	gp_id128 v;
	for (int i = 0; i < 128; i++) v.internal[i] = ((const char*)id)[i];
	return ((int(*)(uintptr_t, int, gp_id128, int))f)(a0, a1, v, a3);
}
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"
)

// Available reports whether this build can load libraries (it was built with cgo).
const Available = true

// Open tries each candidate path (or bare soname) in order and returns the first that loads.
// Libraries are opened RTLD_NOW|RTLD_GLOBAL so that a later library (libcublas) finds an
// earlier one (libcublasLt) by soname.
func Open(candidates []string) (*Lib, error) {
	var errs []string
	for _, p := range candidates {
		cs := C.CString(p)
		h := C.dlopen(cs, C.RTLD_NOW|C.RTLD_GLOBAL)
		C.free(unsafe.Pointer(cs))
		if h != nil {
			return &Lib{Path: p, handle: h}, nil
		}
		errs = append(errs, C.GoString(C.dlerror()))
	}
	if len(candidates) == 0 {
		return nil, fmt.Errorf("dlopen: no candidate paths")
	}
	return nil, fmt.Errorf("dlopen failed for all %d candidates:\n  %s\n  %s", len(candidates), strings.Join(errs, "\n  "), Searched(candidates))
}

// Sym resolves a symbol by name (its default version).
func (l *Lib) Sym(name string) (Func, error) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	C.dlerror()
	p := C.dlsym(l.handle, cs)
	if p == nil {
		return nil, fmt.Errorf("%s: dlsym %s: %s", l.Path, name, C.GoString(C.dlerror()))
	}
	return Func(p), nil
}

// Call calls f with integer-class arguments (pointers as uintptr, sizes, ints, enums) and
// returns its int result (CUresult, cublasStatus_t, ncclResult_t). At most 24 arguments.
// Memory that an argument points to must be C memory or Go heap memory kept alive by the
// caller (runtime.KeepAlive) until Call returns.
func Call(f Func, args ...uintptr) int {
	if f == nil || len(args) > 24 {
		return -1
	}
	var a *C.uintptr_t
	if len(args) > 0 {
		a = (*C.uintptr_t)(unsafe.Pointer(&args[0]))
	}
	return int(C.gp_call(unsafe.Pointer(f), a, C.int(len(args))))
}

// CallString calls f as `const char* f(int)` and returns the string ("" for NULL or nil f).
func CallString(f Func, code int) string {
	if f == nil {
		return ""
	}
	s := C.gp_call_str(unsafe.Pointer(f), C.int(code))
	if s == nil {
		return ""
	}
	return C.GoString(s)
}

// CallID calls f as `int f(uintptr_t a0, int a1, struct{char[128]} id, int a3)`: the shape of
// ncclCommInitRank, whose 128-byte unique id is passed by value.
func CallID(f Func, a0 uintptr, a1 int, id *[128]byte, a3 int) int {
	if f == nil {
		return -1
	}
	return int(C.gp_call_id(unsafe.Pointer(f), C.uintptr_t(a0), C.int(a1), unsafe.Pointer(&id[0]), C.int(a3)))
}
