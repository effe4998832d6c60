"""bf16 GEMM, ``examples/gemm.tk`` (C = A·B, A [M, K] and B [K, N] row-major) against
``torch.matmul`` (cuBLAS): square sizes, a K sweep at M = N = 4096, and LLM projection shapes.
FLOPs = 2·M·N·K. The exact result is a float64 product (float32 above 8192³, without TF32)."""
from __future__ import annotations

from .compare import run_simple
from .rows import Row

NAME = "gemm"
SQUARE = (2048, 4096, 8192, 16384)
K_SWEEP = (64, 128, 256, 512, 1024)
LLM_M = (128, 1024, 8192)
LLM_NK = ((4096, 4096), (14336, 4096), (4096, 14336))
FLOAT64_LIMIT = 8192 ** 3
"""Up to this M·N·K the exact product is taken in float64; above it, float32 (bf16 products are
exact in float32, and the sums' rounding stays far under bf16's)."""


def cases(mode) -> list[dict]:
    if mode.dry_run:
        return [_case("square", 128, 128, 128), _case("k-sweep", 128, 256, 64),
                _case("llm", 16, 256, 192)]
    square = [n for n in SQUARE if not (mode.quick and n == 16384)]
    out = [_case("square", n, n, n) for n in square]
    out += [_case("k-sweep", 4096, 4096, k) for k in K_SWEEP]
    out += [_case("llm", m, n, k) for m in LLM_M for n, k in LLM_NK]
    return out


def _case(group: str, m: int, n: int, k: int) -> dict:
    return {"group": group, "M": m, "N": n, "K": k}


def shape_of(p: dict) -> str:
    if p["group"] == "square":
        return f"M=N=K={p['M']}"
    if p["group"] == "k-sweep":
        return f"M=N={p['M']} K={p['K']}"
    return f"M={p['M']} N={p['N']} K={p['K']}"


def run(p: dict, ctx, kernels) -> list[Row]:
    import torch
    m, n, k = p["M"], p["N"], p["K"]
    bf16, dev = torch.bfloat16, ctx.device
    row = Row(NAME, "gemm bf16 vs torch.matmul", shape_of(p), ref_name="torch.matmul", params=p, flops=2.0 * m * n * k)

    def make_set():
        return (torch.randn(m, k, dtype=bf16, device=dev), torch.randn(k, n, dtype=bf16, device=dev),
                torch.empty(m, n, dtype=bf16, device=dev))

    def tkjit(kernel, a, b, c):
        kernel(a, b, c)

    def reference(a, b, c):
        return torch.matmul(a, b, out=c)

    def exact(a, b):
        if m * n * k <= FLOAT64_LIMIT:
            return a.double() @ b.double()
        return a.float() @ b.float()

    return [run_simple(row, ctx, kernels, "gemm", None, make_set=make_set, tkjit=tkjit,
                       reference=reference, exact=exact, set_bytes=2 * (m * k + k * n + m * n))]
