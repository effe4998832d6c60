"""Probe for the next GPU session: multicast pairs with ping-pong consumers (pairs.py refuses them).

Session 16 lifted the refusal once and the pair hung on an H200 at 4096^3; the cause found after
(the ping-pong branch of the protocol builder had no start/exit cluster barriers) is fixed in
``sync_protocol.paired`` and now caught on the CPU three ways (pairs.py's docstring). This script
lifts the refusal in-process (nothing else changes), checks the bias + gelu example at 128 x 128
on ragged and odd-row shapes against float32 torch (outputs NaN-poisoned), then times it paired
and unpaired against cuBLAS's plain matmul with the generality table's method (L2-flushed calls,
``gemm_variants.timed_flushed``). Run each part under a timeout -- a hang must not eat the call:

    timeout 90 python3 benchmarks/probes/pingpong_pairs.py --check
    timeout 240 python3 benchmarks/probes/pingpong_pairs.py --time [--json OUT]

If both hold (no hang, correct, faster), lift the refusal in pairs.py with this evidence and let
the grid pass ask for the pair where ping-pong runs (measured).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import tkjit
import tkjit.passes.pairs as pairs
from tkjit.passes import default_pipeline

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
SOURCE = (ROOT / "examples" / "gemm_bias_gelu.tk").read_text()
PAIRED = default_pipeline("sm_90a").replace("grid,", "grid{multicast=2},", 1)


def lift_refusal() -> None:
    """pairs.pair_plan with ping-pong consumers let through (the attribute hidden while it plans)."""
    plan = pairs.pair_plan

    def lifted(kernel):
        pingpong = kernel.attrs.pop("pingpong", None)
        try:
            return plan(kernel)
        finally:
            if pingpong is not None:
                kernel.attrs["pingpong"] = pingpong
    pairs.pair_plan = lifted


def kernels():
    lift_refusal()
    paired = tkjit.compile(SOURCE, filename="gemm_bias_gelu.tk", constants={"BN": 128}, pipeline=PAIRED,
                           cache=False)
    assert "barrier.cluster" in paired.asm["ptx"] and paired.ir.attrs.get("pingpong"), "not a ping-pong pair"
    alone = tkjit.compile(SOURCE, filename="gemm_bias_gelu.tk", constants={"BN": 128}, cache=False)
    return paired, alone


def inputs(m, n, k):
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda") * k ** -0.25
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda") * k ** -0.25
    bias = torch.randn(n, dtype=torch.bfloat16, device="cuda")
    return a, b, bias


def check() -> None:
    paired, _ = kernels()
    for m, n, k in [(72, 100, 64), (384, 256, 192), (1000, 3000, 520), (4096, 4096, 4096)]:
        a, b, bias = inputs(m, n, k)
        c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        paired(a, b, bias, c)
        torch.cuda.synchronize()
        ref = F.gelu(a.float() @ b.float() + bias.float())
        print(json.dumps({"shape": [m, n, k], "nan": int(c.isnan().sum()),
                          "err": ((c.float() - ref).norm() / ref.norm()).item()}), flush=True)


def timing(out: str | None) -> None:
    from gemm_variants import timed_flushed
    paired, alone = kernels()
    rows = []
    for size in (4096, 8192):
        sets = []
        for _ in range(2):
            a, b, bias = inputs(size, size, size)
            sets.append((a, b, bias, torch.empty(size, size, dtype=torch.bfloat16, device="cuda")))
        fns = {"cublas": lambda a, b, bias, c: torch.mm(a, b, out=c),
               "pp128": lambda a, b, bias, c: alone(a, b, bias, c),
               "pp128_pair": lambda a, b, bias, c: paired(a, b, bias, c)}
        us = timed_flushed(fns, sets)
        row = {"size": size, **{f"{k}_us": round(v, 2) for k, v in us.items()},
               "pp128_vs_cublas": round(us["cublas"] / us["pp128"], 4),
               "pair_vs_cublas": round(us["cublas"] / us["pp128_pair"], 4)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if out:
        Path(out).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.check:
        check()
    if args.time:
        timing(args.json)


if __name__ == "__main__":
    main()
