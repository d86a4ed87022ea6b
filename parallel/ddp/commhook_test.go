package ddp_test

import (
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/parallel/ddp/commhook"
)

// init hands package commhook's hooks to the tests of DDP with a hook (export_test.go).
func init() {
	ddp.Hooks.FP16Compress = commhook.FP16Compress
	ddp.Hooks.BF16Compress = commhook.BF16Compress
	ddp.Hooks.PowerSGD = func(rank, startIter int, minRate float64) (ddp.CommHook, error) {
		return commhook.PowerSGD(commhook.PowerSGDRank(rank), commhook.PowerSGDStartIter(startIter),
			commhook.PowerSGDMinCompressionRate(minRate))
	}
}
