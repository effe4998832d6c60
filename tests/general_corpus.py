"""Tile programs written as a user would, for the general sm_90a lowering (codegen/hopper/lower.py).

Each ``Case`` is a kernel, how to make its inputs at a shape, and a float32 reference. The CPU
tests compile every case through the general lowering (ptxas, SASS); the GPU tests run them at
tile multiples and at ragged shapes against the reference and the interpreter; the benchmark
(benchmarks/general_lowering.py) times them against torch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

GEMM_BIAS_RELU = """
kernel gemm_bias_relu<BM = 128, BN = 256, BK = 64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], bias: gl<f32>[N],
                                                   C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) schedule(persistent, group = 8) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<bf16>[BM, BK] = A.tile(m, k)
      b: st<bf16>[BK, BN] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    bv: rv<f32>[BN] = bias.tile(n)
    C.tile(m, n) = cvt<bf16>(relu(add_col(acc, bv)))
  }
}
"""

BMM = """
kernel bmm(A: gl<bf16>[Bt, M, K], B: gl<bf16>[Bt, K, N], C: gl<bf16>[Bt, M, N]) {
  for (b, m, n) in blocks(Bt, M / 128, N / 256) schedule(persistent, group = 8) {
    acc: rt<f32>[128, 256] = zeros()
    for k in 0 .. K / 64 {
      a: st<bf16>[128, 64] = A.tile(b, m, k)
      bt: st<bf16>[64, 256] = B.tile(b, k, n)
      acc = mma_AB(a, bt, acc)
    }
    C.tile(b, m, n) = cvt<bf16>(acc)
  }
}
"""

ALPHA_BETA = """
kernel gemm_alpha_beta(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<bf16>[M, N], alpha: f32, beta: f32) {
  for (m, n) in blocks(M / 128, N / 128) schedule(persistent, group = 8) {
    acc: rt<f32>[128, 128] = zeros()
    for k in 0 .. K / 64 {
      a: st<bf16>[128, 64] = A.tile(m, k)
      b: st<bf16>[64, 128] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    c: rt<f32>[128, 128] = C.tile(m, n)
    C.tile(m, n) = acc * alpha + c * beta
  }
}
"""

ATB = """
kernel gemm_atb(A: gl<bf16>[K, M], B: gl<bf16>[K, N], C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / 128, N / 256) schedule(persistent, group = 8) {
    acc: rt<f32>[128, 256] = zeros()
    for k in 0 .. K / 64 {
      a: st<bf16>[64, 128] = A.tile(k, m)
      b: st<bf16>[64, 256] = B.tile(k, n)
      acc = mma_AtB(a, b, acc)
    }
    C.tile(m, n) = cvt<bf16>(acc)
  }
}
"""

LINEAR = """
kernel linear(X: gl<bf16>[M, K], W: gl<bf16>[N, K], Y: gl<f32>[M, N]) {
  for (m, n) in blocks(M / 128, N / 256) {
    acc: rt<f32>[128, 256] = zeros()
    for k in 0 .. K / 64 {
      x: st<bf16>[128, 64] = X.tile(m, k)
      w: st<bf16>[256, 64] = W.tile(n, k)
      acc = mma_ABt(x, w, acc)
    }
    Y.tile(m, n) = acc
  }
}
"""

# 128 x 128 tiles on a persistent grid: the warp-spec pass picks ping-pong consumers
GEMM_BIAS_PINGPONG = """
kernel gemm_bias_pingpong(A: gl<bf16>[M, K], B: gl<bf16>[K, N], bias: gl<f32>[N], C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / 128, N / 128) schedule(persistent, group = 8) {
    acc: rt<f32>[128, 128] = zeros()
    for k in 0 .. K / 64 {
      a: st<bf16>[128, 64] = A.tile(m, k)
      b: st<bf16>[64, 128] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    bv: rv<f32>[128] = bias.tile(n)
    C.tile(m, n) = cvt<bf16>(add_col(acc, bv))
  }
}
"""

# one consumer, f16, a loop that starts at 1 (skips the first K block), a scalar epilogue
SKIP_FIRST = """
kernel skip_first(A: gl<f16>[M, K], B: gl<f16>[K, N], C: gl<f32>[M, N]) {
  for (m, n) in blocks(M / 64, N / 128) {
    acc: rt<f32>[64, 128] = zeros()
    for k in 1 .. K / 32 {
      a: st<f16>[64, 32] = A.tile(m, k)
      b: st<f16>[32, 128] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    C.tile(m, n) = max(acc, 0.0)
  }
}
"""

# one consumer holding two 64-row slabs (interleaved rows), a row reduction in the epilogue
ROW_CENTERED = """
@consumers(1)
kernel row_centered(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / 128, N / 128) {
    acc: rt<f32>[128, 128] = zeros()
    for k in 0 .. K / 64 {
      a: st<bf16>[128, 64] = A.tile(m, k)
      b: st<bf16>[64, 128] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    C.tile(m, n) = cvt<bf16>(sub_row(acc, row_max(acc)))
  }
}
"""


def _randn(*shape, dtype=torch.bfloat16, device="cpu"):
    return torch.randn(*shape, device=device).to(dtype)


def _nan(*shape, dtype=torch.bfloat16, device="cpu"):
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


@dataclass
class Case:
    """A kernel of the corpus: its source, its inputs at a shape, its reference."""

    name: str
    source: str
    make: Callable[[dict, str], list]
    """(shape, device) -> the launch arguments, outputs poisoned."""
    reference: Callable[[list], list]
    """The launch arguments (before the launch) -> the expected outputs, float32."""
    outputs: tuple[int, ...]
    shapes: list[dict] = field(default_factory=list)
    """GPU shapes: tile multiples first, then ragged ones."""
    cpu_shape: dict = field(default_factory=dict)
    constants: dict = field(default_factory=dict)


def _mk(m, n, k):
    return {"M": m, "N": n, "K": k}


CASES = [
    Case("gemm_bias_relu", GEMM_BIAS_RELU,
         lambda s, d: [_randn(s["M"], s["K"], device=d), _randn(s["K"], s["N"], device=d),
                       torch.randn(s["N"], device=d), _nan(s["M"], s["N"], device=d)],
         lambda a: [torch.relu(a[0].float() @ a[1].float() + a[2])], (3,),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 520), _mk(100, 200, 72)], _mk(300, 520, 200)),
    Case("gemm_bias_pingpong", GEMM_BIAS_PINGPONG,
         lambda s, d: [_randn(s["M"], s["K"], device=d), _randn(s["K"], s["N"], device=d),
                       torch.randn(s["N"], device=d), _nan(s["M"], s["N"], device=d)],
         lambda a: [a[0].float() @ a[1].float() + a[2]], (3,),
         [_mk(4096, 4096, 1024), _mk(1000, 3000, 520), _mk(64, 64, 64)], _mk(300, 520, 200)),
    Case("bmm", BMM,
         lambda s, d: [_randn(s["B"], s["M"], s["K"], device=d), _randn(s["B"], s["K"], s["N"], device=d),
                       _nan(s["B"], s["M"], s["N"], device=d)],
         lambda a: [a[0].float() @ a[1].float()], (2,),
         [{"B": 8, "M": 2048, "N": 2048, "K": 2048}, {"B": 3, "M": 1000, "N": 600, "K": 264}],
         {"B": 2, "M": 200, "N": 300, "K": 136}),
    Case("gemm_alpha_beta", ALPHA_BETA,
         lambda s, d: [_randn(s["M"], s["K"], device=d), _randn(s["K"], s["N"], device=d),
                       _randn(s["M"], s["N"], device=d), 0.75, -1.5],
         lambda a: [0.75 * (a[0].float() @ a[1].float()) - 1.5 * a[2].float()], (2,),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 520)], _mk(300, 260, 200)),
    Case("gemm_atb", ATB,
         lambda s, d: [_randn(s["K"], s["M"], device=d), _randn(s["K"], s["N"], device=d),
                       _nan(s["M"], s["N"], device=d)],
         lambda a: [a[0].float().t() @ a[1].float()], (2,),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 520)], _mk(200, 520, 136)),
    Case("linear", LINEAR,
         lambda s, d: [_randn(s["M"], s["K"], device=d), _randn(s["N"], s["K"], device=d),
                       _nan(s["M"], s["N"], dtype=torch.float32, device=d)],
         lambda a: [a[0].float() @ a[1].float().t()], (2,),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 520)], _mk(300, 520, 200)),
    Case("skip_first", SKIP_FIRST,
         lambda s, d: [_randn(s["M"], s["K"], dtype=torch.float16, device=d),
                       _randn(s["K"], s["N"], dtype=torch.float16, device=d),
                       _nan(s["M"], s["N"], dtype=torch.float32, device=d)],
         lambda a: [torch.relu(a[0].float()[:, 32:] @ a[1].float()[32:, :])], (2,),
         [_mk(2048, 2048, 2048), _mk(1000, 3000, 520)], _mk(200, 260, 160)),
    Case("row_centered", ROW_CENTERED,
         lambda s, d: [_randn(s["M"], s["K"], device=d), _randn(s["K"], s["N"], device=d),
                       _nan(s["M"], s["N"], device=d)],
         None, (2,), [_mk(2048, 2048, 1024), _mk(1000, 1000, 200)], _mk(300, 260, 136)),
]
"""row_centered's reference subtracts the row max over each 128-column tile, not the whole row:
see ``row_centered_reference``."""


def row_centered_reference(args):
    y = args[0].float() @ args[1].float()
    out = torch.empty_like(y)
    for n0 in range(0, y.shape[1], 128):
        block = y[:, n0:n0 + 128]
        out[:, n0:n0 + 128] = block - block.amax(dim=1, keepdim=True)
    return [out]


CASES[-1].reference = row_centered_reference
BY_NAME = {c.name: c for c in CASES}
