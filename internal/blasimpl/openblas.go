//go:build cgo && !purego

package blasimpl

// #cgo LDFLAGS: -lopenblas
// #include <stdlib.h>
// #if defined(__x86_64__)
// #include <cpuid.h>
// #endif
//
// int openblas_get_num_threads(void);
// char *openblas_get_corename(void);
//
// // The kernel table OpenBLAS chose at load time, and the function that chooses it; only
// // builds with DYNAMIC_ARCH (Debian's) have them, hence weak.
// extern void *gotoblas __attribute__((weak));
// extern void gotoblas_dynamic_init(void) __attribute__((weak));
//
// // gp_zen4 reports an AMD CPU of family 19h with AVX-512: Zen 4, whose AVX-512 units are
// // 256 bits wide, each 512-bit instruction issued as two halves (Zen 3, also family 19h,
// // has no AVX-512; Zen 5 is family 1Ah).
// static int gp_zen4(void) {
// #if !defined(__x86_64__)
// 	return 0; // cpuid is x86's: other CPUs keep OpenBLAS's choice
// #else
// 	unsigned a, b, c, d;
// 	if (!__get_cpuid(0, &a, &b, &c, &d) || b != 0x68747541 || d != 0x69746e65 || c != 0x444d4163) return 0;
// 	if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
// 	unsigned fam = (a >> 8) & 0xf;
// 	if (fam == 0xf) fam += (a >> 20) & 0xff;
// 	if (fam != 0x19) return 0;
// 	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
// 	return (b >> 16) & 1;
// #endif
// }
//
// // gp_intel reports a CPU whose vendor is Intel.
// static int gp_intel(void) {
// #if !defined(__x86_64__)
// 	return 0;
// #else
// 	unsigned a, b, c, d;
// 	return __get_cpuid(0, &a, &b, &c, &d) && b == 0x756e6547 && d == 0x49656e69 && c == 0x6c65746e;
// #endif
// }
//
// // gp_force_core makes OpenBLAS choose its kernels again, as OPENBLAS_CORETYPE=name would
// // have at load time. It must run before any BLAS call. It returns 0 when this OpenBLAS
// // cannot (a build for one architecture).
// static int gp_force_core(const char *name) {
// 	if (&gotoblas == NULL || gotoblas_dynamic_init == NULL) return 0;
// 	if (setenv("OPENBLAS_CORETYPE", name, 1) != 0) return 0;
// 	gotoblas = NULL;
// 	gotoblas_dynamic_init();
// 	unsetenv("OPENBLAS_CORETYPE");
// 	return 1;
// }
import "C"

import (
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/cpu"

	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/netlib/blas/netlib"
	G "gorgonia.org/gorgonia"
)

const name = "openblas"

func init() {
	chooseKernels()
	impl := netlib.Implementation{}
	blas32.Use(impl)
	blas64.Use(impl)
	G.Use(impl)
}

// chooseKernels switches OpenBLAS 0.3.21 from the AVX-512 kernels it picks on AMD Zen 4
// (Cooperlake or SkylakeX) to its AVX2 Haswell kernels, which are faster there: measured on
// a Zen 4 vCPU, sgemm at the GEMM shapes of ResNet's convolutions 5-8% faster (a·bᵀ with a
// long inner dimension 38%), training steps of resnet18 4.7% faster at one thread and 6.2%
// at two, resnet50 2.3%, swin_t 2.6%. An OPENBLAS_CORETYPE the user set wins, as does
// GP_OPENBLAS_KEEP_CORE=1.
//
// OpenBLAS 0.3.21 also knows a CPU only by its family and model, and falls back to its
// generic kernels (Prescott: SSE3) on one it does not know, whatever the CPU can do: an
// Intel Xeon of family 6, model 207 (a vCPU whose model name says only "Intel(R) Xeon(R)
// Processor") got Prescott, sgemm 17-18 GFLOP/s at one thread against 55-60 with Haswell and
// 95-102 with SkylakeX (512³), and resnet18's training step 1.6x faster with SkylakeX than
// with Haswell at one thread. So where OpenBLAS chose generic kernels, chooseKernels picks
// what it would have picked on a CPU it knows with the same features (see upgradeCore):
// SkylakeX on an Intel CPU with AVX-512, Haswell with AVX2 and FMA (AMD's included: Zen 4
// as above; a newer AMD CPU's 512-bit kernels are unmeasured), Sandybridge with AVX.
func chooseKernels() {
	if _, set := os.LookupEnv("OPENBLAS_CORETYPE"); set || os.Getenv("GP_OPENBLAS_KEEP_CORE") == "1" {
		return
	}
	if C.gp_zen4() != 0 {
		switch strings.ToLower(Core()) {
		case "cooperlake", "skylakex", "sapphirerapids":
			forceCore("Haswell")
		}
		return
	}
	f := features{
		avx512: C.gp_intel() != 0 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL,
		avx2:   cpu.X86.HasAVX2 && cpu.X86.HasFMA,
		avx:    cpu.X86.HasAVX,
	}
	if to := upgradeCore(Core(), f); to != "" {
		forceCore(to)
	}
}

// features are what the CPU, with the OS's support, can run, as upgradeCore weighs them.
type features struct {
	avx512 bool // an Intel CPU with AVX-512 F, BW, DQ and VL: OpenBLAS's SkylakeX kernels
	avx2   bool // AVX2 and FMA: Haswell's
	avx    bool // AVX: Sandybridge's
}

// upgradeCore returns the kernels to use instead of core, OpenBLAS's choice, when core is
// one of its generic ones and the CPU can run better ones; "" to keep core.
func upgradeCore(core string, f features) string {
	switch strings.ToLower(core) {
	case "prescott", "katmai", "coppermine", "northwood", "core2", "penryn", "dunnington", "nehalem", "atom":
	default:
		return ""
	}
	switch {
	case f.avx512:
		return "SkylakeX"
	case f.avx2:
		return "Haswell"
	case f.avx:
		return "Sandybridge"
	}
	return ""
}

// forceCore makes OpenBLAS use the named kernels (where its build can switch them).
func forceCore(name string) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	C.gp_force_core(cs)
}

// Threads reports the number of threads OpenBLAS uses (OPENBLAS_NUM_THREADS).
func Threads() int { return int(C.openblas_get_num_threads()) }

// Core reports the kernels OpenBLAS uses ("Haswell", "SkylakeX", ...).
func Core() string { return C.GoString(C.openblas_get_corename()) }

// Narrow reports whether OpenBLAS's float32 GEMM runs kernels narrower than the CPU's
// full-width AVX-512 units: the CPU has AVX-512 F, BW, DQ and VL, its 512-bit instructions
// are not issued as two halves (as Zen 4's are), and OpenBLAS uses kernels other than its
// AVX-512 ones (SkylakeX, Cooperlake, SapphireRapids): its Haswell (AVX2) kernels, chosen by
// OPENBLAS_CORETYPE or by OpenBLAS on a CPU it does not know, such as an AMD Zen 5. There the
// project's own AVX-512 kernels measured about twice OpenBLAS's GFLOP/s on every linear
// layer of swin_t and on resnet18's convolutions (nn/ops sends them every float32 product
// they can compute).
func Narrow() bool {
	full512 := cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL && !zen4()
	return narrowCore(Core(), full512)
}

// narrowCore is Narrow for OpenBLAS's kernels core on a CPU with (full512) or without
// full-width AVX-512.
func narrowCore(core string, full512 bool) bool {
	switch strings.ToLower(core) {
	case "skylakex", "cooperlake", "sapphirerapids":
		return false
	}
	return full512
}

// zen4 reports whether the CPU is an AMD Zen 4 (see chooseKernels).
func zen4() bool { return C.gp_zen4() != 0 }
