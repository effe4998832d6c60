"""Time variants of examples/attention.tk's Hopper kernel against SDPA cuDNN, same run (GPU).

    python3 benchmarks/attention_variants.py 64:4096 64:8192:causal 128:4096 \\
        --variant percausal=PERSISTENT_CAUSAL=True --out results.json
    python3 benchmarks/attention_variants.py --nol 256:4096 --variant k80=BKV=80
    python3 benchmarks/attention_variants.py --nol --kernel attention_exp 128:4096 \\
        --variant e=PASS=scale-fold{base2=0}

``--nol`` times examples/attention_nol.tk (no L output; the general lowering) instead of
examples/attention.tk (``--kernel attention_exp``: another example with that signature); its
variants are the kernel's constants (``BKV=80``), ``REGS`` and ``PASS`` (one pass of the default
pipeline with options, e.g. ``PASS=scale-fold{base2=0}``, or without it: ``PASS=-mask-branch``).
``--window W`` times examples/attention_window.tk with window W (a causal band), each variant's O
checked against SDPA with the band as its mask; the cuDNN column is then the full causal
attention's time, a yardstick for comparing the variants in one run.

A shape is D:N[:causal] with B·N = 16384 tokens and 16 heads (as benchmarks/tkbench/attention.py).
A variant is NAME=ATTR=VALUE[,ATTR=VALUE]: module constants of tkjit.codegen.hopper.attention_plan
(pins the plan reads), ``REGS=P:C`` (the kernel's register split, ``@regs(P, C)``) or, for any
other name, constants of the kernel (``BQ=192``: 3 consumer warpgroups); each variant is
compiled without the disk cache. The default is always run. Inputs rotate over enough sets to
exceed the 60 MB L2; each figure is the median of 15 batches of 10 launches timed with CUDA
events, the batches of cuDNN and of every variant interleaved so that clock and power drift fall
on all alike. Each variant's output is checked
against cuDNN's before it is timed. Prints one JSON line per shape and variant.
"""
from __future__ import annotations

import argparse
import ast
import json
import math
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tkjit
from tkjit.codegen.hopper import attention_plan

from gemm_variants import batch_us  # noqa: E402 - this directory's harness: one timed batch

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SOURCE = (EXAMPLES / "attention.tk").read_text()
NOL = False
"""--nol: examples/attention_nol.tk (O only) instead."""
KERNEL = "attention_nol"
"""--kernel NAME: which O-only example (q, k, v, o, scale) --nol times: attention_nol, attention_exp,
attention_mask (always causal: time it at D:N:causal shapes)."""
WINDOW = 0
"""--window W: examples/attention_window.tk with this window instead."""
L2_BYTES = 60 << 20
TOKENS, HEADS = 16384, 16


def variant_kernel(d: int, causal: bool, pins: dict):
    pins = dict(pins)
    regs = pins.pop("REGS", None)  # "P:C": the kernel's @regs(P, C) pin
    name = "attention_window.tk" if WINDOW else f"{KERNEL}.tk" if NOL else "attention.tk"
    swap = pins.pop("PASS", None)  # e.g. PASS=scale-fold{base2=0}: that pass of the default pipeline
    extra = {}
    if swap:
        from tkjit.passes import default_pipeline
        stem = swap.split("{")[0]
        drop = stem.startswith("-")  # PASS=-mask-branch: the default pipeline without that pass
        stem = stem.lstrip("-")
        extra["pipeline"] = ",".join(swap if p.split("{")[0] == stem else p
                                     for p in default_pipeline("sm_90a").split(",")
                                     if not (drop and p.split("{")[0] == stem))
    source = (EXAMPLES / name).read_text()
    if regs:
        if "@consumers(" not in source:
            raise SystemExit("REGS: examples/attention.tk has no @consumers(...) to put @regs beside")
        source = source.replace("@consumers(", f"@regs({regs.replace(':', ', ')}) @consumers(", 1)
    constants = {name: v for name, v in pins.items() if not hasattr(attention_plan, name)}
    pins = {name: v for name, v in pins.items() if name not in constants}
    saved = {name: getattr(attention_plan, name) for name in pins}
    try:
        for name, value in pins.items():
            setattr(attention_plan, name, value)
        base = {"D": d} if WINDOW or "CAUSAL =" not in source else {"D": d, "CAUSAL": causal}
        kern = tkjit.compile(source, filename=name, constants=base | constants, cache=False, **extra)
        kern.binary  # compile now, while the pins hold (the stages are made lazily)
        return kern
    finally:
        for name, value in saved.items():
            setattr(attention_plan, name, value)


def batch_ms(fn, sets, per_batch=10) -> float:
    return batch_us(fn, sets, per_batch) / 1e3


def parse_pins(text: str) -> dict:
    """'PERSISTENT_CAUSAL=True,L2_BUDGET=8388608' -> a dict of them (values as Python literals)."""
    pins = {}
    for item in filter(None, text.split(",")):
        name, value = item.split("=", 1)
        pins[name] = value if name in ("REGS", "PASS") else ast.literal_eval(value)
    return pins


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shapes", nargs="+")
    ap.add_argument("--variant", action="append", default=[])
    ap.add_argument("--out")
    ap.add_argument("--nol", action="store_true")
    ap.add_argument("--window", type=int, default=0)
    ap.add_argument("--kernel", default="attention_nol")
    args = ap.parse_args()
    global NOL, WINDOW, KERNEL
    NOL, WINDOW, KERNEL = args.nol or args.window > 0, args.window, args.kernel
    variants = {"default": {}} | {v.split("=", 1)[0]: parse_pins(v.split("=", 1)[1]) for v in args.variant}
    rows = []
    for shape in args.shapes:
        parts = shape.split(":")
        d, n, causal = int(parts[0]), int(parts[1]), parts[2:] == ["causal"]
        b = TOKENS // n
        scale = 1 / math.sqrt(d)
        set_bytes = 2 * 4 * b * HEADS * n * d
        count = max(2, -(-2 * L2_BYTES // set_bytes))
        sets = [tuple(torch.randn(b, HEADS, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))
                + (torch.empty(b, HEADS, n, d, dtype=torch.bfloat16, device="cuda"),
                   torch.empty(b, HEADS, n, dtype=torch.float32, device="cuda")) for _ in range(count)]
        q, k, v, o, lse = sets[0]
        if WINDOW:
            pos = torch.arange(n, device="cuda")
            band = (pos[:, None] - pos[None, :] >= 0) & (pos[:, None] - pos[None, :] < WINDOW)
            ref = F.scaled_dot_product_attention(q, k, v, attn_mask=band, scale=scale)
            del band
            causal = True  # the yardstick: cuDNN's full causal attention
        else:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        fns = {"cudnn": lambda q_, k_, v_, o_, l_: F.scaled_dot_product_attention(
            q_, k_, v_, is_causal=causal, scale=scale)}
        errors = {}
        for name, pins in variants.items():
            kern = variant_kernel(d, causal, pins)
            o.fill_(float("nan"))
            if WINDOW:
                kern(q, k, v, o, scale, WINDOW)
                fns[name] = (lambda kk: lambda q_, k_, v_, o_, l_: kk(q_, k_, v_, o_, scale, WINDOW))(kern)
            elif NOL:
                kern(q, k, v, o, scale)
                fns[name] = (lambda kk: lambda q_, k_, v_, o_, l_: kk(q_, k_, v_, o_, scale))(kern)
            else:
                kern(q, k, v, o, lse, scale)
                fns[name] = (lambda kk: lambda q_, k_, v_, o_, l_: kk(q_, k_, v_, o_, l_, scale))(kern)
            errors[name] = ((o.float() - ref.float()).norm() / ref.float().norm()).item()
            if not errors[name] < 2e-2:
                raise SystemExit(f"{name} at D={d} N={n}: relative error {errors[name]:.3e} against cuDNN")
        times = {name: [] for name in fns}
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            for fn in fns.values():
                batch_ms(fn, sets, 2)
            for _ in range(15):
                for name, fn in fns.items():
                    times[name].append(batch_ms(fn, sets))
        med = {name: statistics.median(t) for name, t in times.items()}
        flops = 4.0 * b * HEADS * n * n * d / (2 if causal else 1)
        for name in variants:
            row = {"kernel": "attention_window" if WINDOW else KERNEL if NOL else "attention",
                   "window": WINDOW or None, "D": d, "N": n, "causal": causal, "variant": name, "pins": {k: v for k, v in variants[name].items()},
                   "ms": med[name], "tflops": flops / med[name] / 1e9, "cudnn_ms": med["cudnn"],
                   "ratio": med["cudnn"] / med[name], "rel_err_vs_cudnn": errors[name]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    print(table(rows))


def table(rows: list[dict]) -> str:
    """Shapes down, variants across: each cell the ratio cuDNN ms / ours (higher is better)."""
    names = list(dict.fromkeys(r["variant"] for r in rows))
    shapes = list(dict.fromkeys((r["D"], r["N"], r["causal"]) for r in rows))
    cell = {(r["D"], r["N"], r["causal"], r["variant"]): r["ratio"] for r in rows}
    lines = ["shape".ljust(16) + "".join(n[:10].rjust(11) for n in names)]
    for d, n, causal in shapes:
        label = f"D{d} N{n}" + (" causal" if causal else "")
        lines.append(label.ljust(16) + "".join(
            (f"{cell[(d, n, causal, v)]:.3f}" if (d, n, causal, v) in cell else "-").rjust(11) for v in names))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
