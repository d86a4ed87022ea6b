"""Writes norm_fixtures.npz: PyTorch references for the normalisation, activation, softmax,
loss and reduction ops of nn/ops (norm_fixtures_test.go reads it; tests never run Python).

Run with Debian's PyTorch 1.13.1:  /usr/bin/python3 nn/ops/testdata/make_norm_fixtures.py
Inputs are float32 values; references are computed by torch in float64 from exactly those
values, so the Go float32 ops are compared with the exact answer.
"""
import os

import numpy as np
import torch
import torch.nn.functional as F

rng = np.random.default_rng(20240601)
out = {}


def f32(*shape, loc=0.0, scale=1.0):
    return (rng.standard_normal(shape) * scale + loc).astype(np.float32)


def t64(a, grad=False):
    return torch.tensor(a.astype(np.float64), requires_grad=grad)


def put(prefix, **arrays):
    for k, v in arrays.items():
        if isinstance(v, torch.Tensor):
            v = v.detach().numpy()
        out[prefix + "." + k] = np.asarray(v)


# BatchNorm2d, training: y and gradients of the first forward; running statistics and
# num_batches_tracked after three training forwards (momentum 0.1) on three batches.
for name, shape in (("bn_train", (4, 3, 5, 5)), ("bn1d_train", (6, 4))):
    c = shape[1]
    xs = [f32(*shape, loc=0.5, scale=2.0) for _ in range(3)]
    gamma, beta, dy = f32(c), f32(c), f32(*shape)
    bn = (torch.nn.BatchNorm2d if len(shape) == 4 else torch.nn.BatchNorm1d)(c, momentum=0.1, eps=1e-5).double()
    with torch.no_grad():
        bn.weight.copy_(t64(gamma))
        bn.bias.copy_(t64(beta))
    bn.train()
    x0 = t64(xs[0], True)
    y = bn(x0)
    y.backward(t64(dy))
    for x in xs[1:]:
        bn(t64(x))
    put(name, x0=xs[0], x1=xs[1], x2=xs[2], gamma=gamma, beta=beta, dy=dy, y=y, dx0=x0.grad,
        dgamma=bn.weight.grad, dbeta=bn.bias.grad, running_mean=bn.running_mean,
        running_var=bn.running_var, num_batches_tracked=bn.num_batches_tracked.numpy().astype(np.int64))

# BatchNorm2d, eval: running statistics given.
shape = (3, 4, 3, 7)
x, gamma, beta, dy = f32(*shape), f32(4), f32(4), f32(*shape)
rm, rv = f32(4, scale=0.3), (np.abs(f32(4)) + 0.5).astype(np.float32)
bn = torch.nn.BatchNorm2d(4, eps=1e-5).double()
with torch.no_grad():
    bn.weight.copy_(t64(gamma)); bn.bias.copy_(t64(beta))
    bn.running_mean.copy_(t64(rm)); bn.running_var.copy_(t64(rv))
bn.eval()
xt = t64(x, True)
y = bn(xt)
y.backward(t64(dy))
put("bn_eval", x=x, gamma=gamma, beta=beta, running_mean=rm, running_var=rv, dy=dy, y=y, dx=xt.grad,
    dgamma=bn.weight.grad, dbeta=bn.bias.grad)

# LayerNorm over the last 1 and the last 2 dims.
for name, shape, nd in (("ln1", (2, 5, 7), 1), ("ln2", (2, 3, 4, 5), 2)):
    x, dy = f32(*shape, loc=1.0), f32(*shape)
    w, b = f32(*shape[-nd:]), f32(*shape[-nd:])
    xt, wt, bt = t64(x, True), t64(w, True), t64(b, True)
    y = F.layer_norm(xt, shape[-nd:], wt, bt, 1e-5)
    y.backward(t64(dy))
    put(name, x=x, gamma=w, beta=b, dy=dy, y=y, dx=xt.grad, dgamma=wt.grad, dbeta=bt.grad)

# GELU (exact erf form).
x, dy = f32(3, 17, scale=2.0), f32(3, 17)
xt = t64(x, True)
y = F.gelu(xt)
y.backward(t64(dy))
put("gelu", x=x, dy=dy, y=y, dx=xt.grad)

# Softmax and LogSoftmax over a middle axis.
for name, fn in (("softmax", F.softmax), ("logsoftmax", F.log_softmax)):
    x, dy = f32(2, 5, 3, 4, scale=2.0), f32(2, 5, 3, 4)
    xt = t64(x, True)
    y = fn(xt, dim=1)
    y.backward(t64(dy))
    put(name, x=x, dy=dy, y=y, dx=xt.grad)

# Cross-entropy (mean) with label smoothing 0 and 0.1; upstream gradient 1.
logits = f32(6, 5, scale=2.0)
labels = rng.integers(0, 5, size=6).astype(np.float32)
for name, s in (("ce0", 0.0), ("ce01", 0.1)):
    xt = t64(logits, True)
    loss = F.cross_entropy(xt, torch.tensor(labels.astype(np.int64)), label_smoothing=s)
    loss.backward()
    put(name, logits=logits, labels=labels, loss=loss, dlogits=xt.grad)

# Sum over axes (1, 2) and Mean over axis 2 of a 4-D tensor: the middle axes gorgonia gets wrong.
x = f32(2, 3, 4, 5)
for name, fn, axes in (("sum12", torch.sum, (1, 2)), ("mean2", torch.mean, (2,))):
    xt = t64(x, True)
    y = fn(xt, dim=axes)
    dy = f32(*y.shape)
    y.backward(t64(dy))
    put(name, x=x, dy=dy, y=y, dx=xt.grad)

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "norm_fixtures.npz")
np.savez(path, **out)
print("wrote", path, os.path.getsize(path), "bytes, torch", torch.__version__)
