"""Kernels the project had not seen, written as a new user would (session 13, issues 17/18
generality probe): GEMMs with epilogues, one-token edits of the examples, batched GEMMs, attention
variants, a decayed chunked scan, fused norms. Each is a ``general_corpus.Case``: its source, its
inputs at a shape (outputs poisoned), a float32 reference, GPU shapes (tile multiples first, then
ragged) and a small ragged CPU shape. tests/test_unseen_corpus.py compiles them on the CPU and runs
them on the interpreter; tests/gpu/test_unseen_corpus_gpu.py runs those that take the wgmma path.
"""
from __future__ import annotations

import math

import torch

from general_corpus import Case, _nan, _randn

GEMM_ROWSCALE_BIAS = """
kernel gemm_rowscale_bias<BM = 128, BN = 256, BK = 64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N],
                                                       S: gl<f32>[M], Bias: gl<f32>[N], C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) schedule(persistent, group = 8) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<bf16>[BM, BK] = A.tile(m, k)
      b: st<bf16>[BK, BN] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    s: cv<f32>[BM] = S.tile(m)
    bias: rv<f32>[BN] = Bias.tile(n)
    C.tile(m, n) = cvt<bf16>(add_col(mul_row(acc, s), bias))
  }
}
"""

GEMM_ATBT = """
kernel gemm_atbt<BM = 128, BN = 256, BK = 64>(A: gl<bf16>[K, M], B: gl<bf16>[N, K], C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) schedule(persistent, group = 8) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<bf16>[BK, BM] = A.tile(k, m)
      b: st<bf16>[BN, BK] = B.tile(n, k)
      acc = mma_AtBt(a, b, acc)
    }
    C.tile(m, n) = cvt<bf16>(acc)
  }
}
"""

GEMM_F16 = """
kernel gemm_f16<BM = 128, BN = 256, BK = 64>(A: gl<f16>[M, K], B: gl<f16>[K, N], C: gl<f16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) schedule(persistent, group = 8) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<f16>[BM, BK] = A.tile(m, k)
      b: st<f16>[BK, BN] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    C.tile(m, n) = cvt<f16>(acc)
  }
}
"""

GEMM_K0_F32 = """
kernel gemm_k0<BM = 128, BN = 256, BK = 64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<f32>[M, N], k0: i32) {
  for (m, n) in blocks(M / BM, N / BN) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in k0 .. K / BK {
      a: st<bf16>[BM, BK] = A.tile(m, k)
      b: st<bf16>[BK, BN] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    C.tile(m, n) = acc
  }
}
"""

GEMM_BM64 = """
kernel gemm_bm64<BM = 64, BN = 256, BK = 64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) schedule(persistent, group = 8) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<bf16>[BM, BK] = A.tile(m, k)
      b: st<bf16>[BK, BN] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    C.tile(m, n) = cvt<bf16>(acc)
  }
}
"""

GEMM_BN192 = GEMM_BM64.replace("gemm_bm64<BM = 64, BN = 256", "gemm_bn192<BM = 128, BN = 192")

GEMM_TWO_STORES = """
kernel gemm_gelu_two_stores<BM = 128, BN = 256, BK = 64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], Bias: gl<bf16>[N],
                                                         C: gl<bf16>[M, N], P: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) schedule(persistent, group = 8) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<bf16>[BM, BK] = A.tile(m, k)
      b: st<bf16>[BK, BN] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    bias: rv<f32>[BN] = Bias.tile(n)
    pre = add_col(acc, bias)
    P.tile(m, n) = cvt<bf16>(pre)
    C.tile(m, n) = cvt<bf16>(gelu_tanh(pre))
  }
}
"""

GEMM_GELU_TANH = """
@consumers(BM / 64) @regs(40, 232) @fill_sms(BM, BN)
kernel gemm_bias_gelu_tanh<BM = 128, BN = 256, BK = 64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N],
                                                          Bias: gl<bf16>[N], C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) schedule(persistent, group = 8) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<bf16>[BM, BK] = A.tile(m, k)
      b: st<bf16>[BK, BN] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    bias: rv<f32>[BN] = Bias.tile(n)
    C.tile(m, n) = cvt<bf16>(gelu_tanh(add_col(acc, bias)))
  }
}
"""

GEMM_SOFTMAX = """
kernel gemm_softmax<BM = 128, BN = 128, BK = 64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<bf16>[BM, BK] = A.tile(m, k)
      b: st<bf16>[BK, BN] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    p = exp(sub_row(acc, row_max(acc)))
    C.tile(m, n) = cvt<bf16>(div_row(p, row_sum(p)))
  }
}
"""

BMM4 = """
kernel bmm4<BM = 128, BN = 256, BK = 64>(A: gl<bf16>[B, H, M, K], W: gl<bf16>[B, H, K, N], C: gl<bf16>[B, H, M, N]) {
  for (b, h, m, n) in blocks(B, H, M / BM, N / BN) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<bf16>[BM, BK] = A.tile(b, h, m, k)
      w: st<bf16>[BK, BN] = W.tile(b, h, k, n)
      acc = mma_AB(a, w, acc)
    }
    C.tile(b, h, m, n) = cvt<bf16>(acc)
  }
}
"""

GEMM_FP8_E5M2 = """
kernel gemm_fp8_e5m2(A: gl<e5m2>[M, K], B: gl<e5m2>[N, K], C: gl<bf16>[M, N], sa: f32, sb: f32) {
  for (m, n) in blocks(M / 128, N / 256) schedule(persistent, group = 8) {
    acc: rt<f32>[128, 256] = zeros()
    for k in 0 .. K / 128 {
      a: st<e5m2>[128, 128] = A.tile(m, k)
      b: st<e5m2>[256, 128] = B.tile(n, k)
      acc = mma_ABt(a, b, acc)
    }
    C.tile(m, n) = cvt<bf16>(acc * (sa * sb))
  }
}
"""

ATTN = """
@consumers(2)
kernel attn_{name}<D = {d}, BKV = {bkv}, BQ = 128>(
    Q: gl<bf16>[B, H, NQ, D], K: gl<bf16>[B, H, NK, D], V: gl<bf16>[B, H, NK, D],
    O: gl<bf16>[B, H, NQ, D], {extra}scale: f32) {{
  for (b, h, i) in blocks(B, H, NQ / BQ) {{
    q: st<bf16>[BQ, D] = Q.tile(b, h, i, 0)
    o: rt<f32>[BQ, D] = zeros()
    mx: cv<f32>[BQ] = fill(-inf)
    l: cv<f32>[BQ] = zeros()
    qk_scale = scale * LOG2E
    for j in 0 .. NK / BKV {{
      k: st<bf16>[BKV, D] = K.tile(b, h, j, 0)
      v: st<bf16>[BKV, D] = V.tile(b, h, j, 0)
      s = mma_ABt(q, k) * qk_scale{mask}
      mx_new = max(mx, row_max(s))
      p = exp2(sub_row(s, mx_new))
      alpha = exp2(mx - mx_new)
      l = l * alpha + row_sum(p)
      o = mma_AB(cvt<bf16>(p), v, mul_row(o, alpha))
      mx = mx_new
    }}
    O.tile(b, h, i, 0) = cvt<bf16>(div_row(o, l))
  }}
}}
"""


def _attn(name, d, bkv=128, extra="", mask=""):
    return ATTN.format(name=name, d=d, bkv=bkv, extra=extra, mask=mask)


ATTN_D80 = _attn("d80", 80)
ATTN_D112 = _attn("d112", 112)
ATTN_BKV64 = _attn("bkv64", 128, bkv=64)
ATTN_KEYPAD = _attn("keypad", 64, extra="KM: gl<f32>[B, NK], ",
                    mask="\n      km: rv<f32>[BKV] = KM.tile(b, j)\n      s = add_col(s, km)")

SCAN_DECAY = """
@consumers(1)
kernel scan_decay<D = 64, C = 64>(
    Q: gl<bf16>[B, H, N, D], K: gl<bf16>[B, H, N, D], V: gl<bf16>[B, H, N, D],
    O: gl<bf16>[B, H, N, D], gamma: f32) {
  for (b, h) in blocks(B, H) {
    state: rt<f32>[D, D] = zeros()
    qi: rt<f32>[C, C] = row_index()
    kj: rt<f32>[C, C] = col_index()
    for c in 0 .. N / C {
      q: st<bf16>[C, D] = Q.tile(b, h, c, 0)
      k: st<bf16>[C, D] = K.tile(b, h, c, 0)
      v: st<bf16>[C, D] = V.tile(b, h, c, 0)
      a = select(kj > qi, 0, mma_ABt(q, k))
      s: st<bf16>[D, D] = cvt<bf16>(state)
      o = mma_AB(q, s, mma_AB(cvt<bf16>(a), v))
      O.tile(b, h, c, 0) = cvt<bf16>(o)
      state = mma_AtB(k, v, state * gamma)
    }
  }
}
"""

LAYERNORM_F32 = """
kernel layernorm_f32<D = 1024, BR = 16>(X: gl<bf16>[R, D], W: gl<bf16>[D], Bias: gl<bf16>[D],
                                        Y: gl<f32>[R, D], eps: f32) {
  for i in blocks(R / BR) {
    x: rt<f32>[BR, D] = X.tile(i, 0)
    w: rv<f32>[D] = W.tile(0)
    bias: rv<f32>[D] = Bias.tile(0)
    mean = row_sum(x) / D
    xc = sub_row(x, mean)
    var = row_sum(xc * xc) / D
    Y.tile(i, 0) = add_col(mul_col(mul_row(xc, rsqrt(var + eps)), w), bias)
  }
}
"""

SCALED_RES_RMSNORM = """
# a scaled residual into RMSNorm at a width no example has (3,072: stream-cols splits the row block over a
# cluster of 4 CTAs), the weight read as a vector and the scale a runtime scalar
kernel scaled_res_rmsnorm<D = 3072, BR = 16>(X: gl<bf16>[R, D], Res: gl<bf16>[R, D], W: gl<bf16>[D],
                                              Y: gl<bf16>[R, D], eps: f32, alpha: f32) {
  for i in blocks(R / BR) {
    x: rt<f32>[BR, D] = X.tile(i, 0)
    r: rt<f32>[BR, D] = Res.tile(i, 0)
    w: rv<f32>[D] = W.tile(0)
    h = x * alpha + r
    ms = row_sum(h * h) / D
    Y.tile(i, 0) = mul_col(mul_row(h, rsqrt(ms + eps)), w)
  }
}
"""


def _scaled_res_rms_ref(a):
    h = a[0].double() * a[5] + a[1].double()
    return [(h / torch.sqrt((h * h).mean(-1, keepdim=True) + a[4]) * a[2].double()).float()]


GEMM_SWIGLU = """
kernel gemm_swiglu<BM = 128, BN = 128, BK = 64>(X: gl<bf16>[M, K], W1: gl<bf16>[K, N], W3: gl<bf16>[K, N],
                                                C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) schedule(persistent, group = 8) {
    g: rt<f32>[BM, BN] = zeros()
    u: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      x: st<bf16>[BM, BK] = X.tile(m, k)
      w1: st<bf16>[BK, BN] = W1.tile(k, n)
      w3: st<bf16>[BK, BN] = W3.tile(k, n)
      g = mma_AB(x, w1, g)
      u = mma_AB(x, w3, u)
    }
    C.tile(m, n) = cvt<bf16>(silu(g) * u)
  }
}
"""

GEMM_ROWMAX = """
kernel gemm_rowmax<BM = 128, BN = 256, BK = 64>(A: gl<bf16>[M, K], B: gl<bf16>[N, K], C: gl<bf16>[M, N],
                                                Mx: gl<f32>[NT, M]) {
  for (m, n) in blocks(M / BM, N / BN) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<bf16>[BM, BK] = A.tile(m, k)
      b: st<bf16>[BN, BK] = B.tile(n, k)
      acc = mma_ABt(a, b, acc)
    }
    C.tile(m, n) = cvt<bf16>(acc)
    Mx.tile(n, m) = row_max(acc)
  }
}
"""

GEMM_BK128_F32 = """
kernel gemm_bk128_relu<BM = 64, BN = 128, BK = 128>(A: gl<bf16>[M, K], B: gl<bf16>[N, K], Bias: gl<f32>[N],
                                                    C: gl<f32>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<bf16>[BM, BK] = A.tile(m, k)
      b: st<bf16>[BN, BK] = B.tile(n, k)
      acc = mma_ABt(a, b, acc)
    }
    bias: rv<f32>[BN] = Bias.tile(n)
    C.tile(m, n) = relu(add_col(acc, bias))
  }
}
"""

ATTN_BQ64 = """
@consumers(1)
kernel attn_bq64<D = 128, BKV = 128, BQ = 64>(
    Q: gl<bf16>[B, H, N, D], K: gl<bf16>[B, H, N, D], V: gl<bf16>[B, H, N, D],
    O: gl<bf16>[B, H, N, D], scale: f32) {
  for (b, h, i) in blocks(B, H, N / BQ) {
    q: st<bf16>[BQ, D] = Q.tile(b, h, i, 0)
    o: rt<f32>[BQ, D] = zeros()
    mx: cv<f32>[BQ] = fill(-inf)
    l: cv<f32>[BQ] = zeros()
    for j in 0 .. N / BKV {
      k: st<bf16>[BKV, D] = K.tile(b, h, j, 0)
      v: st<bf16>[BKV, D] = V.tile(b, h, j, 0)
      s = mma_ABt(q, k) * (scale * LOG2E)
      mx_new = max(mx, row_max(s))
      p = exp2(sub_row(s, mx_new))
      alpha = exp2(mx - mx_new)
      l = l * alpha + row_sum(p)
      o = mma_AB(cvt<bf16>(p), v, mul_row(o, alpha))
      mx = mx_new
    }
    O.tile(b, h, i, 0) = cvt<bf16>(div_row(o, l))
  }
}
"""

ATTN_CAUSAL_D80 = """
@consumers(2)
kernel attn_causal_d80<D = 80, BKV = 128, BQ = 128>(
    Q: gl<bf16>[B, H, N, D], K: gl<bf16>[B, H, N, D], V: gl<bf16>[B, H, N, D],
    O: gl<bf16>[B, H, N, D], scale: f32) {
  for (b, h, i) in blocks(B, H, N / BQ) {
    q: st<bf16>[BQ, D] = Q.tile(b, h, i, 0)
    o: rt<f32>[BQ, D] = zeros()
    mx: cv<f32>[BQ] = fill(-inf)
    l: cv<f32>[BQ] = zeros()
    for j in 0 .. min(N / BKV, ((i + 1) * BQ) / BKV) {
      k: st<bf16>[BKV, D] = K.tile(b, h, j, 0)
      v: st<bf16>[BKV, D] = V.tile(b, h, j, 0)
      s = causal_mask(mma_ABt(q, k) * (scale * LOG2E), i * BQ, j * BKV)
      mx_new = max(mx, row_max(s))
      p = exp2(sub_row(s, mx_new))
      alpha = exp2(mx - mx_new)
      l = l * alpha + row_sum(p)
      o = mma_AB(cvt<bf16>(p), v, mul_row(o, alpha))
      mx = mx_new
    }
    O.tile(b, h, i, 0) = cvt<bf16>(div_row(o, l))
  }
}
"""

GEMM_SCALED_A = """
kernel gemm_scaled_a<BM = 128, BN = 256, BK = 64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], S: gl<f32>[K],
                                                  C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) schedule(persistent, group = 8) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: rt<f32>[BM, BK] = A.tile(m, k)
      s: rv<f32>[BK] = S.tile(k)
      b: st<bf16>[BK, BN] = B.tile(k, n)
      acc = mma_AB(cvt<bf16>(mul_col(a, s)), b, acc)
    }
    C.tile(m, n) = cvt<bf16>(acc)
  }
}
"""
"""A per-K-channel input scale applied to A in registers (A from registers: wgmma RS). Its deferred
epilogue once held the previous tile beside the trip's A fragments too: 37 LDL/STL."""

ATTN_RELBIAS = """
@consumers(2)
kernel attn_relbias<D = 64, BKV = 128, BQ = 128>(
    Q: gl<bf16>[B, H, N, D], K: gl<bf16>[B, H, N, D], V: gl<bf16>[B, H, N, D],
    Bias: gl<bf16>[B, H, N, N], O: gl<bf16>[B, H, N, D], scale: f32) {
  for (b, h, i) in blocks(B, H, N / BQ) {
    q: st<bf16>[BQ, D] = Q.tile(b, h, i, 0)
    o: rt<f32>[BQ, D] = zeros()
    mx: cv<f32>[BQ] = fill(-inf)
    l: cv<f32>[BQ] = zeros()
    for j in 0 .. N / BKV {
      k: st<bf16>[BKV, D] = K.tile(b, h, j, 0)
      v: st<bf16>[BKV, D] = V.tile(b, h, j, 0)
      bt: rt<f32>[BQ, BKV] = Bias.tile(b, h, i, j)
      s = (mma_ABt(q, k) * scale + bt) * LOG2E
      mx_new = max(mx, row_max(s))
      p = exp2(sub_row(s, mx_new))
      alpha = exp2(mx - mx_new)
      l = l * alpha + row_sum(p)
      o = mma_AB(cvt<bf16>(p), v, mul_row(o, alpha))
      mx = mx_new
    }
    O.tile(b, h, i, 0) = cvt<bf16>(div_row(o, l))
  }
}
"""
"""An additive score bias tile (relative positions, ALiBi tables) read from a [B, H, N, N] tensor
into registers on every trip."""

ATTN_F32OUT = """
@consumers(2)
kernel attn_f32out<D = 64, BKV = 128, BQ = 128>(
    Q: gl<bf16>[B, H, N, D], K: gl<bf16>[B, H, N, D], V: gl<bf16>[B, H, N, D], O: gl<f32>[B, H, N, D], scale: f32) {
  for (b, h, i) in blocks(B, H, N / BQ) {
    q: st<bf16>[BQ, D] = Q.tile(b, h, i, 0)
    o: rt<f32>[BQ, D] = zeros()
    mx: cv<f32>[BQ] = fill(-inf)
    l: cv<f32>[BQ] = zeros()
    for j in 0 .. N / BKV {
      k: st<bf16>[BKV, D] = K.tile(b, h, j, 0)
      v: st<bf16>[BKV, D] = V.tile(b, h, j, 0)
      s = mma_ABt(q, k) * (scale * LOG2E)
      mx_new = max(mx, row_max(s))
      p = exp2(sub_row(s, mx_new))
      alpha = exp2(mx - mx_new)
      l = l * alpha + row_sum(p)
      o = mma_AB(cvt<bf16>(p), v, mul_row(o, alpha))
      mx = mx_new
    }
    O.tile(b, h, i, 0) = div_row(o, l)
  }
}
"""

GEMM_ROWBIAS_F16 = """
kernel gemm_rowbias<BM = 128, BN = 256, BK = 64>(A: gl<f16>[M, K], B: gl<f16>[N, K], Bias: gl<f16>[M], C: gl<f16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) schedule(persistent, group = 8) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<f16>[BM, BK] = A.tile(m, k)
      b: st<f16>[BN, BK] = B.tile(n, k)
      acc = mma_ABt(a, b, acc)
    }
    bias: cv<f32>[BM] = Bias.tile(m)
    C.tile(m, n) = cvt<f16>(sigmoid(add_row(acc, bias)))
  }
}
"""

SSD = """
# chunked state-space (SSD-style) scan: within a chunk, scores decay by exp(cs_i - cs_j), where cs is
# the chunk-local cumulative log decay; the D x D state carries across chunks, decayed by the chunk total.
@consumers(1)
kernel ssd<D = 64, C = 64>(
    Q: gl<bf16>[B, H, N, D], K: gl<bf16>[B, H, N, D], V: gl<bf16>[B, H, N, D], CS: gl<f32>[B, H, N],
    T: gl<f32>[B, H, N], O: gl<bf16>[B, H, N, D]) {
  for (b, h) in blocks(B, H) {
    state: rt<f32>[D, D] = zeros()
    qi: rt<f32>[C, C] = row_index()
    kj: rt<f32>[C, C] = col_index()
    zero: rt<f32>[C, C] = zeros()
    for c in 0 .. N / C {
      q: st<bf16>[C, D] = Q.tile(b, h, c, 0)
      k: st<bf16>[C, D] = K.tile(b, h, c, 0)
      v: st<bf16>[C, D] = V.tile(b, h, c, 0)
      csq: cv<f32>[C] = CS.tile(b, h, c)
      csk: rv<f32>[C] = CS.tile(b, h, c)
      tot: cv<f32>[C] = T.tile(b, h, c)
      decay = exp(sub_col(add_row(zero, csq), csk))
      a = select(kj > qi, 0, mma_ABt(q, k) * decay)
      s: st<bf16>[D, D] = cvt<bf16>(state)
      o = mma_AB(cvt<bf16>(a), v) + mul_row(mma_AB(q, s), exp(csq))
      O.tile(b, h, c, 0) = cvt<bf16>(o)
      kr: rt<f32>[C, D] = K.tile(b, h, c, 0)
      ks: st<bf16>[C, D] = cvt<bf16>(mul_row(kr, exp(tot - csq)))
      state = mma_AtB(ks, v, mul_row(state, exp(tot)))
    }
  }
}
"""

SSD_COPY = """
# chunked state-space (SSD-style) scan: within a chunk, scores decay by exp(cs_i - cs_j), where cs is
# the chunk-local cumulative log decay; the D x D state carries across chunks, decayed by the chunk total.
@consumers(1)
kernel ssd_copy<D = 64, C = 64>(
    Q: gl<bf16>[B, H, N, D], K: gl<bf16>[B, H, N, D], V: gl<bf16>[B, H, N, D], CS: gl<f32>[B, H, N],
    T: gl<f32>[B, H, N], O: gl<bf16>[B, H, N, D]) {
  for (b, h) in blocks(B, H) {
    state: rt<f32>[D, D] = zeros()
    qi: rt<f32>[C, C] = row_index()
    kj: rt<f32>[C, C] = col_index()
    zero: rt<f32>[C, C] = zeros()
    for c in 0 .. N / C {
      q: st<bf16>[C, D] = Q.tile(b, h, c, 0)
      k: st<bf16>[C, D] = K.tile(b, h, c, 0)
      v: st<bf16>[C, D] = V.tile(b, h, c, 0)
      csq: cv<f32>[C] = CS.tile(b, h, c)
      csk: rv<f32>[C] = CS.tile(b, h, c)
      tot: cv<f32>[C] = T.tile(b, h, c)
      decay = exp(sub_col(add_row(zero, csq), csk))
      a = select(kj > qi, 0, mma_ABt(q, k) * decay)
      s: st<bf16>[D, D] = cvt<bf16>(state)
      o = mma_AB(cvt<bf16>(a), v) + mul_row(mma_AB(q, s), exp(csq))
      O.tile(b, h, c, 0) = cvt<bf16>(o)
      kr: rt<f32>[C, D] = k
      ks: st<bf16>[C, D] = cvt<bf16>(mul_row(kr, exp(tot - csq)))
      state = mma_AtB(ks, v, mul_row(state, exp(tot)))
    }
  }
}
"""
"""SSD with the key tile taken into registers from its shared tile (kr = k) instead of loaded again:
a ring tile read into registers (the trip's ``Read`` step, codegen/hopper/lower_tile_read.py);
until session 18 the general lowering refused it and the kernel fell to mma.sync."""

RMS_LINEAR = """
# RMSNorm fused into the linear layer that follows it: y = rmsnorm(x) W = diag(1/rms(x)) (x W'), W' = g∘W
kernel rms_linear<BM = 128, BN = 128, BK = 64>(X: gl<bf16>[M, K], W: gl<bf16>[K, N], Y: gl<bf16>[M, N], eps: f32) {
  for (m, n) in blocks(M / BM, N / BN) schedule(persistent, group = 8) {
    acc: rt<f32>[BM, BN] = zeros()
    ss: cv<f32>[BM] = zeros()
    for k in 0 .. K / BK {
      x: st<bf16>[BM, BK] = X.tile(m, k)
      w: st<bf16>[BK, BN] = W.tile(k, n)
      xr: rt<f32>[BM, BK] = X.tile(m, k)
      ss = ss + row_sum(xr * xr)
      acc = mma_AB(x, w, acc)
    }
    Y.tile(m, n) = cvt<bf16>(mul_row(acc, rsqrt(ss / K + eps)))
  }
}
"""
"""A fused norm in a GEMM: the rows' sum of squares carried through the K loop (the register copy
of each A tile loaded from the tensor: a ring tile is not read into registers, see ssd_copy)."""

RMS_LINEAR_READ = """
kernel rms_linear_read<BM = 128, BN = 128, BK = 64>(X: gl<bf16>[M, K], W: gl<bf16>[K, N], Y: gl<bf16>[M, N], eps: f32) {
  for (m, n) in blocks(M / BM, N / BN) schedule(persistent, group = 8) {
    acc: rt<f32>[BM, BN] = zeros()
    ss: cv<f32>[BM] = zeros()
    for k in 0 .. K / BK {
      x: st<bf16>[BM, BK] = X.tile(m, k)
      w: st<bf16>[BK, BN] = W.tile(k, n)
      xr: rt<f32>[BM, BK] = x
      ss = ss + row_sum(xr * xr)
      acc = mma_AB(x, w, acc)
    }
    Y.tile(m, n) = cvt<bf16>(mul_row(acc, rsqrt(ss / K + eps)))
  }
}
"""
"""rms_linear as a user writes it: the A tile the product reads from its ring is also read into
registers for the rows' sum of squares (``xr = x``, the trip's ``Read`` step), not loaded twice."""

GEMM_DEQUANT_A = """
kernel gemm_dequant_a<BM = 128, BN = 256, BK = 64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], S: gl<f32>[K],
                                                    C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) schedule(persistent, group = 8) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<bf16>[BM, BK] = A.tile(m, k)
      s: rv<f32>[BK] = S.tile(k)
      b: st<bf16>[BK, BN] = B.tile(k, n)
      ar: rt<f32>[BM, BK] = a
      acc = mma_AB(cvt<bf16>(mul_col(ar, s)), b, acc)
    }
    C.tile(m, n) = cvt<bf16>(acc)
  }
}
"""
"""A per-K-channel scale applied to A in registers, A streamed by TMA through the ring and read into
registers from its stage (``ar = a``), then an RS wgmma: the dequantized-operand pattern."""

GEMM_F32A = """
kernel gemm_f32a<BM = 128, BN = 128, BK = 32>(A: gl<f32>[M, K], B: gl<bf16>[K, N], C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) schedule(persistent, group = 8) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<f32>[BM, BK] = A.tile(m, k)
      b: st<bf16>[BK, BN] = B.tile(k, n)
      ar: rt<f32>[BM, BK] = a
      acc = mma_AB(cvt<bf16>(ar), b, acc)
    }
    C.tile(m, n) = cvt<bf16>(acc)
  }
}
"""
"""A mixed-input GEMM: f32 activations streamed by TMA, read into registers from their ring stage
(ld.shared.v2.f32) and converted to bf16 for an RS wgmma."""

GEMM_FP8A = """
kernel gemm_fp8a<BM = 128, BN = 128, BK = 64>(A: gl<e4m3>[M, K], B: gl<bf16>[K, N], S: gl<f32>[K],
                                              C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) schedule(persistent, group = 8) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<e4m3>[BM, BK] = A.tile(m, k)
      b: st<bf16>[BK, BN] = B.tile(k, n)
      s: rv<f32>[BK] = S.tile(k)
      ar: rt<f32>[BM, BK] = a
      acc = mma_AB(cvt<bf16>(mul_col(ar, s)), b, acc)
    }
    C.tile(m, n) = cvt<bf16>(acc)
  }
}
"""
"""An fp8 (e4m3) A with a per-K-channel scale, dequantized in registers from its ring stage
(ld.shared.b16 + cvt.rn.f16x2.e4m3x2 a pair) for an RS wgmma against a bf16 B."""

RESIDUAL_F32_SHARED = """
kernel residual_f32_shared(A: gl<bf16>[M, K], B: gl<bf16>[N, K], R: gl<f32>[M, N], C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / 128, N / 128) {
    acc: rt<f32>[128, 128] = zeros()
    for k in 0 .. K / 64 {
      a: st<bf16>[128, 64] = A.tile(m, k)
      b: st<bf16>[128, 64] = B.tile(n, k)
      acc = mma_ABt(a, b, acc)
    }
    rs: st<f32>[128, 128] = R.tile(m, n)
    r: rt<f32>[128, 128] = rs
    C.tile(m, n) = cvt<bf16>(silu(acc) + r)
  }
}
"""
"""An f32 residual loaded as a shared tile once per tile and read into registers after the loop
(512-byte rows: four 128-byte swizzle panels)."""

ATTN_DOC = """
@consumers(2)
kernel attn_doc<D = 128, BKV = 128, BQ = 128>(
    Q: gl<bf16>[B, H, N, D], K: gl<bf16>[B, H, N, D], V: gl<bf16>[B, H, N, D],
    QD: gl<f32>[B, N], O: gl<bf16>[B, H, N, D], scale: f32) {
  for (b, h, i) in blocks(B, H, N / BQ) {
    q: st<bf16>[BQ, D] = Q.tile(b, h, i, 0)
    o: rt<f32>[BQ, D] = zeros()
    mx: cv<f32>[BQ] = fill(-inf)
    l: cv<f32>[BQ] = zeros()
    qdoc: cv<f32>[BQ] = QD.tile(b, i)
    zt: rt<f32>[BQ, BKV] = zeros()
    for j in 0 .. N / BKV {
      k: st<bf16>[BKV, D] = K.tile(b, h, j, 0)
      v: st<bf16>[BKV, D] = V.tile(b, h, j, 0)
      kdoc: rv<f32>[BKV] = QD.tile(b, j)
      s = mma_ABt(q, k) * (scale * LOG2E)
      s = select(add_col(zt, kdoc) != add_row(zt, qdoc), -1e30, s)   # finite: a block may mask a whole row
      mx_new = max(mx, row_max(s))
      p = exp2(sub_row(s, mx_new))
      alpha = exp2(mx - mx_new)
      l = l * alpha + row_sum(p)
      o = mma_AB(cvt<bf16>(p), v, mul_row(o, alpha))
      mx = mx_new
    }
    O.tile(b, h, i, 0) = cvt<bf16>(div_row(o, l))
  }
}
"""
"""The document mask of docs/language.md ("Masks from indices"): a query sees the keys of its own
document, the ids a vector per row (cv) and per column (rv) of one [B, N] tensor."""

ATTN_QREG = """
@consumers(2)
kernel attn_qreg<D = 64, BKV = 128, BQ = 128>(
    Q: gl<bf16>[B, H, N, D], K: gl<bf16>[B, H, N, D], V: gl<bf16>[B, H, N, D],
    O: gl<bf16>[B, H, N, D], scale: f32) {
  for (b, h, i) in blocks(B, H, N / BQ) {
    qf: rt<f32>[BQ, D] = Q.tile(b, h, i, 0)
    q = cvt<bf16>(qf * (scale * LOG2E))
    o: rt<f32>[BQ, D] = zeros()
    mx: cv<f32>[BQ] = fill(-inf)
    l: cv<f32>[BQ] = zeros()
    for j in 0 .. N / BKV {
      k: st<bf16>[BKV, D] = K.tile(b, h, j, 0)
      v: st<bf16>[BKV, D] = V.tile(b, h, j, 0)
      s = mma_ABt(q, k)
      mx_new = max(mx, row_max(s))
      p = exp2(sub_row(s, mx_new))
      alpha = exp2(mx - mx_new)
      l = l * alpha + row_sum(p)
      o = mma_AB(cvt<bf16>(p), v, mul_row(o, alpha))
      mx = mx_new
    }
    O.tile(b, h, i, 0) = cvt<bf16>(div_row(o, l))
  }
}
"""
"""Q scaled in registers once per tile and used as wgmma's A operand from registers (RS)."""

GEMM_CLAMP = """
kernel gemm_clamp<BM = 128, BN = 256, BK = 64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<bf16>[M, N], lo: f32, hi: f32) {
  for (m, n) in blocks(M / BM, N / BN) schedule(persistent, group = 8) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<bf16>[BM, BK] = A.tile(m, k)
      b: st<bf16>[BK, BN] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    C.tile(m, n) = cvt<bf16>(min(max(acc, lo), hi))
  }
}
"""

BMM5 = """
kernel bmm5<BM = 128, BN = 128, BK = 64>(A: gl<bf16>[B, H, G, M, K], W: gl<bf16>[B, H, G, K, N], C: gl<bf16>[B, H, G, M, N]) {
  for (b, h, g, m, n) in blocks(B, H, G, M / BM, N / BN) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<bf16>[BM, BK] = A.tile(b, h, g, m, k)
      w: st<bf16>[BK, BN] = W.tile(b, h, g, k, n)
      acc = mma_AB(a, w, acc)
    }
    C.tile(b, h, g, m, n) = cvt<bf16>(acc)
  }
}
"""
"""Five block counts: the leading three are one grid axis."""

GEMM_SCALE_GATE = """
kernel gemm_scale_gate<BM = 128, BN = 256, BK = 64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], S: gl<f32>[N],
                                                   G: gl<bf16>[M, N], C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<bf16>[BM, BK] = A.tile(m, k)
      b: st<bf16>[BK, BN] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    s: rv<f32>[BN] = S.tile(n)
    g: rt<f32>[BM, BN] = G.tile(m, n)
    C.tile(m, n) = cvt<bf16>(mul_col(acc, s) * sigmoid(g))
  }
}
"""
"""Session 17: at 128 x 256 no cooperative consumer split holds it (288 registers a thread), so it
fell to mma.sync; tile-split's fit rule now halves it (tests/test_tile_split.py)."""

GEMM_BM64_RESIDUAL = """
kernel gemm_bm64_residual<BM = 64, BN = 256, BK = 64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], Bias: gl<bf16>[N],
                                                      R: gl<bf16>[M, N], C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<bf16>[BM, BK] = A.tile(m, k)
      b: st<bf16>[BK, BN] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    bias: rv<f32>[BN] = Bias.tile(n)
    r: rt<f32>[BM, BN] = R.tile(m, n)
    C.tile(m, n) = cvt<bf16>(add_col(acc, bias) + r)
  }
}
"""
"""Session 17: one 64-row consumer cannot hold the 64 x 256 tile with its bias and residual (288
registers a thread), so it fell to mma.sync; tile-split's fit rule halves it."""

ATTN_MLA = """
kernel mla<DQK = 192, DV = 128, BQ = 128, BKV = 64>(Q: gl<bf16>[B, H, N, DQK], K: gl<bf16>[B, H, N, DQK], V: gl<bf16>[B, H, N, DV], O: gl<bf16>[B, H, N, DV], scale: f32) {
  for (b, h, i) in blocks(B, H, N / BQ) {
    q: st<bf16>[BQ, DQK] = Q.tile(b, h, i, 0)
    o: rt<f32>[BQ, DV] = zeros()
    mx: cv<f32>[BQ] = fill(-inf)
    l: cv<f32>[BQ] = zeros()
    for j in 0 .. N / BKV {
      k: st<bf16>[BKV, DQK] = K.tile(b, h, j, 0)
      v: st<bf16>[BKV, DV] = V.tile(b, h, j, 0)
      s = mma_ABt(q, k) * (scale * LOG2E)
      mx_new = max(mx, row_max(s))
      p = exp2(sub_row(s, mx_new))
      alpha = exp2(mx - mx_new)
      l = l * alpha + row_sum(p)
      o = mma_AB(cvt<bf16>(p), v, mul_row(o, alpha))
      mx = mx_new
    }
    O.tile(b, h, i, 0) = cvt<bf16>(div_row(o, l))
  }
}
"""
"""Query/key head dim 192, value head dim 128 (DeepSeek-style): the two products' K differ."""


def _mk(m, n, k):
    return {"M": m, "N": n, "K": k}


def _gemm_inputs(s, d, dtype=torch.bfloat16, out=torch.bfloat16):
    return [_randn(s["M"], s["K"], dtype=dtype, device=d), _randn(s["K"], s["N"], dtype=dtype, device=d),
            _nan(s["M"], s["N"], dtype=out, device=d)]


def _tiles_softmax(y, bn=128):
    out = torch.empty_like(y)
    for n0 in range(0, y.shape[1], bn):
        out[:, n0:n0 + bn] = torch.softmax(y[:, n0:n0 + bn], dim=1)
    return out


def _tile_rowmax(y, bn=256):
    """[N tiles, M]: each row's max over each bn-column tile."""
    return torch.stack([y[:, n0:n0 + bn].amax(dim=1) for n0 in range(0, y.shape[1], bn)])


def _attn_inputs(s, d, extra=None):
    b, h, nq, nk, dd = s["B"], s["H"], s["NQ"], s["NK"], s["D"]
    args = [_randn(b, h, nq, dd, device=d), _randn(b, h, nk, dd, device=d), _randn(b, h, nk, dd, device=d),
            _nan(b, h, nq, dd, device=d)]
    if extra == "keypad":
        keep = torch.rand(b, nk, device=d) > 0.3
        keep[:, 0] = True
        args.append(torch.where(keep, 0.0, float("-inf")).to(device=d, dtype=torch.float32))
    args.append(1.0 / math.sqrt(dd))
    return args


def _attn_ref(a, causal=False):
    q, k, v = (t.float() for t in a[:3])
    s = q @ k.transpose(-1, -2) * a[-1]
    if len(a) == 6:
        s = s + a[4][:, None, None, :]
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1).to(s.device), float("-inf"))
    return [torch.softmax(s, dim=-1) @ v]


def _scan_ref(a, c=64):
    q, k, v = (t.float() for t in a[:3])
    gamma = a[4]
    b, h, n, d = q.shape
    state = torch.zeros(b, h, d, d, device=q.device)
    out = torch.empty(b, h, n, d, device=q.device)
    for c0 in range(0, n, c):
        qc, kc, vc = q[:, :, c0:c0 + c], k[:, :, c0:c0 + c], v[:, :, c0:c0 + c]
        # the kernel rounds the state and the intra-chunk scores to bf16 before their products
        sc = torch.tril(qc @ kc.transpose(-1, -2)).bfloat16().float()
        out[:, :, c0:c0 + c] = qc @ state.bfloat16().float() + sc @ vc
        state = state * gamma + kc.transpose(-1, -2) @ vc
    return [out]


def _ssd_inputs(s, d):
    b, h, n, c = s["B"], s["H"], s["N"], 64
    q, k, v = (_randn(b, h, n, 64, device=d) * 0.3 for _ in range(3))
    logd = -torch.rand(b, h, n, device=d) * 0.1
    cs = torch.empty_like(logd)
    tot = torch.empty_like(logd)
    for c0 in range(0, n, c):
        cs[..., c0:c0 + c] = logd[..., c0:c0 + c].cumsum(-1)
        tot[..., c0:c0 + c] = cs[..., min(c0 + c, n) - 1:min(c0 + c, n)]
    return [q, k, v, cs, tot, _nan(b, h, n, 64, device=d)]


def _ssd_ref(a, c=64):
    q, k, v = (t.float() for t in a[:3])
    cs, tot = a[3].float(), a[4].float()
    b, h, n, d = q.shape
    state = torch.zeros(b, h, d, d, device=q.device)
    out = torch.empty(b, h, n, d, device=q.device)
    for c0 in range(0, n, c):
        sl = slice(c0, c0 + c)
        qc, kc, vc, csc, t = q[:, :, sl], k[:, :, sl], v[:, :, sl], cs[:, :, sl], tot[:, :, c0:c0 + 1]
        decay = torch.exp(csc[..., :, None] - csc[..., None, :])
        sc = torch.tril(qc @ kc.transpose(-1, -2) * decay).bfloat16().float()
        out[:, :, sl] = sc @ vc + torch.exp(csc)[..., None] * (qc @ state.bfloat16().float())
        ks = (kc * torch.exp(t - csc)[..., None]).bfloat16().float()
        state = state * torch.exp(t)[..., None] + ks.transpose(-1, -2) @ vc
    return [out]


def _relbias_inputs(s, d):
    b, h, n = s["B"], s["H"], s["N"]
    q, k, v = (_randn(b, h, n, 64, device=d) for _ in range(3))
    return [q, k, v, _randn(b, h, n, n, device=d), _nan(b, h, n, 64, device=d), 0.125]


def _relbias_ref(a):
    q, k, v = (t.float() for t in a[:3])
    return [torch.softmax(q @ k.transpose(-1, -2) * a[5] + a[3].float(), dim=-1) @ v]


def _f32out_inputs(s, d):
    b, h, n = s["B"], s["H"], s["N"]
    return [*(_randn(b, h, n, 64, device=d) for _ in range(3)),
            _nan(b, h, n, 64, dtype=torch.float32, device=d), 0.125]


def _f32out_ref(a):
    q, k, v = (t.float() for t in a[:3])
    return [torch.softmax(q @ k.transpose(-1, -2) * a[4], dim=-1) @ v]


def _doc_inputs(s, d):
    b, h, n = s["B"], s["H"], s["N"]
    ids = torch.sort(torch.randint(0, 5, (b, n), device=d), dim=1).values.float()
    return [*(_randn(b, h, n, 128, device=d) for _ in range(3)), ids, _nan(b, h, n, 128, device=d), 0.088]


def _doc_ref(a):
    q, k, v = (t.float() for t in a[:3])
    ids = a[3]
    s = q @ k.transpose(-1, -2) * a[5]
    s = s.masked_fill((ids[:, None, :, None] != ids[:, None, None, :]), float("-inf"))
    return [torch.softmax(s, dim=-1) @ v]


GEMM_INDEX_EPILOGUE = """
kernel gemm_index_epilogue<BM = 128, BN = 128, BK = 64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], X: gl<f32>[M, N],
                                                        C: gl<f32>[M, N], s: f32) {
  for (m, n) in blocks(M / BM, N / BN) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<bf16>[BM, BK] = A.tile(m, k)
      b: st<bf16>[BK, BN] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    x: rt<f32>[BM, BN] = X.tile(m, n)
    r: rt<f32>[BM, BN] = row_index()
    c: rt<f32>[BM, BN] = col_index()
    d = (c + n * BN) - (r + m * BM)
    C.tile(m, n) = select(d > 0, exp(x * s - d * 0.01), relu(acc) + d * 0.001)
  }
}
"""
"""A GEMM epilogue built from index tiles and a second input tile (session 18, issue 17): held, the
accumulator, x and both index tiles need 288 registers a thread of 2 consumers (> 240);
fuse-elementwise's chains bring it to 224 and it keeps the wgmma path."""


def _index_epilogue_ref(a):
    m, n = a[2].shape
    d = torch.arange(n, device=a[2].device)[None, :].float() - torch.arange(m, device=a[2].device)[:, None].float()
    acc = a[0].float() @ a[1].float()
    return [torch.where(d > 0, torch.exp(a[2] * a[4] - d * 0.01), torch.relu(acc) + d * 0.001)]


def _alibi(bq: int, hoisted: bool) -> str:
    """ALiBi-style causal attention as a user wrote it (session 18, issue 17): the distance tile
    built from row_index/col_index inside the key loop (or, ``hoisted``, the index tiles made once
    before it), the scores' scale and bias and the causal select as elementwise steps. Holding each
    step's tile did not fit any consumer split (260 / 388 registers a thread) and the kernel fell
    to the register-tile backend; fuse-elementwise computes the chains (and, at BQ = 192 or
    hoisted, the index tiles) per element at their users."""
    index = """qi: rt<f32>[BQ, BKV] = row_index()
      kj: rt<f32>[BQ, BKV] = col_index()"""
    outer, inner = (index.replace("      ", "    "), "") if hoisted else ("", index)
    return f"""
kernel a_alibi<D = 64, BQ = {bq}, BKV = 128>(Q: gl<bf16>[B, H, N, D], K: gl<bf16>[B, H, N, D], V: gl<bf16>[B, H, N, D], O: gl<bf16>[B, H, N, D], scale: f32, slope: f32) {{
  for (b, h, i) in blocks(B, H, N / BQ) {{
    q: st<bf16>[BQ, D] = Q.tile(b, h, i, 0)
    o: rt<f32>[BQ, D] = zeros()
    mx: cv<f32>[BQ] = fill(-inf)
    l: cv<f32>[BQ] = zeros()
    {outer}
    for j in 0 .. min(N / BKV, ((i + 1) * BQ) / BKV) {{
      k: st<bf16>[BKV, D] = K.tile(b, h, j, 0)
      v: st<bf16>[BKV, D] = V.tile(b, h, j, 0)
      {inner}
      dist = (kj + j * BKV) - (qi + i * BQ)
      s = mma_ABt(q, k) * scale + dist * slope
      s = select(dist > 0, -inf, s)
      mx_new = max(mx, row_max(s))
      p = exp(sub_row(s, mx_new))
      alpha = exp(mx - mx_new)
      l = l * alpha + row_sum(p)
      o = mma_AB(cvt<bf16>(p), v, mul_row(o, alpha))
      mx = mx_new
    }}
    O.tile(b, h, i, 0) = cvt<bf16>(div_row(o, l))
  }}
}}
"""


ALIBI_128 = _alibi(128, False)
ALIBI_192 = _alibi(192, False)
ALIBI_HOISTED = _alibi(128, True)
ALIBI_SLOPE = 0.0625


def _alibi_inputs(s, d):
    b, h, n = s["B"], s["H"], s["N"]
    return [*(_randn(b, h, n, 64, device=d) for _ in range(3)), _nan(b, h, n, 64, device=d), 0.125, ALIBI_SLOPE]


def alibi_bias(n: int, slope: float, device=None, dtype=torch.float32) -> torch.Tensor:
    """[n, n]: slope * (key - query), -inf above the diagonal (the kernel's select)."""
    r = torch.arange(n, device=device, dtype=dtype)
    dist = r[None, :] - r[:, None]
    return (dist * slope).masked_fill(dist > 0, float("-inf"))


def _alibi_ref(a):
    q, k, v = (t.float() for t in a[:3])
    s = q @ k.transpose(-1, -2) * a[4] + alibi_bias(q.shape[2], a[5], q.device)
    return [torch.softmax(s, dim=-1) @ v]


def _attn_shape(b, h, nq, nk, d):
    return {"B": b, "H": h, "NQ": nq, "NK": nk, "D": d}


CASES = [
    Case("gemm_rowscale_bias", GEMM_ROWSCALE_BIAS,
         lambda s, d: [_randn(s["M"], s["K"], device=d), _randn(s["K"], s["N"], device=d),
                       torch.rand(s["M"], device=d) + 0.5, torch.randn(s["N"], device=d),
                       _nan(s["M"], s["N"], device=d)],
         lambda a: [(a[0].float() @ a[1].float()) * a[2][:, None] + a[3]], (4,),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 520)], _mk(300, 520, 200)),
    Case("gemm_atbt", GEMM_ATBT,
         lambda s, d: [_randn(s["K"], s["M"], device=d), _randn(s["N"], s["K"], device=d),
                       _nan(s["M"], s["N"], device=d)],
         lambda a: [a[0].float().t() @ a[1].float().t()], (2,),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 520)], _mk(200, 520, 136)),
    Case("gemm_f16", GEMM_F16, lambda s, d: _gemm_inputs(s, d, torch.float16, torch.float16),
         lambda a: [a[0].float() @ a[1].float()], (2,),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 520)], _mk(300, 520, 200)),
    Case("gemm_k0", GEMM_K0_F32,
         lambda s, d: _gemm_inputs(s, d, out=torch.float32) + [2],
         lambda a: [a[0].float()[:, 128:] @ a[1].float()[128:, :]], (2,),
         [_mk(2048, 2048, 2048), _mk(1000, 3000, 520)], _mk(300, 520, 264)),
    Case("gemm_bm64", GEMM_BM64, lambda s, d: _gemm_inputs(s, d),
         lambda a: [a[0].float() @ a[1].float()], (2,),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 520)], _mk(200, 520, 200)),
    Case("gemm_bn192", GEMM_BN192, lambda s, d: _gemm_inputs(s, d),
         lambda a: [a[0].float() @ a[1].float()], (2,),
         [_mk(4096, 3072, 4096), _mk(1000, 3000, 520)], _mk(300, 400, 200)),
    Case("gemm_gelu_two_stores", GEMM_TWO_STORES,
         lambda s, d: [_randn(s["M"], s["K"], device=d), _randn(s["K"], s["N"], device=d),
                       _randn(s["N"], device=d), _nan(s["M"], s["N"], device=d), _nan(s["M"], s["N"], device=d)],
         lambda a: [torch.nn.functional.gelu(a[0].float() @ a[1].float() + a[2].float(), approximate="tanh"),
                    a[0].float() @ a[1].float() + a[2].float()], (3, 4),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 520)], _mk(300, 520, 200)),
    Case("gemm_bias_gelu_tanh", GEMM_GELU_TANH,
         lambda s, d: [_randn(s["M"], s["K"], device=d), _randn(s["K"], s["N"], device=d),
                       _randn(s["N"], device=d), _nan(s["M"], s["N"], device=d)],
         lambda a: [torch.nn.functional.gelu(a[0].float() @ a[1].float() + a[2].float(), approximate="tanh")],
         (3,), [_mk(4096, 4096, 4096), _mk(1000, 3000, 520)], _mk(300, 520, 200)),
    Case("gemm_softmax", GEMM_SOFTMAX, lambda s, d: _gemm_inputs(s, d),
         lambda a: [_tiles_softmax(a[0].float() @ a[1].float())], (2,),
         [_mk(2048, 2048, 2048), _mk(1000, 600, 520)], _mk(300, 260, 200)),
    Case("bmm4", BMM4,
         lambda s, d: [_randn(s["B"], s["H"], s["M"], s["K"], device=d),
                       _randn(s["B"], s["H"], s["K"], s["N"], device=d),
                       _nan(s["B"], s["H"], s["M"], s["N"], device=d)],
         lambda a: [a[0].float() @ a[1].float()], (2,),
         [{"B": 2, "H": 4, "M": 1024, "N": 1024, "K": 1024}, {"B": 2, "H": 3, "M": 1000, "N": 600, "K": 264}],
         {"B": 1, "H": 2, "M": 200, "N": 300, "K": 136}),
    Case("gemm_fp8_e5m2", GEMM_FP8_E5M2,
         lambda s, d: [_randn(s["M"], s["K"], dtype=torch.float8_e5m2, device=d),
                       _randn(s["N"], s["K"], dtype=torch.float8_e5m2, device=d),
                       _nan(s["M"], s["N"], device=d), 0.5, 0.25],
         lambda a: [(a[0].float() @ a[1].float().t()) * 0.125], (2,),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 528)], _mk(200, 304, 256)),
    Case("attn_d80", ATTN_D80, lambda s, d: _attn_inputs(s, d), _attn_ref, (3,),
         [_attn_shape(2, 4, 2048, 2048, 80), _attn_shape(1, 3, 1000, 1000, 80)],
         _attn_shape(1, 2, 200, 200, 80)),
    Case("attn_d112", ATTN_D112, lambda s, d: _attn_inputs(s, d), _attn_ref, (3,),
         [_attn_shape(2, 4, 2048, 2048, 112), _attn_shape(1, 3, 1000, 1000, 112)],
         _attn_shape(1, 2, 200, 200, 112)),
    Case("attn_bkv64", ATTN_BKV64, lambda s, d: _attn_inputs(s, d), _attn_ref, (3,),
         [_attn_shape(2, 4, 2048, 2048, 128), _attn_shape(1, 3, 1000, 1000, 128)],
         _attn_shape(1, 2, 200, 200, 128)),
    Case("attn_cross", _attn("cross", 128), lambda s, d: _attn_inputs(s, d), _attn_ref, (3,),
         [_attn_shape(2, 4, 1024, 4096, 128), _attn_shape(1, 3, 1000, 333, 128)],
         _attn_shape(1, 2, 200, 72, 128)),
    Case("attn_keypad", ATTN_KEYPAD, lambda s, d: _attn_inputs(s, d, "keypad"), _attn_ref, (3,),
         [_attn_shape(2, 4, 2048, 2048, 64), _attn_shape(1, 3, 1000, 1000, 64)],
         _attn_shape(1, 2, 200, 200, 64)),
    Case("scan_decay", SCAN_DECAY,
         lambda s, d: [_randn(s["B"], s["H"], s["N"], 64, device=d) * 0.3 for _ in range(3)]
         + [_nan(s["B"], s["H"], s["N"], 64, device=d), 0.9],
         _scan_ref, (3,), [{"B": 2, "H": 8, "N": 2048}, {"B": 1, "H": 3, "N": 1000}], {"B": 1, "H": 2, "N": 200}),
    Case("layernorm_f32", LAYERNORM_F32,
         lambda s, d: [_randn(s["R"], 1024, device=d), _randn(1024, device=d), _randn(1024, device=d),
                       _nan(s["R"], 1024, dtype=torch.float32, device=d), 1e-5],
         lambda a: [torch.nn.functional.layer_norm(a[0].float(), (1024,), a[1].float(), a[2].float(), 1e-5)],
         (3,), [{"R": 4096}, {"R": 1000}], {"R": 50}),
    Case("scaled_res_rmsnorm", SCALED_RES_RMSNORM,
         lambda s, d: [_randn(s["R"], 3072, device=d), _randn(s["R"], 3072, device=d), _randn(3072, device=d),
                       _nan(s["R"], 3072, device=d), 1e-5, 0.7],
         _scaled_res_rms_ref, (3,), [{"R": 8192}, {"R": 1000}], {"R": 21}),
    Case("gemm_swiglu", GEMM_SWIGLU,
         lambda s, d: [_randn(s["M"], s["K"], device=d), _randn(s["K"], s["N"], device=d),
                       _randn(s["K"], s["N"], device=d), _nan(s["M"], s["N"], device=d)],
         lambda a: [torch.nn.functional.silu(a[0].float() @ a[1].float()) * (a[0].float() @ a[2].float())],
         (3,), [_mk(4096, 4096, 4096), _mk(1000, 3000, 520)], _mk(300, 260, 200)),
    Case("gemm_rowmax", GEMM_ROWMAX,
         lambda s, d: [_randn(s["M"], s["K"], device=d), _randn(s["N"], s["K"], device=d),
                       _nan(s["M"], s["N"], device=d),
                       _nan(-(-s["N"] // 256), s["M"], dtype=torch.float32, device=d)],
         lambda a: [a[0].float() @ a[1].float().t(), _tile_rowmax(a[0].float() @ a[1].float().t())], (2, 3),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 520)], _mk(300, 520, 200)),
    Case("gemm_bk128_relu", GEMM_BK128_F32,
         lambda s, d: [_randn(s["M"], s["K"], device=d), _randn(s["N"], s["K"], device=d),
                       torch.randn(s["N"], device=d), _nan(s["M"], s["N"], dtype=torch.float32, device=d)],
         lambda a: [torch.relu(a[0].float() @ a[1].float().t() + a[2])], (3,),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 520)], _mk(300, 260, 200)),
    Case("attn_bq64", ATTN_BQ64, lambda s, d: _attn_inputs(s, d), _attn_ref, (3,),
         [_attn_shape(2, 4, 2048, 2048, 128), _attn_shape(1, 3, 1000, 1000, 128)],
         _attn_shape(1, 2, 200, 200, 128)),
    Case("attn_causal_d80", ATTN_CAUSAL_D80, lambda s, d: _attn_inputs(s, d), lambda a: _attn_ref(a, causal=True),
         (3,), [_attn_shape(2, 4, 2048, 2048, 80), _attn_shape(1, 3, 1000, 1000, 80)],
         _attn_shape(1, 2, 200, 200, 80)),
    Case("gemm_scaled_a", GEMM_SCALED_A,
         lambda s, d: [_randn(s["M"], s["K"], device=d), _randn(s["K"], s["N"], device=d),
                       torch.rand(s["K"], device=d) + 0.5, _nan(s["M"], s["N"], device=d)],
         lambda a: [(a[0].float() * a[2]).bfloat16().float() @ a[1].float()], (3,),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 520)], _mk(300, 520, 200)),
    Case("attn_relbias", ATTN_RELBIAS, _relbias_inputs, _relbias_ref, (4,),
         [{"B": 2, "H": 4, "N": 2048}, {"B": 1, "H": 3, "N": 1000}], {"B": 1, "H": 2, "N": 200}),
    Case("attn_f32out", ATTN_F32OUT, _f32out_inputs, _f32out_ref, (3,),
         [{"B": 2, "H": 4, "N": 2048}, {"B": 1, "H": 3, "N": 1000}], {"B": 1, "H": 2, "N": 200}),
    Case("gemm_rowbias_f16", GEMM_ROWBIAS_F16,
         lambda s, d: [_randn(s["M"], s["K"], dtype=torch.float16, device=d),
                       _randn(s["N"], s["K"], dtype=torch.float16, device=d),
                       _randn(s["M"], dtype=torch.float16, device=d), _nan(s["M"], s["N"], dtype=torch.float16, device=d)],
         lambda a: [torch.sigmoid(a[0].float() @ a[1].float().t() + a[2].float()[:, None])], (3,),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 520)], _mk(300, 520, 200)),
    Case("ssd", SSD, _ssd_inputs, _ssd_ref, (5,),
         [{"B": 2, "H": 8, "N": 2048}, {"B": 1, "H": 3, "N": 1000}], {"B": 1, "H": 2, "N": 200}),
    Case("ssd_copy", SSD_COPY, _ssd_inputs, _ssd_ref, (5,),
         [{"B": 2, "H": 8, "N": 2048}, {"B": 1, "H": 3, "N": 1000}], {"B": 1, "H": 2, "N": 200}),
    Case("rms_linear", RMS_LINEAR,
         lambda s, d: [_randn(s["M"], s["K"], device=d), _randn(s["K"], s["N"], device=d),
                       _nan(s["M"], s["N"], device=d), 1e-5],
         lambda a: [(a[0].float() @ a[1].float())
                    * torch.rsqrt((a[0].float() ** 2).mean(1, keepdim=True) + 1e-5)], (2,),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 520)], _mk(300, 260, 200)),
    Case("rms_linear_read", RMS_LINEAR_READ,
         lambda s, d: [_randn(s["M"], s["K"], device=d), _randn(s["K"], s["N"], device=d),
                       _nan(s["M"], s["N"], device=d), 1e-5],
         lambda a: [(a[0].float() @ a[1].float())
                    * torch.rsqrt((a[0].float() ** 2).mean(1, keepdim=True) + 1e-5)], (2,),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 520)], _mk(300, 260, 200)),
    Case("gemm_dequant_a", GEMM_DEQUANT_A,
         lambda s, d: [_randn(s["M"], s["K"], device=d), _randn(s["K"], s["N"], device=d),
                       torch.rand(s["K"], device=d) + 0.5, _nan(s["M"], s["N"], device=d)],
         lambda a: [(a[0].float() * a[2]).bfloat16().float() @ a[1].float()], (3,),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 520)], _mk(300, 520, 200)),
    Case("gemm_f32a", GEMM_F32A,
         lambda s, d: [torch.randn(s["M"], s["K"], device=d), _randn(s["K"], s["N"], device=d),
                       _nan(s["M"], s["N"], device=d)],
         lambda a: [a[0].bfloat16().float() @ a[1].float()], (2,),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 520)], _mk(300, 260, 200)),
    Case("gemm_fp8a", GEMM_FP8A,
         lambda s, d: [torch.randn(s["M"], s["K"], device=d).to(torch.float8_e4m3fn),
                       _randn(s["K"], s["N"], device=d) * s["K"] ** -0.5, torch.rand(s["K"], device=d) + 0.5,
                       _nan(s["M"], s["N"], device=d)],
         lambda a: [(a[0].float() * a[2]).bfloat16().float() @ a[1].float()], (3,),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 528)], _mk(300, 260, 200)),  # (TMA: 16-byte fp8 rows)
    Case("residual_f32_shared", RESIDUAL_F32_SHARED,
         lambda s, d: [_randn(s["M"], s["K"], device=d), _randn(s["N"], s["K"], device=d),
                       torch.randn(s["M"], s["N"], device=d), _nan(s["M"], s["N"], device=d)],
         lambda a: [torch.nn.functional.silu(a[0].float() @ a[1].float().t()) + a[2]], (3,),
         [_mk(2048, 2048, 2048), _mk(1000, 600, 520)], _mk(300, 200, 136)),
    Case("attn_doc", ATTN_DOC, _doc_inputs, _doc_ref, (4,),
         [{"B": 2, "H": 4, "N": 2048}, {"B": 1, "H": 3, "N": 1000}], {"B": 1, "H": 2, "N": 200}),
    Case("attn_qreg", ATTN_QREG,
         lambda s, d: [*(_randn(s["B"], s["H"], s["N"], 64, device=d) for _ in range(3)),
                       _nan(s["B"], s["H"], s["N"], 64, device=d), 0.125],
         _f32out_ref, (3,), [{"B": 2, "H": 4, "N": 2048}, {"B": 1, "H": 3, "N": 1000}], {"B": 1, "H": 2, "N": 200}),
    Case("gemm_clamp", GEMM_CLAMP,
         lambda s, d: _gemm_inputs(s, d) + [-20.0, 30.0],
         lambda a: [(a[0].float() @ a[1].float()).clamp(-20.0, 30.0)], (2,),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 520)], _mk(300, 520, 200)),
    Case("gemm_scale_gate", GEMM_SCALE_GATE,
         lambda s, d: [_randn(s["M"], s["K"], device=d), _randn(s["K"], s["N"], device=d),
                       torch.rand(s["N"], device=d) + 0.5, _randn(s["M"], s["N"], device=d),
                       _nan(s["M"], s["N"], device=d)],
         lambda a: [(a[0].float() @ a[1].float()) * a[2] * torch.sigmoid(a[3].float())], (4,),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 520)], _mk(300, 520, 200)),
    Case("gemm_bm64_residual", GEMM_BM64_RESIDUAL,
         lambda s, d: [_randn(s["M"], s["K"], device=d), _randn(s["K"], s["N"], device=d),
                       _randn(s["N"], device=d), _randn(s["M"], s["N"], device=d), _nan(s["M"], s["N"], device=d)],
         lambda a: [a[0].float() @ a[1].float() + a[2].float() + a[3].float()], (4,),
         [_mk(4096, 4096, 4096), _mk(1000, 3000, 520)], _mk(300, 520, 200)),
    Case("attn_mla", ATTN_MLA,
         lambda s, d: [_randn(s["B"], s["H"], s["N"], 192, device=d), _randn(s["B"], s["H"], s["N"], 192, device=d),
                       _randn(s["B"], s["H"], s["N"], 128, device=d), _nan(s["B"], s["H"], s["N"], 128, device=d),
                       192 ** -0.5],
         _f32out_ref, (3,), [{"B": 2, "H": 4, "N": 2048}, {"B": 1, "H": 3, "N": 960}], {"B": 1, "H": 2, "N": 192}),
    Case("bmm5", BMM5,
         lambda s, d: [_randn(s["B"], s["H"], s["G"], s["M"], s["K"], device=d),
                       _randn(s["B"], s["H"], s["G"], s["K"], s["N"], device=d),
                       _nan(s["B"], s["H"], s["G"], s["M"], s["N"], device=d)],
         lambda a: [a[0].float() @ a[1].float()], (2,),
         [{"B": 2, "H": 2, "G": 3, "M": 512, "N": 512, "K": 512},
          {"B": 1, "H": 2, "G": 3, "M": 200, "N": 136, "K": 136}],
         {"B": 2, "H": 2, "G": 3, "M": 200, "N": 150, "K": 136}),
    Case("gemm_index_epilogue", GEMM_INDEX_EPILOGUE,
         lambda s, d: [_randn(s["M"], s["K"], device=d), _randn(s["K"], s["N"], device=d),
                       torch.randn(s["M"], s["N"], device=d), _nan(s["M"], s["N"], dtype=torch.float32, device=d), 0.5],
         _index_epilogue_ref, (3,), [_mk(4096, 4096, 4096), _mk(1000, 3000, 520)], _mk(300, 520, 200)),
    *(Case(name, src, _alibi_inputs, _alibi_ref, (3,),
           [{"B": 2, "H": 8, "N": 2048}, {"B": 1, "H": 3, "N": 1000}], {"B": 1, "H": 2, "N": 200})
      for name, src in (("attn_alibi128", ALIBI_128), ("attn_alibi", ALIBI_192), ("attn_alibi_hoisted", ALIBI_HOISTED))),
]

BY_NAME = {c.name: c for c in CASES}
