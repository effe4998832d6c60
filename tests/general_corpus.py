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

FP8 = """
kernel gemm_fp8_scaled(A: gl<e4m3>[M, K], B: gl<e4m3>[N, K], C: gl<bf16>[M, N], sa: f32, sb: f32) {
  for (m, n) in blocks(M / 128, N / 256) schedule(persistent, group = 8) {
    acc: rt<f32>[128, 256] = zeros()
    for k in 0 .. K / 128 {
      a: st<e4m3>[128, 128] = A.tile(m, k)
      b: st<e4m3>[256, 128] = B.tile(n, k)
      acc = mma_ABt(a, b, acc)
    }
    C.tile(m, n) = cvt<bf16>(acc * (sa * sb))
  }
}
"""

# two ring loops in one tile: C = A1 B1 + A2 B2 (a ring each, one after the other)
TWO_LOOPS = """
kernel two_loops(A1: gl<bf16>[M, K1], B1: gl<bf16>[K1, N], A2: gl<bf16>[M, K2], B2: gl<bf16>[K2, N],
                 C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / 128, N / 128) schedule(persistent, group = 4) {
    acc: rt<f32>[128, 128] = zeros()
    for k in 0 .. K1 / 64 {
      a: st<bf16>[128, 64] = A1.tile(m, k)
      b: st<bf16>[64, 128] = B1.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    for k2 in 0 .. K2 / 64 {
      a2: st<bf16>[128, 64] = A2.tile(m, k2)
      b2: st<bf16>[64, 128] = B2.tile(k2, n)
      acc = mma_AB(a2, b2, acc)
    }
    C.tile(m, n) = cvt<bf16>(acc)
  }
}
"""

# grouped heads on 4-D tensors: head h reads weight group h // (H / G); a lower-triangular K
# range (the loop starts at a computed block, so trip counts differ per tile)
GROUPED_4D = """
kernel grouped(X: gl<bf16>[B, H, M, K], W: gl<bf16>[B, G, K, N], Y: gl<bf16>[B, H, M, N]) {
  for (b, h, m) in blocks(B, H, M / 128) schedule(persistent) {
    g = h // (H / G)
    acc: rt<f32>[128, 128] = zeros()
    for k in m .. K / 64 {
      x: st<bf16>[128, 64] = X.tile(b, h, m, k)
      w: st<bf16>[64, 128] = W.tile(b, g, k, 0)
      acc = mma_AB(x, w, acc)
    }
    Y.tile(b, h, m, 0) = cvt<bf16>(acc)
  }
}
"""

# a runtime choice in the epilogue (if/else on an i32 argument) and a row vector carried out of it
BRANCHY = """
kernel branchy(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<f32>[M, N], act: i32) {
  for (m, n) in blocks(M / 128, N / 128) {
    acc: rt<f32>[128, 128] = zeros()
    for k in 0 .. K / 64 {
      a: st<bf16>[128, 64] = A.tile(m, k)
      b: st<bf16>[64, 128] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    out: rt<f32>[128, 128] = zeros()
    if act > 0 {
      out = sigmoid(acc)
    } else {
      out = acc * 2.0
    }
    C.tile(m, n) = out
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

TILE_PRODUCT = """
kernel tile_product(A: gl<bf16>[M, 64], B: gl<bf16>[64, N], C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / 128, N / 128) {
    a: st<bf16>[128, 64] = A.tile(m, 0)
    b: st<bf16>[64, 128] = B.tile(0, n)
    C.tile(m, n) = cvt<bf16>(relu(mma_AB(a, b)))
  }
}
"""
"""One product of tiles loaded once per tile, outside any loop (the producer's one-shot loads)."""

PRODUCT_THEN_LOOP = """
kernel product_then_loop(X: gl<bf16>[M, 64], W: gl<bf16>[64, 64], A: gl<bf16>[M, K], B: gl<bf16>[K, N],
                         C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / 128, N / 128) schedule(persistent) {
    x: st<bf16>[128, 64] = X.tile(m, 0)
    w: st<bf16>[64, 64] = W.tile(0, 0)
    h = mma_AB(x, w)
    acc: rt<f32>[128, 128] = zeros()
    for k in 0 .. K / 64 {
      a: st<bf16>[128, 64] = A.tile(m, k)
      b: st<bf16>[64, 128] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    C.tile(m, n) = cvt<bf16>(add_row(acc, row_sum(h)))
  }
}
"""
"""A first product outside the loop (a per-row term from tiles loaded once per tile), then the
ring loop's GEMM; persistent, so the one-shot rings carry their phases from tile to tile."""

TILE_PRODUCT_ACC = """
kernel tile_product_acc(A: gl<bf16>[M, 64], B: gl<bf16>[N, 64], C: gl<f32>[M, N]) {
  for (m, n) in blocks(M / 128, N / 128) schedule(persistent) {
    a: st<bf16>[128, 64] = A.tile(m, 0)
    b: st<bf16>[128, 64] = B.tile(n, 0)
    c: rt<f32>[128, 128] = C.tile(m, n)
    C.tile(m, n) = mma_ABt(a, b, c)
  }
}
"""
"""C += A·Bᵀ in one product of one-shot tiles, the accumulator loaded from C (f32, from registers)."""

RESIDUAL_BF16 = """
kernel gemm_residual(A: gl<bf16>[M, K], B: gl<bf16>[N, K], R: gl<bf16>[M, N], C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / 128, N / 128) {
    acc: rt<f32>[128, 128] = zeros()
    for k in 0 .. K / 64 {
      a: st<bf16>[128, 64] = A.tile(m, k)
      b: st<bf16>[128, 64] = B.tile(n, k)
      acc = mma_ABt(a, b, acc)
    }
    r: rt<bf16>[128, 128] = R.tile(m, n)
    C.tile(m, n) = cvt<bf16>(silu(acc) + cvt<f32>(r))
  }
}
"""
"""A residual read as a bf16 register tile after the K loop (its pairs load packed, as held)."""

RESIDUAL_WIDE = """
kernel gemm_residual_wide(A: gl<bf16>[M, K], B: gl<bf16>[N, K], R: gl<bf16>[M, N], C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / 128, N / 256) {
    acc: rt<f32>[128, 256] = zeros()
    for k in 0 .. K / 64 {
      a: st<bf16>[128, 64] = A.tile(m, k)
      b: st<bf16>[256, 64] = B.tile(n, k)
      acc = mma_ABt(a, b, acc)
    }
    r: rt<f32>[128, 256] = R.tile(m, n)
    C.tile(m, n) = cvt<bf16>(silu(acc) + r)
  }
}
"""
"""The residual as an f32 tile of a bf16 tensor at 128 x 256: held (and budgeted) as 16-bit pairs."""

RESIDUAL_SHARED = """
kernel gemm_residual_shared(A: gl<bf16>[M, K], B: gl<bf16>[N, K], R: gl<bf16>[M, N], C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / 128, N / 128) {
    acc: rt<f32>[128, 128] = zeros()
    for k in 0 .. K / 64 {
      a: st<bf16>[128, 64] = A.tile(m, k)
      b: st<bf16>[128, 64] = B.tile(n, k)
      acc = mma_ABt(a, b, acc)
    }
    rs: st<bf16>[128, 128] = R.tile(m, n)
    r: rt<f32>[128, 128] = rs
    C.tile(m, n) = cvt<bf16>(silu(acc) + r)
  }
}
"""
"""The residual loaded as a shared tile (the producer's TMA copy), read into registers after the loop."""


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


def _residual_inputs(s, d):
    """A [M, K], B [N, K], the residual R [M, N], C [M, N] poisoned: the residual corpus kernels."""
    return [_randn(s["M"], s["K"], device=d), _randn(s["N"], s["K"], device=d),
            _randn(s["M"], s["N"], device=d), _nan(s["M"], s["N"], device=d)]


def _residual_reference(a):
    return [torch.nn.functional.silu(a[0].float() @ a[1].float().t()) + a[2].float()]


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
    Case("gemm_fp8_scaled", FP8,
         lambda s, d: [_randn(s["M"], s["K"], dtype=torch.float8_e4m3fn, device=d),
                       _randn(s["N"], s["K"], dtype=torch.float8_e4m3fn, device=d),
                       _nan(s["M"], s["N"], device=d), 0.5, 0.25],
         lambda a: [(a[0].float() @ a[1].float().t()) * 0.125], (2,),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 528)], _mk(200, 304, 256)),
    Case("two_loops", TWO_LOOPS,
         lambda s, d: [_randn(s["M"], s["K"], device=d), _randn(s["K"], s["N"], device=d),
                       _randn(s["M"], s["K2"], device=d), _randn(s["K2"], s["N"], device=d),
                       _nan(s["M"], s["N"], device=d)],
         lambda a: [a[0].float() @ a[1].float() + a[2].float() @ a[3].float()], (4,),
         [{"M": 2048, "N": 2048, "K": 1024, "K2": 512}, {"M": 1000, "N": 600, "K": 520, "K2": 72}],
         {"M": 200, "N": 264, "K": 136, "K2": 72}),
    Case("grouped", GROUPED_4D,
         lambda s, d: [_randn(s["B"], s["H"], s["M"], s["K"], device=d),
                       _randn(s["B"], s["G"], s["K"], 128, device=d),
                       _nan(s["B"], s["H"], s["M"], 128, device=d)],
         None, (2,), [{"B": 2, "H": 8, "G": 2, "M": 2048, "K": 2048}, {"B": 2, "H": 6, "G": 3, "M": 1000, "K": 1000}],
         {"B": 1, "H": 4, "G": 2, "M": 200, "K": 264}),
    Case("branchy", BRANCHY,
         lambda s, d: [_randn(s["M"], s["K"], device=d), _randn(s["K"], s["N"], device=d),
                       _nan(s["M"], s["N"], dtype=torch.float32, device=d), 1],
         lambda a: [torch.sigmoid(a[0].float() @ a[1].float())], (2,),
         [_mk(2048, 2048, 1024), _mk(1000, 600, 520)], _mk(200, 264, 136)),
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
    Case("tile_product", TILE_PRODUCT,
         lambda s, d: [_randn(s["M"], 64, device=d), _randn(64, s["N"], device=d), _nan(s["M"], s["N"], device=d)],
         lambda a: [torch.relu(a[0].float() @ a[1].float())], (2,),
         [_mk(4096, 4096, 64), _mk(1000, 3000, 64), _mk(100, 72, 64)], _mk(300, 200, 64)),
    Case("product_then_loop", PRODUCT_THEN_LOOP,
         lambda s, d: [_randn(s["M"], 64, device=d), _randn(64, 64, device=d), _randn(s["M"], s["K"], device=d),
                       _randn(s["K"], s["N"], device=d), _nan(s["M"], s["N"], device=d)],
         lambda a: [a[2].float() @ a[3].float() + (a[0].float() @ a[1].float()).sum(1, keepdim=True)], (4,),
         [_mk(4096, 4096, 1024), _mk(1000, 3000, 520)], _mk(300, 260, 136)),
    Case("residual_bf16", RESIDUAL_BF16,
         _residual_inputs, _residual_reference, (3,),
         [_mk(2048, 2048, 2048), _mk(1000, 600, 520), _mk(72, 100, 64)], _mk(300, 200, 136)),
    Case("residual_wide", RESIDUAL_WIDE,
         _residual_inputs, _residual_reference, (3,),
         [_mk(2048, 2048, 2048), _mk(1000, 600, 520)], _mk(300, 264, 136)),
    Case("residual_shared", RESIDUAL_SHARED,
         _residual_inputs, _residual_reference, (3,),
         [_mk(2048, 2048, 2048), _mk(1000, 600, 520), _mk(72, 100, 64)], _mk(300, 200, 136)),
    Case("tile_product_acc", TILE_PRODUCT_ACC,
         lambda s, d: [_randn(s["M"], 64, device=d), _randn(s["N"], 64, device=d),
                       torch.randn(s["M"], s["N"], device=d)],
         lambda a: [a[0].float() @ a[1].float().t() + a[2]], (2,),
         [_mk(4096, 4096, 64), _mk(1000, 3000, 64)], _mk(300, 200, 64)),
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


def grouped_reference(args):
    x, w = args[0].float(), args[1].float()
    b, h, m, k = x.shape
    g = w.shape[1]
    out = torch.zeros(b, h, m, w.shape[-1], device=x.device)
    for i in range(0, m, 128):
        k0 = (i // 128) * 64       # the loop starts at K block m
        wi = w.repeat_interleave(h // g, dim=1)
        out[:, :, i:i + 128] = x[:, :, i:i + 128, k0:] @ wi[:, :, k0:, :]
    return [out]


BY_NAME = {c.name: c for c in CASES}
BY_NAME["row_centered"].reference = row_centered_reference
BY_NAME["grouped"].reference = grouped_reference
