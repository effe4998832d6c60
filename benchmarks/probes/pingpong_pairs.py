"""Probe for the next GPU session: multicast pairs with ping-pong consumers (pairs.py refuses them).

Session 16 lifted the refusal once and the pair hung on an H200 at 4096^3; the cause found after
(the ping-pong branch of the protocol builder had no start/exit cluster barriers) is fixed in
``sync_protocol.paired`` and now caught on the CPU three ways (pairs.py's docstring). Session 17's
H200 run still hung at (1000, 3000, 520), the first shape with more units than pairs: the
consumers' tile walk strode by %nctaid.x, the producer's by %nclusterid.x (fixed:
lower_producer.walk_stride; caught by the PTX simulator, tests/test_general_multicast.py). This
script lifts the refusal in-process (nothing else changes), checks the bias + gelu example at
128 x 128 on ragged and odd-row shapes, several of them with more units than pairs, against
float32 torch (outputs NaN-poisoned; each shape under its own time limit in a child process, a
hang reported as such), then times it paired and unpaired against cuBLAS's plain matmul with the
generality table's method (L2-flushed calls, ``gemm_variants.timed_flushed``). Run each part
under a timeout -- a hang must not eat the call:

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
    """pairs.pair_plan with ping-pong consumers let through (pairs.lifting_pingpong)."""
    pairs.pair_plan = pairs.lifting_pingpong()


def kernels(alone: bool = True):
    lift_refusal()
    paired = tkjit.compile(SOURCE, filename="gemm_bias_gelu.tk", constants={"BN": 128}, pipeline=PAIRED,
                           cache=False)
    assert "barrier.cluster" in paired.asm["ptx"] and paired.ir.attrs.get("pingpong"), "not a ping-pong pair"
    if not alone:
        return paired, None
    return paired, tkjit.compile(SOURCE, filename="gemm_bias_gelu.tk", constants={"BN": 128}, cache=False)


def inputs(m, n, k):
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda") * k ** -0.25
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda") * k ** -0.25
    bias = torch.randn(n, dtype=torch.bfloat16, device="cuda")
    return a, b, bias


SHAPES = [(72, 100, 64), (384, 256, 192),  # one unit per pair at most
          # more units than pairs on a 132-SM part (66 pairs): 1.5, 3, 2 and 2.4 units a pair,
          # ragged M (odd tile rows: the off-edge peer tile), N and K
          (1000, 3000, 520), (1500, 4100, 130), (2000, 2000, 300), (777, 5000, 1000),
          (4096, 4096, 4096)]
FIRST_S, NEXT_S = 45.0, 10.0
"""Seconds the first shape may take (compiles and CUDA start included), and each later one."""


def check_shapes() -> None:
    """Each shape's result, one JSON line each, as soon as it is known (the child of ``check``)."""
    paired, _ = kernels(alone=False)
    pairs_ = torch.cuda.get_device_properties(0).multi_processor_count // 2
    for m, n, k in SHAPES:
        a, b, bias = inputs(m, n, k)
        c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        paired(a, b, bias, c)
        torch.cuda.synchronize()
        ref = F.gelu(a.float() @ b.float() + bias.float())
        rows = -(-m // 128)
        units = -(-rows // 2) * -(-n // 128)  # (the pair walks units of two tile rows)
        print(json.dumps({"shape": [m, n, k], "units_per_pair": round(units / min(units, pairs_), 2),
                          "nan": int(c.isnan().sum()),
                          "err": ((c.float() - ref).norm() / ref.norm()).item()}), flush=True)


def check() -> int:
    """``check_shapes`` in a child process, each shape under its own time limit (``FIRST_S``,
    ``NEXT_S``): a shape that does not answer in time is reported as a hang and the child killed,
    so the whole check ends in about FIRST_S + NEXT_S * len(SHAPES) at worst. Returns 1 on a hang."""
    import os
    import select
    import signal
    import subprocess
    import time
    child = subprocess.Popen([sys.executable, "-u", __file__, "--check-shapes"], stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        for i, shape in enumerate(SHAPES):
            start = time.monotonic()
            limit = FIRST_S if i == 0 else NEXT_S
            ready, _, _ = select.select([child.stdout], [], [], limit)
            line = child.stdout.readline() if ready else ""
            if not line:
                print(json.dumps({"shape": list(shape), "hang": not ready,
                                  "after_s": round(time.monotonic() - start, 1),
                                  **({} if not ready else {"exit": child.wait()})}), flush=True)
                return 1
            print(line.rstrip(), flush=True)
        return 0
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()


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
    ap.add_argument("--check-shapes", action="store_true", help="(check's child: no time limits)")
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.check_shapes:
        check_shapes()
        return
    if args.check and check():
        sys.exit(1)
    if args.time:
        timing(args.json)


if __name__ == "__main__":
    main()
