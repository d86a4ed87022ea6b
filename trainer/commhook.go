package trainer

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/parallel/ddp/commhook"
)

// CommHookConfig is DDP's communication hook, as torch users set it with
// ddp_model.register_comm_hook: none (the plain averaging all-reduce), fp16 or bf16
// (fp16_compress_hook, bf16_compress_hook: 16-bit values on the wire) or powersgd
// (powerSGD_hook with PowerSGDState(matrix_approximation_rank=PowerSGDRank,
// start_powerSGD_iter=PowerSGDStartIter), error feedback and warm start on).
type CommHookConfig struct {
	Name              string // none (or ""), fp16, bf16, powersgd
	PowerSGDRank      int    // matrix_approximation_rank
	PowerSGDStartIter int    // start_powerSGD_iter: steps of plain all-reduce first

	hook ddp.CommHook // built by check, once per run
}

// check validates h against the strategy and builds the hook; it runs once per Fit (a hook
// keeps per-run state).
func (h *CommHookConfig) check(strategy string) error {
	h.hook = nil
	var err error
	switch h.Name {
	case "", "none":
		return nil
	case "fp16":
		h.hook = commhook.FP16Compress()
	case "bf16":
		h.hook = commhook.BF16Compress()
	case "powersgd":
		rank, start := h.PowerSGDRank, h.PowerSGDStartIter
		if rank == 0 && start == 0 { // rank and start iteration unset: torch's defaults
			rank, start = 1, 1000
		}
		h.hook, err = commhook.PowerSGD(commhook.PowerSGDRank(rank), commhook.PowerSGDStartIter(start))
		if err != nil {
			return fmt.Errorf("trainer: -ddp-comm-hook powersgd: %w", err)
		}
	default:
		return fmt.Errorf("trainer: unknown -ddp-comm-hook %q (none, fp16, bf16 or powersgd)", h.Name)
	}
	if s, err := strategyOf(strategy); err == nil && s.sharded {
		return fmt.Errorf("trainer: -ddp-comm-hook %s needs -strategy ddp or none (ZeRO-3 reduce-scatters its own gradients)", h.Name)
	}
	return nil
}

// options are the ddp options of the hook check built (none for the default).
func (h *CommHookConfig) options() []ddp.Option {
	if h.hook == nil {
		return nil
	}
	return []ddp.Option{ddp.WithCommHook(h.hook)}
}
