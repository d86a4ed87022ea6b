#!/usr/bin/python3
"""Writes the reference-model fixtures that models/resnet and models/swin test against.

Run with Debian's torch 1.13.1 / torchvision 0.14.1 from the repository root:

    /usr/bin/python3 models/testdata/make_model_fixtures.py

It writes, into models/testdata/:
  params_<arch>.txt   the state-dict keys of every full-size architecture, one per line,
                      "kind name dim,dim,..." (kind is param or buffer), preceded by a
                      "# params N" line with the learnable parameter count;
  <case>_weights.npz  the weights of a reduced model (torchvision keys);
  <case>_expect.npz   input x, labels y, then after one train-mode forward/backward:
                      logits, loss, grad/<param>, buf/<buffer>; then in eval mode (with the
                      buffers the train step left): eval_logits, eval_loss, eval_grad/<param>.
Reduced models keep every code path of the full ones: stride-2 downsample, identity blocks,
Bottleneck's 1x1-3x3-1x1, Swin's shifted and unshifted blocks, PatchMerging with odd sizes,
window padding and one-axis shifts.
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torchvision.models import resnet as R
from torchvision.models import swin_transformer as S

OUT = os.path.dirname(os.path.abspath(__file__))


def swin_l(**kw):
    # Swin-L from the paper (C=192, depths 2,2,18,2, heads 6,12,24,48); torchvision 0.14.1 has none.
    return S.SwinTransformer(patch_size=[4, 4], embed_dim=192, depths=[2, 2, 18, 2],
                             num_heads=[6, 12, 24, 48], window_size=[7, 7],
                             stochastic_depth_prob=0.5, **kw)


ARCHS = {
    "resnet18": torchvision.models.resnet18,
    "resnet34": torchvision.models.resnet34,
    "resnet50": torchvision.models.resnet50,
    "resnet101": torchvision.models.resnet101,
    "resnet152": torchvision.models.resnet152,
    "swin_t": torchvision.models.swin_t,
    "swin_s": torchvision.models.swin_s,
    "swin_b": torchvision.models.swin_b,
    "swin_l": swin_l,
}


def write_param_lists():
    for name, ctor in ARCHS.items():
        m = ctor()
        n = sum(p.numel() for p in m.parameters())
        pnames = {k for k, _ in m.named_parameters()}
        with open(os.path.join(OUT, "params_%s.txt" % name), "w") as f:
            f.write("# params %d\n" % n)
            for k, v in m.state_dict().items():
                kind = "param" if k in pnames else "buffer"
                f.write("%s %s %s\n" % (kind, k, ",".join(str(d) for d in v.shape)))
        print(name, n)


class SmallResNet(R.ResNet):
    """torchvision's ResNet with the stem and stage widths as arguments (torchvision fixes 64)."""

    def __init__(self, block, layers, widths, stem, num_classes):
        super().__init__(block, layers, num_classes=num_classes)
        self.inplanes = stem
        self.conv1 = torch.nn.Conv2d(3, stem, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(stem)
        self.layer1 = self._make_layer(block, widths[0], layers[0])
        self.layer2 = self._make_layer(block, widths[1], layers[1], stride=2)
        self.layer3 = self._make_layer(block, widths[2], layers[2], stride=2)
        self.layer4 = self._make_layer(block, widths[3], layers[3], stride=2)
        self.fc = torch.nn.Linear(widths[3] * block.expansion, num_classes)


def randomize(m, g):
    """Gives every parameter and buffer values far from the initial ones, so that a wrong
    gather, a missing bias or a transposed weight shows."""
    with torch.no_grad():
        for k, v in m.state_dict().items():
            if v.dtype == torch.int64:
                continue
            if k.endswith("running_var"):
                v.copy_(0.5 + torch.rand(v.shape, generator=g))
            elif k.endswith("running_mean") or k.endswith("bias"):
                v.copy_(0.1 * torch.randn(v.shape, generator=g))
            elif "norm" in k or "bn" in k or k.endswith("downsample.1.weight") or k == "features.0.2.weight":
                v.copy_(1 + 0.2 * torch.randn(v.shape, generator=g))
            elif k.endswith("relative_position_bias_table"):
                v.copy_(0.5 * torch.randn(v.shape, generator=g))
            else:
                fan_in = int(np.prod(v.shape[1:]))
                v.copy_(torch.randn(v.shape, generator=g) / np.sqrt(fan_in))


def save_weights(m, path):
    np.savez(path, **{k: v.detach().numpy() for k, v in m.state_dict().items()})


def run_case(m, x, y, path):
    out = {"x": x.numpy(), "y": y.numpy().astype(np.float32)}
    m.train()
    m.zero_grad()
    logits = m(x)
    loss = F.cross_entropy(logits, y)
    loss.backward()
    out["logits"] = logits.detach().numpy()
    out["loss"] = np.array(loss.item(), dtype=np.float32)
    for k, p in m.named_parameters():
        out["grad/" + k] = p.grad.numpy().copy()
    pnames = {k for k, _ in m.named_parameters()}
    for k, v in m.state_dict().items():
        if k not in pnames and "relative_position_index" not in k:
            out["buf/" + k] = v.numpy().copy()
    m.eval()
    m.zero_grad()
    el = m(x)
    eloss = F.cross_entropy(el, y)
    eloss.backward()
    out["eval_logits"] = el.detach().numpy()
    out["eval_loss"] = np.array(eloss.item(), dtype=np.float32)
    for k, p in m.named_parameters():
        out["eval_grad/" + k] = p.grad.numpy().copy()
    np.savez_compressed(path, **out)


def resnet_case(name, block, layers, widths, stem, shape, seed):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    m = SmallResNet(block, layers, widths, stem, num_classes=5)
    randomize(m, g)
    save_weights(m, os.path.join(OUT, name + "_weights.npz"))
    x = torch.randn(shape, generator=g)
    y = torch.randint(0, 5, (shape[0],), generator=g)
    run_case(m, x, y, os.path.join(OUT, name + "_expect.npz"))


def swin_cases(seed):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    m = S.SwinTransformer(patch_size=[4, 4], embed_dim=12, depths=[2, 2, 2], num_heads=[2, 2, 4],
                          window_size=[7, 7], stochastic_depth_prob=0.0, num_classes=5)
    randomize(m, g)
    save_weights(m, os.path.join(OUT, "swin_weights.npz"))
    # 56x56: stage 1 is 14x14 with shifted windows; stage 3 is 4x4, padded to one window.
    # 44x60: 11x15 padded to 14x21 (shifted); stage 2 is 6x8 padded to 7x14, shifted on W only.
    for name, shape in [("swin_square", (2, 3, 56, 56)), ("swin_padded", (2, 3, 44, 60))]:
        x = torch.randn(shape, generator=g)
        y = torch.randint(0, 5, (shape[0],), generator=g)
        run_case(m, x, y, os.path.join(OUT, name + "_expect.npz"))


if __name__ == "__main__":
    if "--no-lists" not in sys.argv:
        write_param_lists()
    resnet_case("resnet_basic", R.BasicBlock, [2, 1, 1, 1], [8, 16, 16, 32], 8, (4, 3, 40, 36), 1)
    resnet_case("resnet_bottleneck", R.Bottleneck, [1, 2, 1, 1], [4, 8, 8, 16], 8, (4, 3, 36, 44), 2)
    swin_cases(3)
