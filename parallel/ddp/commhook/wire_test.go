package commhook

import (
	"testing"

	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
)

// wrapped is a user's hook around another (to log or time Reduce): it must not inherit the
// recipe of the hook it wraps, or its Reduce would never be called.
type wrapped struct{ ddp.CommHook }

// claims is a user's hook with a Wire method of its own: no recipe either.
type claims struct{ ddp.CommHook }

func (claims) Wire() comm.DType { return comm.Float32 }

// TestHookWire: ddp.HookWire names the recipe of ddp's default hook and of the fp16/bf16
// hooks, which a device backend runs in its own memory, and of no other hook, so every other
// hook's Reduce is called.
func TestHookWire(t *testing.T) {
	psgd, err := PowerSGD()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		hook ddp.CommHook
		want comm.DType
		ok   bool
	}{
		{"allreduce", ddp.AllReduceHook(), comm.Float32, true},
		{"fp16", FP16Compress(), comm.Float16, true},
		{"bf16", BF16Compress(), comm.BFloat16, true},
		{"powersgd", psgd, 0, false},
		{"HookFunc", ddp.HookFunc(func(comm.Group, *ddp.Bucket) comm.Work { return nil }), 0, false},
		{"wrapper of the default", wrapped{ddp.AllReduceHook()}, 0, false},
		{"wrapper of fp16", wrapped{FP16Compress()}, 0, false},
		{"own Wire method", claims{ddp.AllReduceHook()}, 0, false},
	} {
		got, ok := ddp.HookWire(tc.hook)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: HookWire = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
