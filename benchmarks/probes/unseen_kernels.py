"""Unseen kernels through the default compile on the GPU (probe): the .tk files of
benchmarks/probes/unseen/, written as a new user would (SwiGLU's two products, a per-row bias with
relu and a residual, two outputs of one accumulator, an f32 output, a batched GEMM with a
per-batch bias and GELU, residual + RMSNorm, a scaled softmax with f32 output, ALiBi causal
attention built from index tiles at BQ = 128 and 192 and with the index tiles hoisted, a GEMM
epilogue of index tiles, RMSNorm fused into a linear layer, a dequantized A, an f32 A and an fp8
A, each reading a ring tile into registers). For each: the
backend it took, the relative error against float64/float32 torch at a tile multiple and at a
ragged shape (outputs NaN-poisoned; NaN left in the output counts), and the time against
``torch.compile`` of the same expression and (GEMMs) cuBLAS's plain product of the same shape,
timed in interleaved rounds (benchmarks/attention_general.interleaved_ms).

    python3 benchmarks/probes/unseen_kernels.py [--json OUT] [--only NAME,...] [--variant NAME=EDIT ...]

A variant (timed beside the kernel as written, same rounds, and checked) is NAME=EDIT with EDIT
constants ``BN=128`` or a pass's options ``pass:pipeline{stages=6}``, several joined by ``;``; a
kernel without that constant skips the variant.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import tkjit

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from attention_general import interleaved_ms  # noqa: E402

BF = dict(dtype=torch.bfloat16, device="cuda")


def rnd(*shape, scale=1.0):
    return (torch.randn(*shape, **BF) * scale).to(torch.bfloat16)


def out(*shape, dtype=torch.bfloat16):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


def gemm_case(m, n, k):
    """A GEMM-shaped probe's inputs (K-scaled so the products stay O(1))."""
    return rnd(m, k, scale=k ** -0.25), rnd(k, n, scale=k ** -0.25)


def swiglu(shape):
    m, n, k = shape
    a, w1 = gemm_case(m, n, k)
    w3 = rnd(k, n, scale=k ** -0.25)
    args = [a, w1, w3, out(m, n)]
    expr = lambda a, w1, w3: F.silu(a @ w1) * (a @ w3)  # noqa: E731
    return args, (a, w1, w3), expr, 3, [2 * m * n * k] * 2


def rowbias_res(shape):
    m, n, k = shape
    a, b = gemm_case(m, n, k)
    bias, r = rnd(m), rnd(m, n)
    args = [a, b, bias, r, out(m, n)]
    expr = lambda a, b, bias, r: torch.relu(a @ b + bias[:, None]) + r  # noqa: E731
    return args, (a, b, bias, r), expr, 4, [2 * m * n * k]


def two_out(shape):
    m, n, k = shape
    a, b = gemm_case(m, n, k)
    bias = rnd(n)
    args = [a, b, bias, out(m, n), out(m, n)]

    def expr(a, b, bias):
        pre = a @ b + bias
        return pre, F.gelu(pre, approximate="tanh")
    return args, (a, b, bias), expr, (3, 4), [2 * m * n * k]


def abt_f32(shape):
    m, n, k = shape
    a = rnd(m, k, scale=k ** -0.25)
    b = rnd(n, k, scale=k ** -0.25)
    args = [a, b, out(m, n, dtype=torch.float32)]
    expr = lambda a, b: (a @ b.t()).float()  # noqa: E731
    return args, (a, b), expr, 2, [2 * m * n * k]


def bmm_bias_gelu(shape):
    bt, m, n, k = shape
    a = rnd(bt, m, k, scale=k ** -0.25)
    b = rnd(bt, k, n, scale=k ** -0.25)
    bias = rnd(bt, n)
    args = [a, b, bias, out(bt, m, n)]
    expr = lambda a, b, bias: F.gelu(torch.bmm(a, b) + bias[:, None, :])  # noqa: E731
    return args, (a, b, bias), expr, 3, [2 * bt * m * n * k]


def rms_res(shape):
    r, d = shape
    x, res, w = rnd(r, d), rnd(r, d), rnd(d)
    args = [x, res, w, out(r, d), out(r, d), 1e-5]

    def expr(x, res, w):
        h = x.float() + res.float()
        return h.to(torch.bfloat16), (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5) * w.float())
    return args, (x, res, w), expr, (3, 4), None


def bgemm_offset(shape):
    bt, m, n, k = shape
    a = rnd(bt, m, k, scale=k ** -0.25)
    b = rnd(bt, n, k, scale=k ** -0.25)
    sc = rnd(bt, m)
    k0 = 1  # the K loop starts at the second tile of 64
    args = [a, b, sc, out(bt, m, n), k0]
    expr = lambda a, b, sc: torch.tanh(torch.bmm(a[:, :, 64:], b[:, :, 64:].transpose(1, 2)) * sc[:, :, None])  # noqa: E731
    return args, (a, b, sc), expr, 3, [2 * bt * m * n * (k - 64)]


def scale_gate(shape):
    m, n, k = shape
    a, b = gemm_case(m, n, k)
    s = torch.rand(n, device="cuda") + 0.5
    g = rnd(m, n)
    args = [a, b, s, g, out(m, n)]
    expr = lambda a, b, s, g: (a @ b) * s * torch.sigmoid(g)  # noqa: E731
    return args, (a, b, s, g), expr, 4, [2 * m * n * k]


def linear_silu(shape):
    m, n, k = shape
    x = rnd(m, k, scale=k ** -0.25)
    w = rnd(n, k, scale=k ** -0.25)
    bias = rnd(n)
    args = [x, w, bias, out(m, n)]
    expr = lambda x, w, bias: F.silu(x @ w.t() + bias)  # noqa: E731
    return args, (x, w, bias), expr, 3, [2 * m * n * k]


def attn_keybias(shape):
    b, h, n, d = shape
    q, k, v = rnd(b, h, n, d), rnd(b, h, n, d), rnd(b, h, n, d)
    kb = torch.randn(b, n, device="cuda") * 0.5
    kb[torch.rand(b, n, device="cuda") < 0.1] = float("-inf")  # padded keys
    scale = d ** -0.5
    args = [q, k, v, kb, out(b, h, n, d), scale]

    def expr(q, k, v, kb):
        mask = kb[:, None, None, :].to(q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return args, (q, k, v, kb), expr, 4, None


def dual(shape):
    m, n, k = shape
    a, b = gemm_case(m, n, k)
    d, e = gemm_case(m, n, k)
    args = [a, b, d, e, out(m, n)]
    expr = lambda a, b, d, e: a @ b + d @ e  # noqa: E731
    return args, (a, b, d, e), expr, 4, None  # (two products: against torch.compile's two cuBLAS calls)


def rowmax(shape):
    m, n, k = shape
    a, b = gemm_case(m, n, k)
    nb = -(-n // 128)
    args = [a, b, out(m, n), out(nb, m, dtype=torch.float32)]

    def expr(a, b):
        c = a @ b
        # the kernel as written takes the max over its whole tile: columns past N hold 0 (zero-filled B)
        pad = torch.zeros((m, nb * 128 - n), dtype=c.dtype, device=c.device)
        return c, torch.cat([c, pad], 1).view(m, nb, 128).amax(-1).t().float()
    return args, (a, b), expr, (2, 3), [2 * m * n * k]


def atb_bias(shape):
    m, n, k = shape
    a = rnd(k, m, scale=k ** -0.25)
    b = rnd(k, n, scale=k ** -0.25)
    bias = rnd(n)
    args = [a, b, bias, out(m, n)]
    expr = lambda a, b, bias: torch.relu(a.t() @ b + bias)  # noqa: E731
    return args, (a, b, bias), expr, 3, [2 * m * n * k]


def attn_gqa64(shape):
    b, h, n, d = shape
    g = h // 4
    q, k, v = rnd(b, h, n, d), rnd(b, g, n, d), rnd(b, g, n, d)
    scale = d ** -0.5
    args = [q, k, v, out(b, h, n, d), scale]

    def expr(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)
    return args, (q, k, v), expr, 3, None


def fp8_bias_relu(shape):
    m, n, k = shape
    a = (torch.randn(m, k, device="cuda") * 0.5).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda") * 0.5).to(torch.float8_e4m3fn)
    bias = rnd(n)
    s = 0.05
    args = [a, b, bias, out(m, n), s]
    one = torch.ones((), device="cuda")

    def expr(a, b, bias):
        if a.dtype == torch.float64:
            return torch.relu((a @ b.t()) * s + bias)
        return torch.relu(torch._scaled_mm(a, b.t(), one * s, one, out_dtype=torch.bfloat16) + bias)
    return args, (a, b, bias), expr, 3, None


def retention(shape):
    b, h, n, d = shape
    q, k, v = rnd(b, h, n, d, scale=d ** -0.25), rnd(b, h, n, d, scale=d ** -0.25), rnd(b, h, n, d)
    lg, c = -0.05, 64
    args = [q, k, v, out(b, h, n, d), lg]

    def expr(q, k, v):
        i = torch.arange(c, device=q.device, dtype=q.dtype)
        decay = torch.where(i[None, :] > i[:, None], 0.0, torch.exp2((i[:, None] - i[None, :]) * lg))
        state = torch.zeros(b, h, d, d, device=q.device, dtype=q.dtype)
        outs = []
        for s in range(0, n, c):
            qc, kc, vc = q[:, :, s:s + c], k[:, :, s:s + c], v[:, :, s:s + c]
            a = (qc @ kc.transpose(-1, -2)) * decay[:qc.shape[2], :kc.shape[2]]
            outs.append(qc @ state + a @ vc)
            state = state * 2.0 ** (lg * c) + kc.transpose(-1, -2) @ vc
        return torch.cat(outs, 2)
    return args, (q, k, v), expr, 3, None


def logits_softcap(shape):
    m, n, k = shape
    x = rnd(m, k, scale=k ** -0.25)
    w = rnd(n, k, scale=k ** -0.25)
    cap = 2.0
    args = [x, w, out(m, n, dtype=torch.float32), cap]
    expr = lambda x, w: (torch.tanh((x @ w.t()).float() / cap) * cap)  # noqa: E731
    return args, (x, w), expr, 2, [2 * m * n * k]


def alpha_beta(shape):
    m, n, k = shape
    a, b = gemm_case(m, n, k)
    c = rnd(m, n)
    args = [a, b, c, 0.8, -0.5]
    expr = lambda a, b, c: 0.8 * (a @ b) - 0.5 * c  # noqa: E731
    return args, (a, b, c), expr, 2, [2 * m * n * k]


def fp8(shape):
    m, n, k = shape
    a = (torch.randn(m, k, device="cuda") * 0.5).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda") * 0.5).to(torch.float8_e4m3fn)
    sa, sb = 0.7, 1.3
    args = [a, b, out(m, n), sa, sb]
    one = torch.ones((), device="cuda")

    def expr(a, b):
        if a.dtype == torch.float64:
            return (a @ b.t()) * (sa * sb)
        return torch._scaled_mm(a, b.t(), one * sa, one * sb, out_dtype=torch.bfloat16)
    return args, (a, b), expr, 2, None


ALIBI_SLOPE = 0.0625


def alibi_bias(n: int, dtype=torch.float32):
    """[n, n]: slope * (key - query), -inf above the diagonal (the kernels' select)."""
    r = torch.arange(n, device="cuda", dtype=torch.float64)
    dist = r[None, :] - r[:, None]
    return (dist * ALIBI_SLOPE).masked_fill(dist > 0, float("-inf")).to(dtype)


def alibi(shape):
    """ALiBi causal attention (benchmarks/probes/unseen/alibi*.tk) against SDPA with the bias as an
    explicit additive mask (built once, outside the timing); FlexAttention with the bias as a
    score_mod and the causal block mask is timed beside it (``extra_refs``)."""
    b, h, n, d = shape
    q, k, v = rnd(b, h, n, d), rnd(b, h, n, d), rnd(b, h, n, d)
    scale = d ** -0.5
    args = [q, k, v, out(b, h, n, d), scale, ALIBI_SLOPE]
    masks = {}

    def expr(q, k, v):
        if q.dtype not in masks:
            masks[q.dtype] = alibi_bias(n, q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=masks[q.dtype], scale=scale)
    return args, (q, k, v), expr, 3, None


def index_epilogue(shape):
    """A GEMM epilogue of index tiles and a second f32 tile (benchmarks/probes/unseen/gemm_index_epilogue.tk)."""
    m, n, k = shape
    a, b = gemm_case(m, n, k)
    x = torch.randn(m, n, device="cuda")
    args = [a, b, x, out(m, n, dtype=torch.float32), 0.5]

    def expr(a, b, x):
        d = (torch.arange(n, device=x.device, dtype=x.dtype)[None, :]
             - torch.arange(m, device=x.device, dtype=x.dtype)[:, None])
        acc = (a @ b).to(x.dtype)
        return torch.where(d > 0, torch.exp(x * 0.5 - d * 0.01), torch.relu(acc) + d * 0.001)
    return args, (a, b, x), expr, 3, [2 * m * n * k]


def before_ref(shape, file):
    """The kernel as it ran before fuse-elementwise: the register-tile backend
    (``pipeline="canonicalize,stream-cols"``, the passes the fallback kept)."""
    before = tkjit.load(HERE / "unseen" / file, pipeline="canonicalize,stream-cols", cache=False)
    return {"before": lambda args, ins: before(*args)}


def alibi_score_mod(score, bi, hi, q_idx, kv_idx):
    """FlexAttention's ALiBi: the bias added to each score (the causal part is the block mask's)."""
    return score + (kv_idx - q_idx).to(score.dtype) * ALIBI_SLOPE


_FLEX: dict = {}
"""The compiled flex_attention and each length's causal block mask, made once for every probe."""


def alibi_refs(shape, file):
    """What else an ALiBi probe is timed against: FlexAttention (score_mod = the bias, block mask =
    causal; compiled once), and the kernel as it ran before fuse-elementwise (``before_ref``)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    b, h, n, d = shape
    scale = d ** -0.5
    if "flex" not in _FLEX:
        _FLEX["flex"] = torch.compile(flex_attention)
    if n not in _FLEX:
        _FLEX[n] = create_block_mask(lambda bi, hi, q_idx, kv_idx: kv_idx <= q_idx, None, None, n, n, device="cuda")
    flex, block = _FLEX["flex"], _FLEX[n]
    return {"flex": lambda args, ins: flex(ins[0], ins[1], ins[2], score_mod=alibi_score_mod, block_mask=block,
                                           scale=scale),
            **before_ref(shape, file)}


def softmax_scaled(shape):
    r, c = shape
    x = rnd(r, c)
    args = [x, out(r, c, dtype=torch.float32), 0.7]
    expr = lambda x: torch.softmax(x.float() * 0.7, -1)  # noqa: E731
    return args, (x,), expr, 1, None


def rms_linear(shape):
    m, n, k = shape
    x = rnd(m, k)
    w = rnd(k, n, scale=k ** -0.5)
    args = [x, w, out(m, n), 1e-5]

    def expr(x, w):
        xf = x if x.dtype == torch.float64 else x.float()
        return (x @ w) * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype)
    return args, (x, w), expr, 2, [2 * m * n * k]


def dequant_a(shape):
    m, n, k = shape
    a, b = gemm_case(m, n, k)
    s = torch.rand(k, device="cuda") + 0.5
    args = [a, b, s, out(m, n)]

    def expr(a, b, s):
        if a.dtype == torch.float64:
            return (a * s) @ b
        return (a.float() * s).to(torch.bfloat16) @ b
    return args, (a, b, s), expr, 3, [2 * m * n * k]


def f32a(shape):
    m, n, k = shape
    a = torch.randn(m, k, device="cuda") * k ** -0.25
    b = rnd(k, n, scale=k ** -0.25)
    args = [a, b, out(m, n)]

    def expr(a, b):
        if a.dtype == torch.float64:
            return a @ b
        return a.to(torch.bfloat16) @ b
    return args, (a, b), expr, 2, [2 * m * n * k]


def bmm_f32a_silu(shape):
    z, m, n, k = shape
    a = torch.randn(z, m, k, device="cuda") * k ** -0.25
    b = rnd(z, k, n, scale=k ** -0.25)
    bias = torch.randn(n, device="cuda")
    args = [a, b, bias, out(z, m, n)]

    def expr(a, b, bias):
        if a.dtype == torch.float64:
            return F.silu(a @ b + bias)
        return F.silu(torch.bmm(a.to(torch.bfloat16), b) + bias)
    return args, (a, b, bias), expr, 3, [2 * z * m * n * k]


def fp8a(shape):
    m, n, k = shape
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = rnd(k, n, scale=k ** -0.5)
    s = torch.rand(k, device="cuda") + 0.5
    args = [a, b, s, out(m, n)]

    def expr(a, b, s):
        if a.dtype == torch.float64:
            return (a * s) @ b
        return (a.float() * s).to(torch.bfloat16) @ b
    return args, (a, b, s), expr, 3, [2 * m * n * k]


PROBES = {
    # name: (file, case builder, timed shape, ragged shape, constants)
    "swiglu": ("swiglu.tk", swiglu, (4096, 4096, 4096), (1000, 3000, 520)),
    "gemm_rowbias_relu_res": ("gemm_rowbias_relu_res.tk", rowbias_res, (4096, 4096, 4096), (1000, 3000, 520)),
    "gemm_bias_gelu_two_out": ("gemm_bias_gelu_two_out.tk", two_out, (4096, 4096, 4096), (1000, 3000, 520)),
    "gemm_abt_f32": ("gemm_abt_f32.tk", abt_f32, (4096, 4096, 4096), (1000, 3000, 520)),
    "bmm_bias_gelu": ("bmm_bias_gelu.tk", bmm_bias_gelu, (8, 2048, 2048, 2048), (3, 1000, 600, 520)),
    "rmsnorm_residual": ("rmsnorm_residual.tk", rms_res, (32768, 2048), (1000, 2048)),
    "softmax_scaled_f32": ("softmax_scaled_f32.tk", softmax_scaled, (16384, 4096), (1000, 4096)),
    "bgemm_offset_tanh": ("bgemm_offset_tanh.tk", bgemm_offset, (8, 2048, 2048, 2048), (3, 1000, 600, 520)),
    "gemm_scale_gate": ("gemm_scale_gate.tk", scale_gate, (4096, 4096, 4096), (1000, 3000, 520)),
    "linear_bias_silu": ("linear_bias_silu.tk", linear_silu, (4096, 4096, 4096), (1000, 3000, 520)),
    "attn_keybias": ("attn_keybias.tk", attn_keybias, (4, 16, 4096, 128), (3, 5, 640, 128)),
    "dual_gemm": ("dual_gemm.tk", dual, (4096, 4096, 4096), (1000, 3000, 520)),
    "gemm_rowmax": ("gemm_rowmax.tk", rowmax, (4096, 4096, 4096), (1000, 3000, 520)),
    "atb_bias": ("atb_bias.tk", atb_bias, (4096, 4096, 4096), (1000, 3000, 520)),
    "attn_gqa64": ("attn_gqa64.tk", attn_gqa64, (4, 32, 4096, 64), (3, 8, 1000, 64)),
    "fp8_bias_relu": ("fp8_bias_relu.tk", fp8_bias_relu, (8192, 8192, 8192), (1000, 3000, 1024)),
    "retention": ("retention.tk", retention, (8, 16, 4096, 64), (3, 5, 1000, 64)),
    "logits_softcap": ("logits_softcap.tk", logits_softcap, (4096, 4096, 4096), (1000, 3000, 520)),
    "gemm_alpha_beta": ("../../../examples/gemm_alpha_beta.tk", alpha_beta, (4096, 4096, 4096), (1000, 3000, 520)),
    "gemm_fp8": ("../../../examples/gemm_fp8.tk", fp8, (8192, 8192, 8192), (1000, 3000, 1024)),
    "alibi128": ("alibi128.tk", alibi, (4, 16, 4096, 64), (3, 5, 1000, 64)),
    "alibi192": ("alibi192.tk", alibi, (4, 16, 4096, 64), (3, 5, 1000, 64)),
    "alibi_hoisted": ("alibi_hoisted.tk", alibi, (4, 16, 4096, 64), (3, 5, 1000, 64)),
    "gemm_index_epilogue": ("gemm_index_epilogue.tk", index_epilogue, (4096, 4096, 4096), (1000, 3000, 520)),
    # a ring tile read into registers (session 18): rms_linear as written, and loading X twice
    "rms_linear": ("rms_linear.tk", rms_linear, (4096, 4096, 4096), (1000, 3000, 520)),
    "rms_linear_twice": ("rms_linear_twice.tk", rms_linear, (4096, 4096, 4096), (1000, 3000, 520)),
    "rms_linear_rs": ("rms_linear_rs.tk", rms_linear, (4096, 4096, 4096), (1000, 3000, 520)),
    "gemm_dequant_a": ("gemm_dequant_a.tk", dequant_a, (4096, 4096, 4096), (1000, 3000, 520)),
    "gemm_f32a": ("gemm_f32a.tk", f32a, (4096, 4096, 4096), (1000, 3000, 520)),
    "bmm_f32a_silu": ("bmm_f32a_silu.tk", bmm_f32a_silu, (8, 2048, 2048, 2048), (3, 1000, 600, 520)),
    "gemm_fp8a": ("gemm_fp8a.tk", fp8a, (4096, 4096, 4096), (1000, 3000, 528)),
}
EXTRA_REFS = {"alibi128": alibi_refs, "alibi192": alibi_refs, "alibi_hoisted": alibi_refs,
              "gemm_index_epilogue": before_ref}
"""Probe -> (timed shape, file) -> {name: fn(args, ins)}: more references timed in the same rounds
(each reported as ``<name>_ms`` and ``<name>_vs_tkjit``, its time over tkjit's)."""


def outputs_of(args, where):
    return [args[i] for i in (where if isinstance(where, tuple) else (where,))]


def check(kern, build, shape) -> float:
    """The worst relative error of the kernel's outputs against the expression in float64."""
    args, ins, expr, where, _ = build(shape)
    want = expr(*[t.double() for t in ins])  # first: an output may be an input (C of alpha-beta)
    want = want if isinstance(want, tuple) else (want,)
    kern(*args)
    torch.cuda.synchronize()
    worst = 0.0
    for got, w in zip(outputs_of(args, where), want):
        if got.isnan().any():
            return float("nan")
        worst = max(worst, ((got.double() - w.double()).norm() / w.double().norm()).item())
    return worst


def variant_of(file: str, edit: str):
    """The probe compiled with ``edit`` (constants K=V, pass options pass:NAME{...}), or None."""
    from tkjit.passes import default_pipeline
    text = (HERE / "unseen" / file).read_text()
    consts, pipeline = {}, default_pipeline("sm_90a")
    for part in edit.split(";"):
        if part.startswith("pass:"):
            pipeline = pipeline.replace(part[5:part.index("{")], part[5:], 1)
        else:
            key, value = part.split("=")
            if f" {key} = " not in text[:text.find(">(")]:
                return None
            consts[key] = int(value)
    return tkjit.compile(text, filename=file, constants=consts or None, pipeline=pipeline, cache=False)


def run(name: str, variants: dict) -> dict:
    file, build, shape, ragged = PROBES[name]
    kern = tkjit.load(HERE / "unseen" / file)
    row = {"kernel": name, "backend": f"{kern.metadata.get('backend')}/{kern.metadata.get('lowering')}",
           "shape": list(shape), "err": check(kern, build, shape), "ragged": list(ragged),
           "err_ragged": check(kern, build, ragged)}
    sets, flops = [], None
    for _ in range(2):
        args, ins, expr, where, flops = build(shape)
        sets.append((args, ins))
    compiled = torch.compile(expr)
    fns = {"tkjit": lambda args, ins: kern(*args), "compile": lambda args, ins: compiled(*ins)}
    if flops:  # cuBLAS's plain product of the same shape (the first two inputs)
        bt = name in ("gemm_abt_f32", "bgemm_offset_tanh", "linear_bias_silu", "logits_softcap")  # B given as [N, K]
        plains = {id(ins): [x if x.dtype == torch.bfloat16 else x.to(torch.bfloat16) for x in ins[:2]]
                  for _, ins in sets}  # (an f32 or fp8 A: cuBLAS's bf16 product of the same shape)
        fns["cublas"] = (lambda args, ins: torch.bmm(plains[id(ins)][0], plains[id(ins)][1].transpose(1, 2)
                                                     if bt else plains[id(ins)][1])) \
            if len(shape) == 4 else (lambda args, ins: plains[id(ins)][0] @ (plains[id(ins)][1].t() if bt
                                                                              else plains[id(ins)][1]))
    extra = EXTRA_REFS[name](shape, file) if name in EXTRA_REFS else {}
    for ref, fn in extra.items():  # each extra reference checked against the expression (bf16 inputs)
        args, ins = sets[0]
        got = fn(args, ins)
        got = outputs_of(args, where)[0] if got is None else got
        want = expr(*ins)
        want = (want[0] if isinstance(want, tuple) else want).double()
        row[f"err_{ref}"] = ((got.double() - want).norm() / want.norm()).item()
    fns.update(extra)
    if name == "gemm_abt_f32":  # cuBLAS with the same f32 output, where torch has out_dtype
        try:
            torch.mm(sets[0][1][0], sets[0][1][1].t(), out_dtype=torch.float32)
            fns["cublas_f32out"] = lambda args, ins: torch.mm(ins[0], ins[1].t(), out_dtype=torch.float32)
        except (TypeError, RuntimeError):
            pass
    for vname, edit in variants.items():
        try:
            vk = variant_of(file, edit)
        except Exception as e:  # noqa: BLE001 - a variant the kernel cannot take is recorded
            row[f"err_{vname}"], vk = f"{type(e).__name__}: {str(e)[:200]}", None
        if vk is not None:
            row[f"err_{vname}"] = check(vk, build, shape)
            fns[vname] = (lambda vk: lambda args, ins: vk(*args))(vk)
    med = interleaved_ms(fns, [tuple(s) for s in sets])
    row.update({f"{k}_ms": round(v, 5) for k, v in med.items()})
    row["compile_vs_tkjit"] = round(med["compile"] / med["tkjit"], 4)
    for ref in extra:
        row[f"{ref}_vs_tkjit"] = round(med[ref] / med["tkjit"], 4)  # above 1: tkjit is faster
    for vname in variants:
        if vname in med:
            row[f"{vname}_vs_tkjit"] = round(med["tkjit"] / med[vname], 4)  # above 1: the variant is faster
    if "cublas" in med:
        row["cublas_plain_vs_tkjit"] = round(med["cublas"] / med["tkjit"], 4)
        row["tflops"] = round(sum(flops) / med["tkjit"] / 1e9, 1)
    if "cublas_f32out" in med:
        row["cublas_f32out_vs_tkjit"] = round(med["cublas_f32out"] / med["tkjit"], 4)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--only", default="")
    ap.add_argument("--variant", action="append", default=[])
    args = ap.parse_args()
    names = [n for n in PROBES if not args.only or n in args.only.split(",")]
    rows = []
    for name in names:
        try:
            row = run(name, dict(v.split("=", 1) for v in args.variant))
        except Exception as e:  # noqa: BLE001 - the probe records what happened
            row = {"kernel": name, "error": f"{type(e).__name__}: {str(e)[:500]}"}
        rows.append(row)
        print(json.dumps(row), flush=True)
    info = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    print(info)
    if args.json:
        Path(args.json).write_text(json.dumps({"info": info, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
