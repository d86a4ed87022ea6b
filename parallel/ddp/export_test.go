package ddp

// Hooks is package commhook's hooks, for this package's tests of DDP with a hook:
// commhook imports ddp, so a test in package ddp cannot import it. commhook_test.go
// (package ddp_test, in the same test binary) fills it in its init, which runs before any
// test.
var Hooks struct {
	FP16Compress, BF16Compress func() CommHook
	// PowerSGD is commhook.PowerSGD with PowerSGDRank(rank), PowerSGDStartIter(startIter)
	// and PowerSGDMinCompressionRate(minRate).
	PowerSGD func(rank, startIter int, minRate float64) (CommHook, error)
}
