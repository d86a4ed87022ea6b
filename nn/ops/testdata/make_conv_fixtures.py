"""Write nn/ops/testdata/conv_fixtures.npz: PyTorch reference values for the ops in
nn/ops/conv_*, linear_* and pool_* (Conv2d, Linear, MaxPool2d, AdaptiveAvgPool2d(1)).

Run with Debian's torch 1.13.1:  /usr/bin/python3 nn/ops/testdata/make_conv_fixtures.py

For every case the inputs are float32 values (stored as float32); the reference forward
output and the gradients of sum(y * gy) for a fixed upstream gradient gy are computed in
float64 from those exact values, then stored as float32 (rounding 6e-8, far below the
tests' tolerances). Keys are "<case>__<name>": x, w, b (when present), gy, y, gx, gw, gb,
and opts (int64): conv [sh, sw, ph, pw, dh, dw, groups, has_bias];
linear [has_bias]; maxpool [kh, kw, sh, sw, ph, pw]; gap [].
"""
import os

import numpy as np
import torch
import torch.nn.functional as F

torch.manual_seed(0)
gen = torch.Generator().manual_seed(1234)
out = {}


def rnd(*shape):
    # float32 values, held in float64 for the reference computation
    return torch.randn(*shape, generator=gen, dtype=torch.float32).double()


def put(case, **arrays):
    for k, v in arrays.items():
        if isinstance(v, torch.Tensor):
            v = v.detach().numpy()
        if np.asarray(v).dtype.kind == "f":
            v = np.asarray(v, dtype=np.float32)
        out[f"{case}__{k}"] = np.ascontiguousarray(v)


def conv(case, xs, ws, stride=(1, 1), pad=(0, 0), dil=(1, 1), groups=1, bias=True):
    x = rnd(*xs).requires_grad_()
    w = (rnd(*ws) * 0.3).requires_grad_()
    b = rnd(ws[0]).requires_grad_() if bias else None
    y = F.conv2d(x, w, b, stride=stride, padding=pad, dilation=dil, groups=groups)
    gy = rnd(*y.shape)
    (y * gy).sum().backward()
    arrays = dict(x=x, w=w, gy=gy, y=y, gx=x.grad, gw=w.grad,
                  opts=np.array([*stride, *pad, *dil, groups, int(bias)], dtype=np.int64))
    if bias:
        arrays.update(b=b, gb=b.grad)
    put(case, **arrays)


def linear(case, xs, ws, bias=True):
    x = rnd(*xs).requires_grad_()
    w = (rnd(*ws) * 0.3).requires_grad_()
    b = rnd(ws[0]).requires_grad_() if bias else None
    y = F.linear(x, w, b)
    gy = rnd(*y.shape)
    (y * gy).sum().backward()
    arrays = dict(x=x, w=w, gy=gy, y=y, gx=x.grad, gw=w.grad, opts=np.array([int(bias)], dtype=np.int64))
    if bias:
        arrays.update(b=b, gb=b.grad)
    put(case, **arrays)


def maxpool(case, x, k, s, p):
    x = x.clone().requires_grad_()
    y = F.max_pool2d(x, k, s, p)
    gy = rnd(*y.shape)
    (y * gy).sum().backward()
    put(case, x=x, gy=gy, y=y, gx=x.grad, opts=np.array([*k, *s, *p], dtype=np.int64))


def gap(case, xs):
    x = rnd(*xs).requires_grad_()
    y = F.adaptive_avg_pool2d(x, 1)
    gy = rnd(*y.shape)
    (y * gy).sum().backward()
    put(case, x=x, gy=gy, y=y, gx=x.grad, opts=np.zeros(0, dtype=np.int64))


conv("conv_3x3_p1", (2, 3, 8, 8), (4, 3, 3, 3), pad=(1, 1))
conv("conv_3x3_s2_p1", (2, 4, 9, 7), (6, 4, 3, 3), stride=(2, 2), pad=(1, 1))
conv("conv_dil2_nobias", (1, 3, 10, 9), (5, 3, 3, 3), pad=(2, 2), dil=(2, 2), bias=False)
conv("conv_groups2", (2, 4, 7, 7), (6, 2, 3, 3), stride=(2, 1), pad=(1, 2), groups=2)
conv("conv_1x1", (2, 8, 5, 6), (4, 8, 1, 1))
conv("conv_1x1_s2_nobias", (2, 8, 7, 7), (4, 8, 1, 1), stride=(2, 2), bias=False)
conv("conv_7x7_s2_p3", (2, 3, 16, 16), (8, 3, 7, 7), stride=(2, 2), pad=(3, 3), bias=False)
conv("conv_rect", (2, 3, 9, 8), (4, 3, 2, 3), stride=(2, 1), pad=(1, 0), dil=(1, 2))
linear("linear_2d", (4, 10), (6, 10))
linear("linear_3d_nobias", (2, 3, 7), (5, 7), bias=False)
maxpool("maxpool_3x3_s2_p1", rnd(2, 3, 9, 9), (3, 3), (2, 2), (1, 1))
maxpool("maxpool_2x2", rnd(2, 2, 7, 6), (2, 2), (2, 2), (0, 0))
maxpool("maxpool_rect", rnd(1, 3, 8, 7), (3, 2), (2, 1), (1, 1))
# small integers: many ties inside windows (the gradient goes to the first maximum)
ties = torch.randint(0, 3, (2, 2, 6, 7), generator=gen).double()
maxpool("maxpool_ties", ties, (3, 3), (1, 1), (1, 1))
gap("gap", (2, 5, 3, 4))

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conv_fixtures.npz")
np.savez_compressed(path, **out)
print(f"wrote {path}: {len(out)} arrays, {os.path.getsize(path)} bytes, torch {torch.__version__}")
