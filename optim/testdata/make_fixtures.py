"""Writes optim/testdata/{optim.npz,cases.json}: PyTorch 1.13 reference trajectories for the
optim package's tests. Run from the repository root with Debian's python3-torch:

    /usr/bin/python3 optim/testdata/make_fixtures.py

cases.json holds every case's hyperparameters; optim.npz holds the arrays:
  init.p{i}, grad.s{k}.p{i}          initial values and the gradient fed at step k (0-based)
  opt.<case>.s{k}.p{i}               parameter i after step k+1
  opt.<case>.state.p{i}.<kind>       optimizer state after the last step
  sched.<case>                       lr after construction, then after each of the steps
  clip.<case>.norm, clip.<case>.p{i} clip_grad_norm_'s total norm and the clipped gradients
"""
import json
import os

import numpy as np
import torch

torch.manual_seed(0)
HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 5
SHAPES = [(3, 4), (5,)]

arrays = {}
init = [torch.randn(*s, dtype=torch.float32) for s in SHAPES]
grads = []
for k in range(STEPS):
    gs = [torch.randn(*s, dtype=torch.float32) * (0.5 + k) for s in SHAPES]
    gs[1][2] = 0.0  # an element whose gradient is zero
    grads.append(gs)
for i, t in enumerate(init):
    arrays[f"init.p{i}"] = t.numpy()
for k, gs in enumerate(grads):
    for i, g in enumerate(gs):
        arrays[f"grad.s{k}.p{i}"] = g.numpy()

# decay: weight decay of p0; p1 (a "bias") never decays, so per-segment decay is exercised.
OPT_CASES = [
    dict(name="sgd_plain", kind="sgd", lr=0.1),
    dict(name="sgd_momentum", kind="sgd", lr=0.1, momentum=0.9),
    dict(name="sgd_dampening", kind="sgd", lr=0.05, momentum=0.9, dampening=0.3),
    dict(name="sgd_nesterov", kind="sgd", lr=0.1, momentum=0.9, nesterov=True, decay=0.01),
    dict(name="sgd_wd", kind="sgd", lr=0.1, momentum=0.5, decay=0.05),
    dict(name="sgd_maximize", kind="sgd", lr=0.1, momentum=0.9, maximize=True),
    dict(name="adam", kind="adam", lr=1e-2),
    dict(name="adam_wd", kind="adam", lr=1e-2, decay=0.1),
    dict(name="adam_amsgrad", kind="adam", lr=1e-2, betas=[0.8, 0.99], amsgrad=True),
    dict(name="adamw", kind="adamw", lr=1e-2, decay=0.1),
    dict(name="adamw_amsgrad", kind="adamw", lr=3e-2, decay=0.05, eps=1e-6, amsgrad=True),
    dict(name="adamw_big_lr", kind="adamw", lr=0.5, decay=0.3, betas=[0.5, 0.9]),
]


def make_opt(c, params):
    groups = [dict(params=[params[0]], weight_decay=c.get("decay", 0.0)),
              dict(params=[params[1]], weight_decay=0.0)]
    if c["kind"] == "sgd":
        return torch.optim.SGD(groups, lr=c["lr"], momentum=c.get("momentum", 0.0),
                               dampening=c.get("dampening", 0.0), nesterov=c.get("nesterov", False),
                               maximize=c.get("maximize", False))
    cls = torch.optim.Adam if c["kind"] == "adam" else torch.optim.AdamW
    return cls(groups, lr=c["lr"], betas=tuple(c.get("betas", [0.9, 0.999])), eps=c.get("eps", 1e-8),
               amsgrad=c.get("amsgrad", False))


for c in OPT_CASES:
    params = [torch.nn.Parameter(t.clone()) for t in init]
    opt = make_opt(c, params)
    for k in range(STEPS):
        for p, g in zip(params, grads[k]):
            p.grad = g.clone()
        opt.step()
        for i, p in enumerate(params):
            arrays[f"opt.{c['name']}.s{k}.p{i}"] = p.detach().numpy().copy()
    for i, p in enumerate(params):
        for kind, v in opt.state[p].items():
            if kind != "step" and v is not None:
                arrays[f"opt.{c['name']}.state.p{i}.{kind}"] = v.numpy().copy()

SCHED_STEPS = 20
SCHED_CASES = [
    dict(name="step", kind="step", step_size=3, gamma=0.5),
    dict(name="multistep", kind="multistep", milestones=[2, 5, 5, 9], gamma=0.3),
    dict(name="cosine", kind="cosine", t_max=7, eta_min=1e-4),
    dict(name="linear", kind="linear", start=0.1, end=1.0, total=4),
    dict(name="linear_decay", kind="linear", start=1.0, end=0.25, total=6),
    dict(name="warmup_cosine", kind="sequential", milestones=[5],
         scheds=[dict(kind="linear", start=0.01, end=1.0, total=5),
                 dict(kind="cosine", t_max=15, eta_min=0.0)]),
    dict(name="warmup_step_cosine", kind="sequential", milestones=[3, 8],
         scheds=[dict(kind="linear", start=0.2, end=1.0, total=3),
                 dict(kind="step", step_size=2, gamma=0.5),
                 dict(kind="cosine", t_max=10, eta_min=1e-3)]),
    dict(name="chained", kind="chained",
         scheds=[dict(kind="linear", start=0.5, end=1.0, total=3),
                 dict(kind="step", step_size=4, gamma=0.7)]),
    dict(name="constant", kind="constant", factor=0.25, total=4),
    dict(name="warmup_constant", kind="sequential", milestones=[6],
         scheds=[dict(kind="linear", start=0.1, end=1.0, total=6),
                 dict(kind="constant", factor=1.0, total=0)]),
    dict(name="poly", kind="poly", total=12, power=2.0),
    dict(name="poly_linear", kind="poly", total=30, power=1.0),
    # OneCycleLR's cases also record the momentum (SGD's, or Adam's beta1) after each step.
    dict(name="onecycle", kind="onecycle", max_lr=0.5, total_steps=20, opt="sgd"),
    dict(name="onecycle_adam_linear", kind="onecycle", max_lr=0.02, total_steps=25, pct_start=0.25,
         anneal="linear", opt="adam"),
    dict(name="onecycle_three_phase", kind="onecycle", max_lr=1.0, total_steps=20, pct_start=0.2,
         three_phase=True, div_factor=10.0, final_div_factor=100.0, base_momentum=0.8,
         max_momentum=0.9, opt="sgd"),
    dict(name="onecycle_no_momentum", kind="onecycle", max_lr=0.3, total_steps=22, cycle_momentum=False,
         opt="sgd"),
]


def make_sched(c, opt):
    k = c["kind"]
    S = torch.optim.lr_scheduler
    if k == "step":
        return S.StepLR(opt, c["step_size"], c["gamma"])
    if k == "multistep":
        return S.MultiStepLR(opt, c["milestones"], c["gamma"])
    if k == "cosine":
        return S.CosineAnnealingLR(opt, c["t_max"], c["eta_min"])
    if k == "linear":
        return S.LinearLR(opt, c["start"], c["end"], c["total"])
    if k == "constant":
        return S.ConstantLR(opt, c["factor"], c["total"])
    if k == "poly":
        return S.PolynomialLR(opt, c["total"], c["power"])
    if k == "onecycle":
        kw = {key: c[key] for key in ("pct_start", "div_factor", "final_div_factor", "three_phase",
                                       "base_momentum", "max_momentum", "cycle_momentum") if key in c}
        if "anneal" in c:
            kw["anneal_strategy"] = c["anneal"]
        return S.OneCycleLR(opt, c["max_lr"], total_steps=c["total_steps"], **kw)
    subs = [make_sched(s, opt) for s in c["scheds"]]
    if k == "sequential":
        return S.SequentialLR(opt, subs, c["milestones"])
    return S.ChainedScheduler(subs)


def momentum(opt):
    g = opt.param_groups[0]
    return g["betas"][0] if "betas" in g else g["momentum"]


for c in SCHED_CASES:
    param = [torch.nn.Parameter(torch.zeros(1))]
    if c.get("opt") == "adam":
        opt = torch.optim.Adam(param, lr=0.1)
    elif c.get("opt") == "sgd":
        opt = torch.optim.SGD(param, lr=0.1, momentum=0.9)
    else:
        opt = torch.optim.SGD(param, lr=0.1)
    s = make_sched(c, opt)
    lrs, moms = [opt.param_groups[0]["lr"]], [momentum(opt)]
    for _ in range(c.get("total_steps", SCHED_STEPS)):
        opt.step()
        s.step()
        lrs.append(opt.param_groups[0]["lr"])
        moms.append(momentum(opt))
    arrays[f"sched.{c['name']}"] = np.array(lrs, dtype=np.float64)
    if c["kind"] == "onecycle":
        arrays[f"sched.{c['name']}.momentum"] = np.array(moms, dtype=np.float64)

CLIP_CASES = [dict(name="clipped", max_norm=1.0), dict(name="unclipped", max_norm=100.0),
              dict(name="tight", max_norm=0.01)]
for c in CLIP_CASES:
    params = [torch.nn.Parameter(t.clone()) for t in init]
    for p, g in zip(params, grads[3]):
        p.grad = g.clone()
    norm = torch.nn.utils.clip_grad_norm_(params, c["max_norm"])
    arrays[f"clip.{c['name']}.norm"] = np.array(norm.item(), dtype=np.float64)
    for i, p in enumerate(params):
        arrays[f"clip.{c['name']}.p{i}"] = p.grad.numpy().copy()

np.savez(os.path.join(HERE, "optim.npz"), **arrays)
with open(os.path.join(HERE, "cases.json"), "w") as f:
    json.dump(dict(torch=torch.__version__, steps=STEPS, sched_steps=SCHED_STEPS, shapes=SHAPES,
                   optim=OPT_CASES, sched=SCHED_CASES, clip=CLIP_CASES), f, indent=1)
    f.write("\n")
print("optim fixtures:", len(arrays), "arrays")
