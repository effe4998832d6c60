"""Probe: what a fused bias + GELU epilogue costs cuBLAS itself, beside tkjit's (issue 17's target
"GEMM + bias + activation >= 0.97x of cuBLAS's plain matmul" asks for a free epilogue).

Times, with the generality table's method (L2-flushed calls, ``gemm_variants.timed_flushed``):
cuBLAS's plain ``torch.mm``; cuBLASLt's fused bias + GELU epilogue
(``torch._addmm_activation(bias, a, b, use_gelu=True)``: the tanh form); tkjit's bias + erf gelu
example and its one-token gelu_tanh edit, each through the default compile (``@fill_sms`` picks the
tile per shape). Checks every output against float32 torch first (NaN-poisoned).

    python3 benchmarks/probes/epilogue_cost_cublaslt.py [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import tkjit

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
SOURCE = (ROOT / "examples" / "gemm_bias_gelu.tk").read_text()


def main() -> None:
    from gemm_variants import timed_flushed
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    erf = tkjit.compile(SOURCE, filename="gemm_bias_gelu.tk")
    tanh = tkjit.compile(SOURCE.replace("cvt<bf16>(gelu(", "cvt<bf16>(gelu_tanh("), filename="gemm_bias_gelu_tanh.tk")
    rows = []
    for size in (4096, 8192):
        sets = []
        for _ in range(2):
            a = torch.randn(size, size, device="cuda").bfloat16() * size ** -0.25
            b = torch.randn(size, size, device="cuda").bfloat16() * size ** -0.25
            bias = torch.randn(size, device="cuda").bfloat16()
            sets.append((a, b, bias, torch.full((size, size), float("nan"), dtype=torch.bfloat16, device="cuda")))
        a, b, bias, c = sets[0]
        want_erf = F.gelu(a.float() @ b.float() + bias.float())
        want_tanh = F.gelu(a.float() @ b.float() + bias.float(), approximate="tanh")
        errs = {}
        for name, fn, want in (("tkjit_erf", lambda: erf(a, b, bias, c), want_erf),
                               ("tkjit_tanh", lambda: tanh(a, b, bias, c), want_tanh),
                               ("cublaslt_gelu", lambda: c.copy_(torch._addmm_activation(bias, a, b, use_gelu=True)),
                                want_tanh)):
            c.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            errs[name] = ((c.float() - want).norm() / want.norm()).item()
        fns = {"cublas_plain": lambda a, b, bias, c: torch.mm(a, b, out=c),
               "cublaslt_gelu": lambda a, b, bias, c: torch._addmm_activation(bias, a, b, use_gelu=True),
               "tkjit_erf": lambda a, b, bias, c: erf(a, b, bias, c),
               "tkjit_tanh": lambda a, b, bias, c: tanh(a, b, bias, c)}
        us = timed_flushed(fns, sets)
        row = {"size": size, "err": errs, "us": us,
               "vs_plain": {k: round(us["cublas_plain"] / v, 4) for k, v in us.items()}}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
