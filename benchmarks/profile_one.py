"""Run one workload a few times, for a profiler to look at (ncu, nsys, compute-sanitizer).

    ncu --clock-control none -k regex:gemm --launch-skip 2 --launch-count 1 \\
        python3 benchmarks/profile_one.py gemm 4096 4096 4096
    python3 benchmarks/profile_one.py attention 4 16 4096 128        # B H N D (non-causal)
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

import tkjit

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def gemm(m: int, n: int, k: int, reps: int) -> None:
    kernel = tkjit.load(EXAMPLES / "gemm.tk")
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    for _ in range(reps):
        kernel(a, b, c)
        torch.matmul(a, b)  # cuBLAS beside it, for the same profile


def attention(b: int, h: int, n: int, d: int, reps: int) -> None:
    kernel = tkjit.load(EXAMPLES / "attention.tk", constants={"D": d})
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(b, h, n, device="cuda")
    for _ in range(reps):
        kernel(q, k, v, o, lse, d ** -0.5)
        torch.nn.functional.scaled_dot_product_attention(q, k, v)


if __name__ == "__main__":
    what, *sizes = sys.argv[1:]
    {"gemm": gemm, "attention": attention}[what](*(int(s) for s in sizes), reps=4)
    torch.cuda.synchronize()
