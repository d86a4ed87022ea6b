#!/usr/bin/python3
"""Fixtures for package amp, made with Debian's torch 1.13 (run with /usr/bin/python3).

round.json: float32 inputs (as uint32 bit patterns) and what torch's .to(torch.bfloat16) and
.half() make of them, converted back to float32 (bit patterns). The values include ties
(halfway cases with even and odd neighbours), subnormals of both formats, the fp16 maximum
and the values just below/at/above fp16's overflow threshold, infinities, NaN and several
thousand random bit patterns spread over every exponent.

scaler.json: the loss-scale sequence of torch's GradScaler where gradients overflow at chosen
steps. torch 1.13's torch.cuda.amp.GradScaler disables itself on a machine without CUDA, so
this script does NOT run it: it replays its algorithm step by step, as written in
torch/cuda/amp/grad_scaler.py and the _amp_update_scale_ kernel
(aten/src/ATen/native/cuda/AmpKernels.cu), on float32 CPU tensors:
  unscale_:  inv_scale = scale.double().reciprocal().float(); g *= inv_scale;
             found_inf = any(!isfinite(g))
  step:      skipped when found_inf
  update:    _amp_update_scale_(scale, growth_tracker, found_inf, growth, backoff, interval):
             found_inf -> scale *= backoff, tracker = 0
             else tracker+1 == interval -> scale *= growth (kept only if finite), tracker = 0
                  else tracker += 1
"""
import json
import os
import struct

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def bits(a):
    return [int(x) for x in np.asarray(a, dtype=np.float32).view(np.uint32)]


def round_fixture():
    f = lambda x: struct.unpack("<I", struct.pack("<f", x))[0]
    special = [
        0.0, -0.0, 1.0, -1.0, 65504.0, -65504.0, 65519.0, 65519.99, 65520.0, -65520.0,
        65536.0, 1e5, -1e5, 3.0e38, 3.3895314e38, 3.4028235e38, -3.4028235e38,
        float("inf"), float("-inf"), float("nan"),
        2.0 ** -14, 2.0 ** -15, 2.0 ** -24, 2.0 ** -25, 1.5 * 2.0 ** -25, 2.0 ** -26,
        3 * 2.0 ** -25, 5 * 2.0 ** -25, 2.0 ** -126, 2.0 ** -127, 2.0 ** -133, 2.0 ** -134,
        1.5 * 2.0 ** -134, 2.0 ** -149, 0.1, 1.0 / 3, 3.14159265, 1e-8, 6e-8, 1e-40,
    ]
    vals = [f(x) for x in special]
    # bf16 ties: low 16 bits exactly 0x8000 with even and odd kept bit; fp16 ties: low 13 bits
    # 0x1000 (normal range) with even and odd kept bit; and their neighbours.
    for base in [0x3F800000, 0x3F810000, 0x40490000, 0x477FE000, 0x38800000, 0x33800000]:
        for low in [0x7FFF, 0x8000, 0x8001, 0x18000]:
            vals.append((base + low) & 0xFFFFFFFF)
            vals.append((base + low) | 0x80000000)
    for base in [0x3F800000, 0x3F802000, 0x46FFE000, 0x477FC000, 0x38800000, 0x38802000]:
        for low in [0x0FFF, 0x1000, 0x1001, 0x3000]:
            vals.append(base + low)
            vals.append((base + low) | 0x80000000)
    # fp16 subnormal ties: multiples of 2^-25 (halfway between 2^-24 steps)
    for k in range(1, 40, 2):
        vals.append(f(k * 2.0 ** -25))
        vals.append(f(-k * 2.0 ** -25))
    rng = np.random.default_rng(7)
    rand = rng.integers(0, 2 ** 32, size=4000, dtype=np.uint64).astype(np.uint32)
    # concentrate a quarter of them on fp16's range of exponents
    exp = rng.integers(100, 145, size=1000).astype(np.uint32)
    mant = rng.integers(0, 2 ** 23, size=1000).astype(np.uint32)
    sign = rng.integers(0, 2, size=1000).astype(np.uint32)
    focused = (sign << 31) | (exp << 23) | mant
    vals += [int(x) for x in rand] + [int(x) for x in focused]
    x = torch.from_numpy(np.array(vals, dtype=np.uint32).view(np.float32).copy())
    return {
        "torch": torch.__version__,
        "input": vals,
        "bf16": bits(x.to(torch.bfloat16).float().numpy()),
        "fp16": bits(x.half().float().numpy()),
    }


def replay(init, growth, backoff, interval, steps, overflow, nan_steps, n=8, seed=0):
    scale = torch.full((1,), init, dtype=torch.float32)
    tracker = torch.zeros((1,), dtype=torch.int32)
    rng = np.random.default_rng(seed)
    out = {"init_scale": init, "growth_factor": growth, "backoff_factor": backoff,
           "growth_interval": interval, "steps": []}
    for step in range(steps):
        g = torch.from_numpy((rng.standard_normal(n) * 1e-3).astype(np.float32)) * scale
        if step in overflow:
            g[step % n] = float("inf")
        if step in nan_steps:
            g[(step + 3) % n] = float("nan")
        grads_in = bits(g.numpy())
        inv_scale = scale.double().reciprocal().float()
        g = g * inv_scale
        found_inf = bool((~torch.isfinite(g)).any())
        rec = {"scale": bits(scale.numpy())[0], "grads": grads_in, "skipped": found_inf,
               "unscaled": bits(g.numpy())}
        # _amp_update_scale_
        if found_inf:
            scale = scale * backoff
            tracker.zero_()
        else:
            successful = int(tracker) + 1
            if successful == interval:
                new_scale = scale * growth
                if bool(torch.isfinite(new_scale).all()):
                    scale = new_scale
                tracker.zero_()
            else:
                tracker.fill_(successful)
        rec["next_scale"] = bits(scale.numpy())[0]
        rec["growth_tracker"] = int(tracker)
        out["steps"].append(rec)
    return out


def scaler_fixture():
    return {
        "torch": torch.__version__,
        "note": "replay of torch/cuda/amp/grad_scaler.py and _amp_update_scale_ (GradScaler is "
                "disabled without CUDA in torch 1.13); see make_fixtures.py",
        "cases": [
            replay(65536.0, 2.0, 0.5, 2000, 2006, overflow={0, 1, 5, 2004}, nan_steps={7}, n=2),
            replay(1000.0, 3.0, 0.3, 3, 40, overflow={2, 3, 11, 30}, nan_steps={20}, seed=1),
            # growth that overflows float32 keeps the old scale
            replay(2.0 ** 126, 2.0, 0.5, 2, 8, overflow=set(), nan_steps=set(), seed=2),
        ],
    }


if __name__ == "__main__":
    with open(os.path.join(HERE, "round.json"), "w") as fh:
        json.dump(round_fixture(), fh)
    with open(os.path.join(HERE, "scaler.json"), "w") as fh:
        json.dump(scaler_fixture(), fh)
    print("wrote round.json and scaler.json with torch", torch.__version__)
