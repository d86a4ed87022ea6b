package nn

// GradStoreOff exposes gradStoreOff to the external tests' A/B benchmark.
var GradStoreOff = &gradStoreOff
