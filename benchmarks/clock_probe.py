"""Does a sustained kernel lower the GPU's clock? SM clock, power and time per call while one
kernel runs back to back (GPU).

    python3 benchmarks/clock_probe.py [--seconds 3] [--out probe.json] [--only gemm]
        [--gemm-variant mc='pass:grid{multicast=2}' ...]

For tkjit's GEMM (4096³ and 8192³) and attention (D=128 N=8192, D=64 N=4096), their references
(torch.matmul, SDPA cuDNN) and tkjit once more, in turn: launch the call back to back for ``--seconds`` while
``nvidia-smi`` samples the SM clock, the power draw and the temperature every 50 ms; report the
time per call over the first and the last fifth of the run and the median clock and power of
the last half. A clock that falls over the run means whichever side of a comparison is timed
second runs on a hotter, slower GPU: why benchmarks/tkbench/timing.py alternates the two.
A GPU held at its power limit runs the kernel that spends less energy per call at a higher
clock; ``--gemm-variant`` (gemm_variants.py's syntax) adds GEMM variants to compare so, each in
its own steady state.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tkjit

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def sustained(fn, seconds: float) -> dict:
    """Run ``fn`` back to back for ``seconds`` in batches of events; sample clocks meanwhile."""
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                            "--format=csv,noheader,nounits", "-lms", "50"],
                           stdout=subprocess.PIPE, text=True)
    batches, begin = [], time.perf_counter()
    try:
        while time.perf_counter() - begin < seconds:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(10):
                fn()
            end.record()
            end.synchronize()
            batches.append((time.perf_counter() - begin, start.elapsed_time(end) / 10))
    finally:
        smi.terminate()
    samples = []
    for line in smi.stdout.read().splitlines():
        try:
            samples.append([float(x) for x in line.split(",")])
        except ValueError:
            continue
    fifth = max(1, len(batches) // 5)
    late = samples[len(samples) // 2:] or samples
    return {"first_ms": statistics.median(t for _, t in batches[:fifth]),
            "last_ms": statistics.median(t for _, t in batches[-fifth:]),
            "calls": 10 * len(batches),
            "sm_mhz": statistics.median(s[0] for s in late) if late else None,
            "power_w": statistics.median(s[1] for s in late) if late else None,
            "temp_c": max(s[2] for s in samples) if samples else None}


def cases(only: str | None, variants: dict):
    bf16 = torch.bfloat16
    if only in (None, "gemm"):
        from gemm_variants import variant_kernel
        kernels = {"tkjit": tkjit.load(str(EXAMPLES / "gemm.tk"))}
        kernels.update({f"tkjit {name}": variant_kernel(edit) for name, edit in variants.items()})
        for size in (4096, 8192):
            a, b = (torch.randn(size, size, dtype=bf16, device="cuda") for _ in range(2))
            c = torch.empty(size, size, dtype=bf16, device="cuda")
            sides = [(name, lambda g=g, a=a, b=b, c=c: g(a, b, c)) for name, g in kernels.items()]
            yield f"gemm {size}³", sides + [("reference", lambda a=a, b=b: torch.matmul(a, b))]
    if only not in (None, "attention"):
        return
    for d, n in ((128, 8192), (64, 4096)):
        attn = tkjit.load(str(EXAMPLES / "attention.tk"), constants={"D": d, "CAUSAL": False})
        bsz = 16384 // n
        q, k, v = (torch.randn(bsz, 16, n, d, dtype=bf16, device="cuda") for _ in range(3))
        o = torch.empty_like(q)
        lse = torch.empty(bsz, 16, n, dtype=torch.float32, device="cuda")
        scale = d ** -0.5

        def cudnn(q=q, k=k, v=v, scale=scale):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                F.scaled_dot_product_attention(q, k, v, scale=scale)
        ours = (lambda attn=attn, q=q, k=k, v=v, o=o, lse=lse, scale=scale: attn(q, k, v, o, lse, scale))
        yield f"attention D={d} N={n}", [("tkjit", ours), ("reference", cudnn)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", choices=("gemm", "attention"))
    parser.add_argument("--gemm-variant", action="append", default=[], metavar="NAME=EDIT")
    args = parser.parse_args()
    variants = dict(v.split("=", 1) for v in args.gemm_variant)
    rows = []
    for name, sides in cases(args.only, variants):
        for side, fn in [*sides, ("tkjit again", sides[0][1])]:   # the drift over the case
            fn()
            torch.cuda.synchronize()
            time.sleep(1.0)   # let the clock recover between runs
            row = {"case": name, "side": side, **sustained(fn, args.seconds)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    print(f"{'case':24s} {'side':16s} {'first ms':>9s} {'last ms':>9s} {'MHz':>6s} {'W':>6s} {'°C':>4s}")
    for r in rows:
        print(f"{r['case']:24s} {r['side']:16s} {r['first_ms']:9.4f} {r['last_ms']:9.4f} "
              f"{r['sm_mhz'] or 0:6.0f} {r['power_w'] or 0:6.0f} {r['temp_c'] or 0:4.0f}")


if __name__ == "__main__":
    main()
