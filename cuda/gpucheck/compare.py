"""The table of the GPU check, run by run.sh: one row per trainer run on the device (model,
strategy, amp), with its img/s, PyTorch's on the same GPU, their ratio, and the largest
relative difference of its first steps' losses from the CPU run of the same trainer:

    python3 compare.py [--dir DIR] [--cpu-steps 2] [--warmup 3]

Inputs in DIR (run.sh's OUT): trainer.jsonl (run.sh's manifest: one line per trainer run,
with its run folder and log relative to DIR and its exit status, or "skipped" when the
deadline left no room), each run's metrics.jsonl (-print-freq 1: every step's loss and
elapsed time), its log (the optimizer it ran, and the trainer's error when it failed),
torch.jsonl (torch_bench.py) and gp.jsonl (the GEMM lines of gpucheck.test). Each device row
is compared with the CPU run of the same model, amp and optimizer. Output: the table on
stdout, table.txt and table.jsonl in DIR; exit status 1 when a run failed (other than "not
supported" or "not run") or its losses are off.

img/s is measured from metrics.jsonl's elapsed_s between the end of step WARMUP and the end
of the last step, so the first steps (compilation, allocation, cuDNN's algorithm search) are
not counted; it includes the trainer's data loading, which PyTorch's side does not have.
"""
import argparse
import json
import os
import re
import sys

# Loss tolerances, relative to the CPU's loss, over the first --cpu-steps steps. float32: the
# device runs the CPU's graph, differing by float32 summation order and cuDNN's algorithms
# (cuda/gpucheck's model tests: 5e-4 on logits; ~1e-5 on the loss at the first steps), so
# 1e-3 leaves room for the second step's update and fails a wrong kernel (1e-2 or more).
# bf16/fp16: the same rounding on both sides, but a sum rounded differently in the last place
# can move an activation across a 16-bit rounding boundary (2^-8 relative for bf16); 1e-2 on
# the first step only (identical parameters): later steps inherit an update whose gradients
# went through such flips, which batch norm over few values per channel amplifies into chaos
# (the emulator's resnet18 16x16 batch 8: 4e-3 at step 1, 9% at step 2). table.jsonl keeps
# every step's difference.
TOL = {"off": 1e-3, "bf16": 1e-2, "fp16": 1e-2}
CHECKED_STEPS = {"bf16": 1, "fp16": 1}  # others: --cpu-steps

# Trainer errors that mean "this combination does not run on the device", not a failure: the
# trainer's refusals of a combination (-opt sgd with -strategy zero3, -offload disk, -sync-bn:
# "trainer: ... -device cuda is not supported on the device ..."; the regexp takes "is not on
# the device" with or without a word between) and cuda/tape's ops without a device kernel ("op
# ... of node ... has no device kernel"). Anything else a run prints is a failure.
UNSUPPORTED = re.compile(r"is not (yet )?(supported )?on the device|has no device kernel")
# The optimizer a run used, from the trainer's "train: ..., sgd lr 0.025, ..." line.
TRAIN_LINE = re.compile(r"^train: .*?, (\w+) lr [0-9.e+-]+, ")
TIMED_OUT = (124, 137)


def read_jsonl(path):
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def steps_of(run_dir):
    """Step number -> (step_loss, elapsed_s) of a run's training records."""
    out = {}
    for r in read_jsonl(os.path.join(run_dir, "metrics.jsonl")):
        if r.get("kind") == "train":
            out[r["step"]] = (r.get("step_loss", r.get("loss")), r["elapsed_s"])
    return out


def trainer_error(log):
    """The trainer's last error line (main prints "imagenet: ERR")."""
    err = ""
    try:
        with open(log, errors="replace") as f:
            for line in f:
                if line.startswith("imagenet: "):
                    err = line[len("imagenet: "):].strip()
    except OSError:
        pass
    return err or "exited without an error message (see %s)" % log


def optimizer_used(log):
    """The optimizer the trainer's log says it ran, or None."""
    try:
        with open(log, errors="replace") as f:
            for line in f:
                m = TRAIN_LINE.match(line)
                if m:
                    return m.group(1)
    except OSError:
        pass
    return None


def classify_failure(r, d):
    """The result of a run that did not exit 0, and whether it fails the table."""
    if r.get("skipped"):
        return "not run: the DEADLINE left no room for it", False
    if r["rc"] in TIMED_OUT:
        return "FAIL: timed out (run.sh's step timeout; see %s)" % r["log"], True
    err = trainer_error(os.path.join(d, r["log"]))
    if UNSUPPORTED.search(err):
        return "not supported: " + err, False
    return "FAIL: " + err, True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=".")
    ap.add_argument("--cpu-steps", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    d = a.dir
    runs = read_jsonl(os.path.join(d, "trainer.jsonl"))
    torch = {}
    for r in read_jsonl(os.path.join(d, "torch.jsonl")):
        if r.get("bench") == "train":
            torch[(r["arch"], r["amp"])] = r.get("images_per_s") or ("error: " + r.get("error", "?"))
    # CPU references by model, amp and the optimizer they ran (run.sh runs one per optimizer
    # its device rows use).
    cpu = {}
    for r in runs:
        if r["device"] == "cpu":
            cpu[(r["arch"], r["amp"], r.get("opt") or optimizer_used(os.path.join(d, r["log"])))] = r
    rows, failed = [], False
    for r in runs:
        if r["device"] == "cpu":
            continue
        key = (r["arch"], r["amp"])
        row = {"model": f'{r["arch"]} {r["image"]}px b{r["batch"]}', "arch": r["arch"], "strategy": r["strategy"],
               "amp": r["amp"], "ours": None, "torch": torch.get(key), "ratio": None, "loss_diff": None, "result": ""}
        if r["rc"] != 0:
            row["result"], bad = classify_failure(r, d)
            failed = failed or bad
            rows.append(row)
            continue
        st = steps_of(os.path.join(d, r["out"]))
        n = max(st) if st else 0
        if n < 2:
            row["result"] = f"FAIL: {n} steps in metrics.jsonl"
            failed = True
            rows.append(row)
            continue
        w = min(a.warmup, n - 1)
        ips = r["batch"] * (n - w) / (st[n][1] - st[w][1])
        row["ours"] = round(ips, 1 if ips >= 10 else 4)
        row["steps_timed"] = n - w
        if isinstance(row["torch"], (int, float)) and row["torch"] > 0:
            row["ratio"] = round(row["ours"] / row["torch"], 3)
        opt = optimizer_used(os.path.join(d, r["log"]))
        row["opt"] = opt
        ref = cpu.get((r["arch"], r["amp"], opt))
        if ref is None or ref["rc"] != 0:
            why = f"no CPU reference with -opt {opt}"
            if ref is not None:
                why += ": " + classify_failure(ref, d)[0]
            row["result"] = why
            failed = failed or not (ref is not None and ref.get("skipped"))
            rows.append(row)
            continue
        cs = steps_of(os.path.join(d, ref["out"]))
        k = min(CHECKED_STEPS.get(r["amp"], a.cpu_steps), n, max(cs) if cs else 0)
        shared = min(a.cpu_steps, n, max(cs) if cs else 0)
        row["loss_diffs"] = [abs(st[i][0] - cs[i][0]) / abs(cs[i][0]) for i in range(1, shared + 1)]
        if k == 0:
            row["result"] = "FAIL: the CPU reference logged no step"
            failed = True
            rows.append(row)
            continue
        diffs = [abs(st[i][0] - cs[i][0]) / abs(cs[i][0]) for i in range(1, k + 1)]
        row["loss_diff"] = max(diffs)
        row["loss_steps"] = k
        tol = TOL.get(r["amp"], 1e-2)
        if row["loss_diff"] <= tol:
            row["result"] = f"ok (<= {tol:.0e} over {k} steps)"
        else:
            row["result"] = f"LOSSES DIFFER: {row['loss_diff']:.2e} > {tol:.0e} (device {[round(st[i][0], 6) for i in range(1, k + 1)]}, cpu {[round(cs[i][0], 6) for i in range(1, k + 1)]})"
            failed = True
        rows.append(row)
    # PyTorch-only modes (tf32) as rows of their own, for reference.
    ours_keys = {(r["arch"], r["amp"]) for r in runs}
    for (arch, amp), v in sorted(torch.items()):
        if (arch, amp) not in ours_keys:
            rows.append({"model": arch, "arch": arch, "strategy": "-", "amp": amp, "ours": None, "torch": v, "ratio": None,
                         "loss_diff": None, "result": "PyTorch only (no counterpart of ours)"})

    def fmt(v, spec):
        if v is None:
            return "-"
        if isinstance(v, str):
            return v[:10]
        if spec == ".1f" and abs(v) < 10:  # the emulator's fractions of an image per second
            return format(v, ".3g")
        return format(v, spec)

    lines = [f"{'model':22} {'strategy':8} {'opt':5} {'amp':5} {'ours img/s':>10} {'torch img/s':>11} {'ratio':>6} {'loss diff':>9}  result"]
    for r in rows:
        lines.append(f"{r['model']:22} {r['strategy']:8} {r.get('opt') or '-':5} {r['amp']:5} {fmt(r['ours'], '.1f'):>10} {fmt(r['torch'], '.1f'):>11} "
                     f"{fmt(r['ratio'], '.2f'):>6} {fmt(r['loss_diff'], '.1e'):>9}  {r['result']}")
    gemm = {}
    for p, impl in (("gp.jsonl", "gp"), ("torch.jsonl", "torch")):
        for r in read_jsonl(os.path.join(d, p)):
            if r.get("bench") == "gemm":
                gemm.setdefault(r["dtype"], {})[impl] = r.get("tflops")
    if gemm:
        lines.append("")
        lines.append(f"{'gemm 4096^3':22} {'dtype':8} {'ours TFLOP/s':>12} {'torch':>8} {'ratio':>6}")
        for dt, v in sorted(gemm.items()):
            ratio = v["gp"] / v["torch"] if v.get("gp") and v.get("torch") else None
            lines.append(f"{'':22} {dt:8} {fmt(v.get('gp'), '.1f'):>12} {fmt(v.get('torch'), '.1f'):>8} {fmt(ratio, '.2f'):>6}")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    with open(os.path.join(d, "table.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(d, "table.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
