// Package commhook holds DDP's communication hooks beyond the default all-reduce, as
// PyTorch keeps them in torch.distributed.algorithms.ddp_comm_hooks apart from DDP: fp16 and
// bf16 compression (FP16Compress, BF16Compress), PowerSGD's low-rank compression (PowerSGD)
// and Then, which chains a hook's own work after a collective. Each hook is a ddp.CommHook,
// given to DDP with ddp.WithCommHook.
package commhook
