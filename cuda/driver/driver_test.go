package driver

import (
	"errors"
	"os"
	"testing"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/cuda/internal/dl"
)

func TestMain(m *testing.M) { os.Exit(cudatest.Main(m)) }

func TestNoCgoError(t *testing.T) {
	if dl.Available {
		t.Skip("built with cgo")
	}
	err := Load()
	if !errors.Is(err, dl.ErrNoCgo) {
		t.Fatalf("Load = %v, want ErrNoCgo", err)
	}
}

// The fake driver checks the whole path: dlopen by env var, symbol table, argument passing,
// out-parameters, error strings.
func TestFakeDriver(t *testing.T) {
	cudatest.Require(t)
	if err := Load(); err != nil {
		t.Fatal(err)
	}
	if v, err := DriverVersion(); err != nil || v != 12040 {
		t.Fatalf("DriverVersion = %d, %v", v, err)
	}
	n, err := DeviceCount()
	if err != nil || n != 1 {
		t.Fatalf("DeviceCount = %d, %v", n, err)
	}
	if _, err := GetDevice(3); err == nil {
		t.Fatal("GetDevice(3) succeeded")
	} else {
		var ce *Error
		if !errors.As(err, &ce) || ce.Code != 101 || ce.Op != "cuDeviceGet" {
			t.Fatalf("GetDevice(3): %v", err)
		}
	}
	d, _ := GetDevice(0)
	if name, err := d.Name(); err != nil || name != "Fake GPU" {
		t.Fatalf("Name = %q, %v", name, err)
	}
	if ma, mi, err := d.ComputeCapability(); err != nil || ma != 9 || mi != 0 {
		t.Fatalf("ComputeCapability = %d.%d, %v", ma, mi, err)
	}
	c, err := d.RetainPrimaryContext()
	if err != nil {
		t.Fatal(err)
	}
	defer d.ReleasePrimaryContext()

	src := []float32{1, 2, 3, 4}
	p, err := c.MemAlloc(16)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CopyHtoD(p, unsafe.Pointer(&src[0]), 16); err != nil {
		t.Fatal(err)
	}
	q, _ := c.MemAlloc(16)
	s, err := c.StreamCreate()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CopyDtoDAsync(q, p, 16, s); err != nil {
		t.Fatal(err)
	}
	if err := c.MemsetD32Async(p, 0x3f800000, 2, s); err != nil { // 1.0f
		t.Fatal(err)
	}
	if err := c.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 8)
	if err := c.CopyDtoH(unsafe.Pointer(&got[0]), p, 16); err != nil {
		t.Fatal(err)
	}
	if err := c.CopyDtoH(unsafe.Pointer(&got[4]), q, 16); err != nil {
		t.Fatal(err)
	}
	want := []float32{1, 1, 3, 4, 1, 2, 3, 4}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("copies: got %v, want %v", got, want)
		}
	}
	if ok, err := c.StreamQuery(s); !ok || err != nil {
		t.Fatalf("StreamQuery = %v, %v", ok, err)
	}
	e0, _ := c.EventCreate(true)
	e1, _ := c.EventCreate(true)
	_ = c.EventRecord(e0, s)
	_ = c.EventRecord(e1, s)
	if ms, err := c.EventElapsed(e0, e1); err != nil || ms != 1.5 {
		t.Fatalf("EventElapsed = %v, %v", ms, err)
	}
	h, err := c.HostAlloc(64)
	if err != nil || h == nil {
		t.Fatalf("HostAlloc: %v", err)
	}
	for _, err := range []error{c.HostFree(h), c.EventDestroy(e0), c.EventDestroy(e1), c.StreamDestroy(s), c.MemFree(p), c.MemFree(q)} {
		if err != nil {
			t.Fatal(err)
		}
	}

	ptx := ".version 7.8\n.target sm_80\n.visible .entry scale_f32(\n.param .u64 a\n)\n{ ret; }\n"
	m, err := c.LoadPTX(ptx)
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.Function(m, "scale_f32")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Function(m, "missing"); err == nil || !containsAll(err.Error(), "kernel missing", "cuModuleGetFunction", "named symbol not found") {
		t.Fatalf("missing kernel error = %v", err)
	}
	if err := c.Launch(f, Dim3{1, 1, 1}, Dim3{256, 1, 1}, 0, 0, ArgPtr(p), ArgF32(2), ArgI32(4)); err != nil {
		t.Fatal(err)
	}
	if err := c.Launch(f, Dim3{1, 1, 1}, Dim3{2048, 1, 1}, 0, 0, ArgPtr(p)); err == nil {
		t.Fatal("oversized block accepted")
	}
	if _, err := c.LoadPTX("garbage"); err == nil {
		t.Fatal("bad PTX accepted")
	}
}

func containsAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !contains(s, x) {
			return false
		}
	}
	return true
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
