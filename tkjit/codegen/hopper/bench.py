"""Time the Hopper GEMM against torch.matmul (cuBLAS) on the GPU: bf16 in, bf16 out.

    python -m tkjit.codegen.hopper.bench [SIZE ...]       (default: 4096 8192, square)
    python -m tkjit.codegen.hopper.bench 4096x4096x512    (M x N x K)
    python -m tkjit.codegen.hopper.bench --kernel my_gemm.tk 4096   (any kernel with gemm.tk's signature)

CUDA events around ``--batch`` back-to-back launches (so the host's launch cost hides behind the
GPU's work, as in a real program) after a warm-up; the median of ``--reps`` such batches, per
launch. Both run on the same inputs in the same process, so the ratio is what matters. Prints one line per size and, with
``--json PATH``, writes the numbers.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "gemm.tk"


def shape(text: str) -> tuple[int, int, int]:
    parts = [int(x) for x in text.lower().split("x")]
    return (parts[0],) * 3 if len(parts) == 1 else tuple(parts)  # type: ignore[return-value]


def median_ms(fn, reps: int, warmup: int, batch: int) -> float:
    import torch
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(batch):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / batch)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    import torch

    import tkjit
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", default=["4096", "8192"])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--kernel", type=Path, default=EXAMPLE)
    args = ap.parse_args(argv)
    gemm = tkjit.load(args.kernel)
    rows = []
    for m, n, k in (shape(s) for s in args.sizes):
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
        c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        ours = median_ms(lambda: gemm(a, b, c), args.reps, args.warmup, args.batch)
        theirs = median_ms(lambda: torch.matmul(a, b), args.reps, args.warmup, args.batch)
        flops = 2.0 * m * n * k
        row = {"m": m, "n": n, "k": k, "tkjit_ms": ours, "torch_ms": theirs,
               "tkjit_tflops": flops / ours / 1e9, "torch_tflops": flops / theirs / 1e9,
               "ratio": theirs / ours}
        rows.append(row)
        print(f"{args.kernel.name} {m}x{n}x{k}: tkjit {row['tkjit_tflops']:.0f} TFLOP/s ({ours:.3f} ms), torch.matmul "
              f"{row['torch_tflops']:.0f} TFLOP/s ({theirs:.3f} ms), ratio {row['ratio']:.3f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows,
                                         "backend": gemm.metadata.get("backend")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
