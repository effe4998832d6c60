"""One attention forward through the Hopper path, checked against float64 SDPA: a small process
for compute-sanitizer.

    compute-sanitizer --tool memcheck python3 tests/gpu/attention_sanitize.py D CAUSAL N [B H HKV]
    TKJIT_SANITIZE_LOWERING=general compute-sanitizer ...   # through the general lowering

Fresh random inputs, O and L poisoned with NaN; prints the errors and exits non-zero when they
are out of tolerance or an output element was left unwritten.
"""
from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import torch

import tkjit

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "attention.tk"


def main(d: int, causal: bool, n: int, b: int = 1, h: int = 4, hkv: int = 2) -> int:
    lowering = os.environ.get("TKJIT_SANITIZE_LOWERING", "auto")
    kernel = tkjit.compile(EXAMPLE.read_text(), filename=EXAMPLE.name, constants={"D": d, "CAUSAL": causal},
                           lowering=lowering)
    q = torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda")
    k, v = (torch.randn(b, hkv, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    o = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, n), float("nan"), dtype=torch.float32, device="cuda")
    scale = 1 / math.sqrt(d)
    kernel(q, k, v, o, lse, scale)
    torch.cuda.synchronize()
    rep = h // hkv
    kk, vv = (t.double().repeat_interleave(rep, dim=1) for t in (k, v))
    s = (q.double() @ kk.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
    ref_o, ref_l = torch.softmax(s, -1) @ vv, torch.logsumexp(s, -1)
    err_o = ((o.double() - ref_o).norm() / ref_o.norm()).item()
    err_l = (lse.double() - ref_l).abs().max().item()
    print(f"attention D={d} causal={causal} N={n}: O relative error {err_o:.2e}, L max error {err_l:.2e}")
    ok = err_o <= 1e-2 and err_l <= 1e-2 and not torch.isnan(o).any() and not torch.isnan(lse).any()
    return 0 if ok else 1


if __name__ == "__main__":
    argv = sys.argv[1:]
    sys.exit(main(int(argv[0]), argv[1] in ("1", "true", "True"), int(argv[2]), *map(int, argv[3:])))
