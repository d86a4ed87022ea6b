// Package wire marks the communication hooks of parallel/ddp and parallel/ddp/commhook whose
// reduction is one of DDP's fixed recipes, which a backend may run over its own memory
// instead of calling the hook's Reduce (ddp.HookWire says which recipe).
//
// The mark is sealed: Recipe's method is unexported and this package is internal to
// parallel/ddp, so no hook outside it can carry the mark, and a user's hook (or a wrapper
// that embeds ddp.CommHook to log or time Reduce) always has its Reduce called.
package wire

import "github.com/gorgonia-parallel/gp/parallel/comm"

// Recipe is embedded by a hook whose reduction is the fixed recipe of its element type DType
// (comm.Float32, comm.Float16 or comm.BFloat16; see ddp.HookWire).
type Recipe struct {
	DType comm.DType
}

func (r Recipe) recipe() comm.DType { return r.DType }

// marked is a hook that embeds a Recipe.
type marked interface{ recipe() comm.DType }

// Of returns the recipe h carries and whether it carries one.
func Of(h any) (comm.DType, bool) {
	m, ok := h.(marked)
	if !ok {
		return 0, false
	}
	return m.recipe(), true
}
