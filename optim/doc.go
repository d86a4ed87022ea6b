// Package optim updates parameters held in flat float32 buffers: SGD, Adam and AdamW with
// PyTorch 1.13's exact update formulas, learning-rate schedules, and gradient clipping.
//
// An optimizer works on Segments, contiguous runs of parameter and gradient memory, so the
// same code steps a whole model (DDP: one buffer, every rank), one parameter at a time, or a
// ZeRO shard that cuts across parameter boundaries. Optimizer state lives per segment in
// flat memory, and is saved and loaded per parameter name, so a state dict written by one
// sharding loads into another.
package optim
