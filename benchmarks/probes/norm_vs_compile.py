"""Probe: the RMSNorm and residual + LayerNorm examples at D = 1024 against torch.compile's kernels
(which the s16 generality run measured 7-8% faster: 0.93 / 0.92). Prints the Triton source and
launch configuration Inductor generated, times both sides interleaved with the generality table's
method (triton do_bench: L2 flushed between calls), and ``--profile SIDE`` runs one side a few
times for ncu.

    python3 benchmarks/probes/norm_vs_compile.py --code --time [--json OUT] [--d 1024]
    ncu --section SpeedOfLight --section Occupancy --section LaunchStats -c 4 \\
        python3 benchmarks/probes/norm_vs_compile.py --profile tkjit-rmsnorm
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

import tkjit

ROOT = Path(__file__).resolve().parents[2]
ROWS = {1024: 65536, 2048: 32768, 4096: 16384, 8192: 8192}


def rms(x, w, eps: float):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def resln(x, res, w, b, eps: float):
    h = x.float() + res.float()
    y = torch.nn.functional.layer_norm(h, (h.shape[-1],), w.float(), b.float(), eps)
    return h.to(x.dtype), y.to(x.dtype)


def cases(d: int):
    r = ROWS[d]
    bf = dict(dtype=torch.bfloat16, device="cuda")
    x = (torch.randn(r, d, device="cuda") * 2 + 0.5).bfloat16()
    res, w, b = torch.randn(r, d, **bf), torch.randn(d, **bf), torch.randn(d, **bf)
    y, h = torch.empty(r, d, **bf), torch.empty(r, d, **bf)
    k_rms = tkjit.load(ROOT / "examples" / "rmsnorm.tk", constants={"D": d})
    k_res = tkjit.load(ROOT / "examples" / "residual_layernorm.tk", constants={"D": d})
    c_rms = torch.compile(rms)
    c_res = torch.compile(resln)
    return {
        "rmsnorm": (lambda: k_rms(x, w, y, 1e-6), lambda: c_rms(x, w, 1e-6), 2.0 * (2 * r * d + d),
                    (c_rms, (x, w, 1e-6)), lambda: (y, rms(x, w, 1e-6))),
        "residual_layernorm": (lambda: k_res(x, res, w, b, h, y, 1e-5), lambda: c_res(x, res, w, b, 1e-5),
                               2.0 * (4 * r * d + 2 * d), (c_res, (x, res, w, b, 1e-5)),
                               lambda: (y, resln(x, res, w, b, 1e-5)[1])),
    }


def code(cs) -> None:
    from torch._inductor.utils import run_and_get_code
    for name, (_, _, _, (fn, args), _) in cs.items():
        _, sources = run_and_get_code(fn, *args)
        print(f"===== {name}: Inductor's code =====")
        for src in sources:
            for line in src.splitlines():
                if any(t in line for t in ("@triton", "def triton", "xnumel", "rnumel", "r0_numel", "XBLOCK",
                                           "RBLOCK", "R0_BLOCK", "num_warps", "num_stages", "tl.load", "tl.store",
                                           "grid(", "eviction", "reduction_hint", ".run(")):
                    print("   ", line.strip()[:220])


def timing(cs, out: str | None) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gemm_variants import timed_flushed
    rows = []
    for name, (mine, theirs, nbytes, _, check) in cs.items():
        mine()
        torch.cuda.synchronize()
        got, want = check()
        err = ((got.float() - want.float()).norm() / want.float().norm()).item()
        us = timed_flushed({"tkjit": mine, "compile": theirs}, [()], rep_ms=640.0)
        med = {k: v / 1e3 for k, v in us.items()}  # ms
        row = {"kernel": name, "err": err, "tkjit_us": med["tkjit"] * 1e3, "compile_us": med["compile"] * 1e3,
               "compile_over_tkjit": med["compile"] / med["tkjit"], "tkjit_GBps": nbytes / med["tkjit"] / 1e6,
               "compile_GBps": nbytes / med["compile"] / 1e6}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if out:
        Path(out).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                         "rows": rows}, indent=1) + "\n")


def profile(cs, which: str) -> None:
    side, name = which.split("-", 1)
    mine, theirs, *_ = cs[name]
    fn = mine if side == "tkjit" else theirs
    for _ in range(6):
        fn()
    torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=1024)
    ap.add_argument("--code", action="store_true")
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--profile")
    args = ap.parse_args()
    cs = cases(args.d)
    if args.code:
        code(cs)
    if args.time:
        timing(cs, args.json)
    if args.profile:
        profile(cs, args.profile)


if __name__ == "__main__":
    main()
