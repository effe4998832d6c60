"""examples/attention.tk (the general lowering) against SDPA cuDNN, same run (GPU).

    python3 benchmarks/attention_general.py [--shapes 128:4096,64:8192:causal] [--json OUT.json]
        [--variant NAME[@D]=PIPELINE]   # also the general lowering under this pass pipeline
        [--variant NAME[@D]=pin:MODULE:ATTR=VALUE[+PIPELINE]]   # ... with a module constant pinned
                                                               # (and under PIPELINE)
        [--profile D:N[:causal]]   # three launches of each kernel (with --nol: nol too), for ncu
        [--nol]   # also examples/attention_nol.tk (no L output)
        [--nol-variant NAME[@D]=PIPELINE]   # also attention_nol.tk under this pass pipeline
        [--jobs N]   # compile every row's kernels first, N at a time (the disk cache serves the rows)

Rows: D 64 and 128, causal and not, N 1024 .. 16384 (issue 18's "Done when"), with B·N = 16384
tokens and 16 heads. Each row times the example (``general``: the default compile), each variant
and SDPA cuDNN in interleaved batches (CUDA events, median of 15 batches of 10 launches, the order
reversed every other batch, inputs rotating over enough sets to exceed the 60 MB L2). Before
timing, every kernel runs on NaN-poisoned outputs and its O and L are checked against float64
torch on two heads. ``general_vs_cudnn`` is cuDNN ms / general ms; ``NAME_vs_general`` general ms
/ variant ms. With ``--nol`` the row also times attention_nol.tk (the same kernel without its L
store; O checked the same way): ``nol_vs_general`` is general ms / nol ms (issue 18: dropping the
L store never makes a kernel slower, so >= 1), ``nol_vs_cudnn`` cuDNN ms / nol ms. Each
``--nol-variant NAME=PIPELINE`` adds attention_nol.tk under that pipeline: ``NAME_vs_nol`` is nol ms
/ NAME ms, ``NAME_vs_general`` general ms / NAME ms. Until
2026-11-27 each row also timed the attention template, deleted that day once the general lowering
was within 2% of it on every row (``benchmarks/results/2026-11-27-nvidia-h200-s14-*``).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import torch

import tkjit

ROOT = Path(__file__).resolve().parent.parent
SOURCE = (ROOT / "examples" / "attention.tk").read_text()
NOL_SOURCE = (ROOT / "examples" / "attention_nol.tk").read_text()
L2_BYTES = 60 << 20
TOKENS, HEADS = 16384, 16
DEFAULT_SHAPES = [f"{d}:{n}{c}" for d in (128, 64) for c in ("", ":causal")
                  for n in (1024, 2048, 4096, 8192, 16384)]


def batch_ms(fn, sets, per_batch=10) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(per_batch):
        fn(*sets[i % len(sets)])
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / per_batch


def interleaved_ms(fns: dict, sets, rounds: int = 15) -> dict[str, float]:
    """Median ms per launch of each callable: one warm-up batch each, then ``rounds`` batches of
    every callable, the order reversed every other round (clock and power drift fall on all)."""
    times = {name: [] for name in fns}
    for fn in fns.values():
        batch_ms(fn, sets, 3)
    for i in range(rounds):
        for name, fn in (list(fns.items()) if i % 2 == 0 else list(reversed(fns.items()))):
            times[name].append(batch_ms(fn, sets))
    return {name: statistics.median(t) for name, t in times.items()}


def parse(shape: str) -> tuple[int, int, bool]:
    parts = shape.split(":")
    return int(parts[0]), int(parts[1]), parts[2:] == ["causal"]


def kernels(d: int, causal: bool, variants: dict | None = None, nol: bool = False,
            nol_variants: dict | None = None) -> dict:
    """general (the default compile), each variant (under its pass pipeline), with ``nol``
    attention_nol.tk, and each of ``nol_variants`` (attention_nol.tk under its pipeline)."""
    consts = {"D": d, "CAUSAL": causal}
    out = {"general": tkjit.compile(SOURCE, filename="attention.tk", constants=consts)}
    if nol:
        out["nol"] = tkjit.compile(NOL_SOURCE, filename="attention_nol.tk", constants=consts,
                                   lowering="general")
    for name, (only_d, pipeline) in (nol_variants or {}).items():
        if only_d in (None, d):
            out[name] = tkjit.compile(NOL_SOURCE, filename="attention_nol.tk", constants=consts,
                                      lowering="general", pipeline=pipeline)
    for name, (only_d, pipeline) in (variants or {}).items():
        if only_d in (None, d) and pipeline.startswith("pin:"):
            out[name] = pinned(pipeline[4:], consts)
        elif only_d in (None, d):
            out[name] = tkjit.compile(SOURCE, filename="attention.tk", constants=consts,
                                      lowering="general", pipeline=pipeline)
    return out


def pinned(pin: str, consts: dict):
    """The general lowering with a module constant pinned while it compiles (``MODULE:ATTR=VALUE``,
    e.g. ``tkjit.codegen.hopper.lower_consumer:TREE_REDUCTIONS=False``, optionally ``+PIPELINE``:
    under that pass pipeline), without the disk cache (its key does not see the constant),
    assembled at once."""
    import ast
    import importlib
    pin, _, pipeline = pin.partition("+")
    extra = {"pipeline": pipeline} if pipeline else {}
    where, _, value = pin.partition("=")
    module, _, attr = where.partition(":")
    mod = importlib.import_module(module)
    old = getattr(mod, attr)
    setattr(mod, attr, ast.literal_eval(value))
    try:
        k = tkjit.compile(SOURCE, filename="attention.tk", constants=consts, lowering="general",
                          cache=False, **extra)
        k.binary  # noqa: B018 - the PTX is made now, under the pin
    finally:
        setattr(mod, attr, old)
    return k


def reference(q, k, v, causal: bool, scale: float):
    """O and the natural-log L of heads 0 and H-1 of batch 0, in float64."""
    out = []
    for h in (0, q.shape[1] - 1):
        s = (q[0, h].double() @ k[0, h].double().T) * scale
        if causal:
            n = s.shape[0]
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
        out.append((torch.softmax(s, -1) @ v[0, h].double(), torch.logsumexp(s, -1)))
    return out


def check(kern, sets, causal: bool, scale: float, with_l: bool = True) -> dict:
    q, k, v, o, lse = sets[0]
    o.fill_(float("nan"))
    lse.fill_(float("nan") if with_l else 0.0)
    if with_l:
        kern(q, k, v, o, lse, scale)
    else:
        kern(q, k, v, o, scale)
    torch.cuda.synchronize()
    errs = {"o": 0.0, "l": 0.0, "nan": int(o.isnan().sum().item() + lse.isnan().sum().item())}
    for (ref_o, ref_l), h in zip(reference(q, k, v, causal, scale), (0, q.shape[1] - 1)):
        errs["o"] = max(errs["o"], ((o[0, h].double() - ref_o).norm() / ref_o.norm()).item())
        if with_l:
            errs["l"] = max(errs["l"], (lse[0, h].double() - ref_l).abs().max().item())
    return errs


def input_sets(b: int, n: int, d: int) -> list[tuple]:
    """Fresh random (Q, K, V) and output (O, L) buffers, enough sets to exceed the L2 twice (the
    timed launches rotate over them)."""
    set_bytes = 2 * 4 * b * HEADS * n * d
    return [tuple(torch.randn(b, HEADS, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))
            + (torch.empty(b, HEADS, n, d, dtype=torch.bfloat16, device="cuda"),
               torch.empty(b, HEADS, n, dtype=torch.float32, device="cuda"))
            for _ in range(max(2, -(-2 * L2_BYTES // set_bytes)))]


def row(shape: str, variants: dict, nol: bool = False, nol_variants: dict | None = None) -> dict:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    d, n, causal = parse(shape)
    b, scale = TOKENS // n, 1 / math.sqrt(d)
    sets = input_sets(b, n, d)
    ks = kernels(d, causal, variants, nol, nol_variants)
    no_l = {"nol", *(nol_variants or {})}
    out = {"D": d, "N": n, "B": b, "H": HEADS, "causal": causal,
           "backend": {name: f"{k.metadata.get('backend')}/{k.metadata.get('lowering', '-')}"
                       for name, k in ks.items()}}
    for name, k in ks.items():
        out[f"{name}_err"] = check(k, sets, causal, scale, with_l=name not in no_l)
    fns = {name: (lambda kk: lambda q, k_, v, o, l: kk(q, k_, v, o, l, scale))(k) for name, k in ks.items()}
    for name in no_l & set(ks):
        fns[name] = (lambda kk: lambda q, k_, v, o, l: kk(q, k_, v, o, scale))(ks[name])
    fns["cudnn"] = lambda q, k_, v, o, l: torch.nn.functional.scaled_dot_product_attention(
        q, k_, v, is_causal=causal, scale=scale)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        med = interleaved_ms(fns, sets)
    out.update({f"{name}_ms": round(v, 5) for name, v in med.items()})
    out["general_vs_cudnn"] = round(med["cudnn"] / med["general"], 4)
    for name in ks:
        if name not in ("general", "nol"):
            out[f"{name}_vs_general"] = round(med["general"] / med[name], 4)
        if name in no_l and name != "nol" and "nol" in ks:
            out[f"{name}_vs_nol"] = round(med["nol"] / med[name], 4)
    if "nol" in ks:
        out["nol_vs_general"] = round(med["general"] / med["nol"], 4)
        out["nol_vs_cudnn"] = round(med["cudnn"] / med["nol"], 4)
    return out


def warm(job: tuple) -> str:
    """Compile one row's kernels into the disk cache (ptxas included), in a worker process."""
    shape, variants, nol, nol_variants = job
    d, _, causal = parse(shape)
    variants = {k: v for k, v in variants.items() if not v[1].startswith("pin:")}  # not cached
    for k in kernels(d, causal, variants, nol, nol_variants).values():
        k.binary  # noqa: B018 - assemble now
    return shape


def profile(shape: str, nol: bool = False) -> None:
    """Three launches of each kernel of the row (with ``nol`` also attention_nol.tk), for ncu."""
    d, n, causal = parse(shape)
    b = TOKENS // n
    q, k, v = (torch.randn(b, HEADS, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    o, lse = torch.empty_like(q), torch.empty(b, HEADS, n, device="cuda")
    for name, kern in kernels(d, causal, nol=nol).items():
        for _ in range(3):
            kern(q, k, v, o, d ** -0.5) if name == "nol" else kern(q, k, v, o, lse, d ** -0.5)
    torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=",".join(DEFAULT_SHAPES))
    ap.add_argument("--json")
    ap.add_argument("--profile")
    ap.add_argument("--variant", action="append", default=[])
    ap.add_argument("--nol", action="store_true")
    ap.add_argument("--nol-variant", action="append", default=[])
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args()
    if args.profile:
        return profile(args.profile, args.nol)
    variants, nol_variants = {}, {}
    for given, into in ((args.variant, variants), (args.nol_variant, nol_variants)):
        for v in given:
            name, pipeline = v.split("=", 1)
            name, _, only = name.partition("@")
            into[name] = (int(only) if only else None, pipeline)
    if args.jobs > 1:  # before CUDA is initialized in this process: the workers are forked
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(args.jobs) as pool:
            list(pool.map(warm, [(s, variants, args.nol, nol_variants) for s in args.shapes.split(",")]))
    rows = []
    for shape in args.shapes.split(","):
        r = row(shape, variants, args.nol, nol_variants)
        print(json.dumps(r), flush=True)
        rows.append(r)
    print("shape".ljust(20) + "gen/cudnn")
    for r in rows:
        label = f"D{r['D']} N{r['N']}" + (" causal" if r["causal"] else "")
        extra = "  ".join(f"{k}={v}" for k, v in r.items() if k.endswith(("_vs_general", "_vs_nol"))
                          or k.startswith("nol_vs"))
        print(label.ljust(20) + f"{r['general_vs_cudnn']:9.3f}  {extra}")
    if args.json:
        info = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
        Path(args.json).write_text(json.dumps({"info": info, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
