package cudatest

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/gorgonia-parallel/gp/cuda/kernels"
)

// Libs are the paths of the fake libraries and of the kernel emulator (empty unless asked
// for), as Build and BuildEmulator make them.
type Libs struct {
	Cuda, NCCL, Cublas, Cudnn string
	Emulator                  string
}

// Env is the environment that loads l: CUDA_DRIVER_LIBRARY, NCCL_LIBRARY, CUBLAS_LIBRARY,
// CUDNN_LIBRARY and, when l has the emulator, $GP_FAKE_KERNELS.
func (l Libs) Env() map[string]string {
	env := map[string]string{"CUDA_DRIVER_LIBRARY": l.Cuda, "NCCL_LIBRARY": l.NCCL, "CUBLAS_LIBRARY": l.Cublas, "CUDNN_LIBRARY": l.Cudnn}
	if l.Emulator != "" {
		env[EmulatorVar] = l.Emulator
	}
	return env
}

// Cached returns the fake libraries (Build) and, with emulator, the kernel emulator
// (BuildEmulator), built once per machine for these sources and compilers: in a folder of
// the user's cache directory (os.UserCacheDir, under gorgonia-parallel/cudatest) named by a
// hash of every source, the compilers' paths and their modification times. A folder that
// another process is filling is never read: each build goes to a temporary folder that is
// renamed into place whole, and no folder is ever removed. Where the cache directory cannot
// be written, or its folder for this key lost a file, Cached builds into a new temporary
// folder, which the caller removes when done (temp names it; "" for the cache). Errors
// are Build's and BuildEmulator's (a missing compiler wraps exec.ErrNotFound).
func Cached(emulator bool) (libs Libs, temp string, err error) {
	key, err := cacheKey(emulator)
	if err != nil {
		return Libs{}, "", err
	}
	build := func(dir string) (Libs, error) {
		l := libsIn(dir, emulator)
		if _, _, err := Build(dir); err != nil {
			return Libs{}, err
		}
		if emulator {
			if _, err := BuildEmulator(dir); err != nil {
				return Libs{}, err
			}
		}
		return l, nil
	}
	root, err := os.UserCacheDir()
	if err == nil {
		root = filepath.Join(root, "gorgonia-parallel", "cudatest")
		err = os.MkdirAll(root, 0o755)
	}
	if err != nil {
		dir, err := os.MkdirTemp("", "cudatest")
		if err != nil {
			return Libs{}, "", fmt.Errorf("cudatest: %w", err)
		}
		l, err := build(dir)
		return l, dir, err
	}
	final := filepath.Join(root, key)
	if complete(final, emulator) {
		return libsIn(final, emulator), "", nil
	}
	tmp, err := os.MkdirTemp(root, "building-")
	if err != nil {
		return Libs{}, "", fmt.Errorf("cudatest: %w", err)
	}
	if _, err := build(tmp); err != nil {
		os.RemoveAll(tmp)
		return Libs{}, "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		if complete(final, emulator) { // another process put its build there first
			os.RemoveAll(tmp)
			return libsIn(final, emulator), "", nil
		}
		// A folder that lost a library: it is never removed here (a process may be loading
		// from it), so this build serves from its temporary folder.
		return libsIn(tmp, emulator), tmp, nil
	}
	return libsIn(final, emulator), "", nil
}

// libsIn names the libraries Build and BuildEmulator write into dir.
func libsIn(dir string, emulator bool) Libs {
	l := Libs{Cuda: filepath.Join(dir, "libcuda.so.1"), NCCL: filepath.Join(dir, "libnccl.so.2"),
		Cublas: filepath.Join(dir, "libcublas.so.12"), Cudnn: filepath.Join(dir, "libcudnn.so.9")}
	if emulator {
		l.Emulator = filepath.Join(dir, "libkernels_emu.so")
	}
	return l
}

// complete reports whether dir holds every library libsIn names.
func complete(dir string, emulator bool) bool {
	l := libsIn(dir, emulator)
	for _, p := range []string{l.Cuda, l.NCCL, l.Cublas, l.Cudnn, l.Emulator} {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
			return false
		}
	}
	return true
}

// cacheKey hashes what the libraries are built from: the sources, and the compilers ($CC or
// cc, and with the emulator $CXX or c++) by path and modification time. A missing compiler
// is Build's error.
func cacheKey(emulator bool) (string, error) {
	h := sha256.New()
	srcs := []string{fakeCuda, fakeNCCL, fakeCublas, fakeCudnn, fakeStreams}
	tools := []string{cmp.Or(os.Getenv("CC"), "cc")}
	if emulator {
		srcs = append(srcs, emuHeader, emuSched, kernels.Source)
		tools = append(tools, cmp.Or(os.Getenv("CXX"), "c++"))
	}
	for _, s := range srcs {
		fmt.Fprintf(h, "%d\x00%s\x00", len(s), s)
	}
	for i, t := range tools {
		p, err := exec.LookPath(t)
		if err != nil {
			what := "C compiler to build the fake GPU libraries"
			if i > 0 {
				what = "C++ compiler for the kernel emulator"
			}
			return "", fmt.Errorf("cudatest: no %s: %w", what, err)
		}
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		var mod int64
		if fi, err := os.Stat(p); err == nil {
			mod = fi.ModTime().UnixNano()
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("cudatest: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, mod)
	}
	return hex.EncodeToString(h.Sum(nil))[:24], nil
}
