"""Which binary a causal attention launch past the trip bound should run (GPU probe).

    python3 benchmarks/probes/by_trips_binaries.py [--shapes 128:4096,...] [--json OUT.json]

For examples/attention.tk (with L) and attention_nol.tk (without), causal, through the general
lowering, timed in the same interleaved batches as benchmarks/attention_general.py:

* ``pers``: the persistent by_trips binary launched one CTA per tile (its own grid expression,
  no dispatch: what every launch ran before tkjit/trip_dispatch.py), split K/V rings of 2 stages;
* ``grid``: the binary compiled with one CTA per tile (grid{overlap=-1}, what the dispatch
  launches past the bound): one K+V ring of 3 stages;
* ``grid2``: that binary with 2 stages (pipeline{stages=2}: split rings as the persistent one);
* ``tmpl``: the attention template (attention.tk only), and SDPA cuDNN.

Outputs checked against float64 (two heads) before timing."""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

import tkjit
from tkjit.kernel import CompiledKernel
from tkjit.passes import DEFAULT_PIPELINE

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from attention_general import HEADS, TOKENS, check, input_sets, interleaved_ms  # noqa: E402

GRID = DEFAULT_PIPELINE.replace("grid,", "grid{overlap=-1},")
PIPES = {"grid": GRID, "grid2": GRID.replace("pipeline,", "pipeline{stages=2},")}


def made(name: str, d: int) -> dict:
    src = (ROOT / "examples" / f"{name}.tk").read_text()
    consts = {"D": d, "CAUSAL": True}
    general = tkjit.compile(src, filename=f"{name}.tk", constants=consts, lowering="general")
    out = {"pers": CompiledKernel(general._result, fill_sms=False)}  # no dispatch: launched as it is
    for label, pipe in PIPES.items():
        out[label] = tkjit.compile(src, filename=f"{name}.tk", constants=consts, lowering="general", pipeline=pipe)
    if name == "attention":
        out["tmpl"] = tkjit.compile(src, filename=f"{name}.tk", constants=consts, lowering="template")
    return out


def row(d: int, n: int) -> dict:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    b, scale = TOKENS // n, 1 / math.sqrt(d)
    sets = input_sets(b, n, d)
    fns, errs, smem = {}, {}, {}
    for name in ("attention", "attention_nol"):
        short = "L" if name == "attention" else "nol"
        for label, k in made(name, d).items():
            key = f"{short}_{label}"
            with_l = name == "attention"
            errs[key] = check(k, sets, True, scale, with_l=with_l)
            smem[key] = k.metadata.get("smem_bytes")
            fns[key] = ((lambda kk: lambda q, k_, v, o, l: kk(q, k_, v, o, l, scale)) if with_l else
                        (lambda kk: lambda q, k_, v, o, l: kk(q, k_, v, o, scale)))(k)
    fns["cudnn"] = lambda q, k_, v, o, l: torch.nn.functional.scaled_dot_product_attention(
        q, k_, v, is_causal=True, scale=scale)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        med = interleaved_ms(fns, sets)
    return {"D": d, "N": n, "B": b, "H": HEADS, "err": errs, "smem": smem,
            **{f"{k}_ms": round(v, 5) for k, v in med.items()},
            **{f"{k}_vs_cudnn": round(med["cudnn"] / v, 4) for k, v in med.items() if k != "cudnn"}}


def profile(what: str) -> None:
    d, n, label = what.split(":")
    d, n = int(d), int(n)
    name, _, kind = label.partition("_")
    kern = made("attention" if name == "L" else "attention_nol", d)[kind]
    b = TOKENS // n
    q, k, v = (torch.randn(b, HEADS, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    o, lse = torch.empty_like(q), torch.empty(b, HEADS, n, device="cuda")
    for _ in range(3):
        kern(q, k, v, o, lse, d ** -0.5) if name == "L" else kern(q, k, v, o, d ** -0.5)
    torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="128:2048,128:4096,128:8192,64:4096")
    ap.add_argument("--json")
    ap.add_argument("--profile", metavar="D:N:KERNEL", help="three launches of one kernel (L_pers, "
                    "nol_grid, ...) for ncu to look at")
    args = ap.parse_args()
    if args.profile:
        return profile(args.profile)
    rows = []
    for s in args.shapes.split(","):
        d, n = map(int, s.split(":"))
        r = row(d, n)
        rows.append(r)
        print(json.dumps(r), flush=True)
    keys = [k[:-9] for k in rows[0] if k.endswith("_vs_cudnn")]
    print("D    N      " + " ".join(k.rjust(9) for k in keys) + "   (x cuDNN)")
    for r in rows:
        print(f"{r['D']:<4} {r['N']:<6} " + " ".join(f"{r[k + '_vs_cudnn']:9.3f}" for k in keys))
    if args.json:
        info = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
        Path(args.json).write_text(json.dumps({"info": info, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
