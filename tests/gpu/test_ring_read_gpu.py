"""On a Hopper GPU: kernels that read a ring tile into registers (the trip's ``Read`` step,
codegen/hopper/lower_tile_read.py) take the general lowering and match float64 torch at tile
multiples, ragged shapes and a one-trip K; outputs NaN-poisoned, the bytes after each output
untouched. tests/gpu/test_unseen_corpus_gpu.py runs rms_linear_read, gemm_dequant_a and ssd_copy
against float32 torch too.

    python -m pytest -q tests/gpu/test_ring_read_gpu.py
"""
from __future__ import annotations

import pytest
import torch

import tkjit

from test_ring_read import ATTN_KSQ, ATTN_KSQ_AFTER, RMS_SS, RMS_SS_F32
from unseen_corpus import BY_NAME

pytestmark = pytest.mark.gpu

SENTINEL = 12345.0
SHAPES = [(4096, 4096, 4096), (1000, 3000, 520), (256, 384, 64), (130, 200, 72)]


def _poisoned(shape, dtype):
    """A NaN output at the start of a buffer whose tail holds SENTINEL."""
    n = 1
    for d in shape:
        n *= d
    buf = torch.full((n + 4096,), SENTINEL, dtype=dtype, device="cuda")
    buf[:n] = float("nan")
    return buf[:n].view(shape), buf[n:]


def _err(got, want) -> float:
    assert not got.isnan().any(), "unwritten outputs"
    return ((got.double() - want).norm() / want.norm()).item()


@pytest.mark.parametrize("src", [RMS_SS, RMS_SS_F32], ids=["bf16", "f32"])
@pytest.mark.parametrize("m,n,k", SHAPES, ids=lambda s: str(s))
def test_rms_linear_with_its_sums_matches_float64(src, m, n, k):
    """rms_linear as a user writes it, with the rows' sum of squares also stored (S): S comes from
    the register reads of the ring's stages alone, Y from them and the wgmmas (f32: X read with
    ld.shared.v2.f32, the product's A made from it in registers)."""
    kern = tkjit.compile(src, require_hopper=True)
    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda")
    x = x if src is RMS_SS_F32 else x.bfloat16()
    w = (torch.randn(k, n, device="cuda") * k ** -0.5).bfloat16()
    y, y_tail = _poisoned((m, n), torch.bfloat16)
    s, s_tail = _poisoned((m,), torch.float32)
    kern(x, w, y, s, 1e-5)
    torch.cuda.synchronize()
    assert kern.metadata["backend"] == "wgmma" and kern.metadata["lowering"] == "general"
    xd = x.double()
    ss = (xd ** 2).sum(1)
    assert _err(s, ss) < 1e-5
    xa = x.bfloat16().double()  # (f32 X: the product reads it rounded to bf16)
    want = (xa @ w.double()) * torch.rsqrt(ss / k + 1e-5)[:, None]
    assert _err(y, want) < 1e-2
    assert bool((y_tail == SENTINEL).all()) and bool((s_tail == SENTINEL).all()), "wrote past an output"


@pytest.mark.parametrize("m,n,k", SHAPES, ids=lambda s: str(s))
def test_rms_linear_read_matches_float64(m, n, k):
    kern = tkjit.compile(BY_NAME["rms_linear_read"].source, require_hopper=True)
    torch.manual_seed(1)
    x = torch.randn(m, k, device="cuda").bfloat16()
    w = (torch.randn(k, n, device="cuda") * k ** -0.5).bfloat16()
    y, tail = _poisoned((m, n), torch.bfloat16)
    kern(x, w, y, 1e-5)
    torch.cuda.synchronize()
    xd = x.double()
    want = (xd @ w.double()) * torch.rsqrt((xd ** 2).mean(1, keepdim=True) + 1e-5)
    assert _err(y, want) < 1e-2
    assert bool((tail == SENTINEL).all()), "wrote past the output"


@pytest.mark.parametrize("m,n,k", SHAPES, ids=lambda s: str(s))
def test_dequantized_a_matches_float64(m, n, k):
    kern = tkjit.compile(BY_NAME["gemm_dequant_a"].source, require_hopper=True)
    torch.manual_seed(2)
    a = (torch.randn(m, k, device="cuda") * k ** -0.25).bfloat16()
    b = (torch.randn(k, n, device="cuda") * k ** -0.25).bfloat16()
    s = torch.rand(k, device="cuda") + 0.5
    c, tail = _poisoned((m, n), torch.bfloat16)
    kern(a, b, s, c)
    torch.cuda.synchronize()
    assert kern.metadata["lowering"] == "general"
    want = (a.float() * s).bfloat16().double() @ b.double()  # the kernel rounds the scaled A to bf16
    assert _err(c, want) < 1e-2
    assert bool((tail == SENTINEL).all()), "wrote past the output"


@pytest.mark.parametrize("src", [ATTN_KSQ, ATTN_KSQ_AFTER], ids=["before", "after"])
@pytest.mark.parametrize("b,h,n", [(2, 4, 2048), (1, 3, 1024), (1, 3, 1000)], ids=lambda s: str(s))
def test_attention_reading_its_key_tile_matches_float64(src, b, h, n):
    """Level 2 with the key tile read before the first product or in the register work."""
    kern = tkjit.compile(src, require_hopper=True)
    assert "mma_hold" in kern.asm["after:async-schedule"]
    torch.manual_seed(3)
    q, k, v = (torch.randn(b, h, n, 64, device="cuda").bfloat16() for _ in range(3))
    o, o_tail = _poisoned((b, h, n, 64), torch.bfloat16)
    ks, ks_tail = _poisoned((b, h, n), torch.float32)
    kern(q, k, v, o, ks, 0.125)
    torch.cuda.synchronize()
    qd, kd, vd = q.double(), k.double(), v.double()
    want = torch.softmax(qd @ kd.transpose(-1, -2) * 0.125, -1) @ vd
    assert _err(o, want) < 1e-2
    if n % 128 == 0:  # (ragged: a row past N of the last key block is padding the language leaves undefined)
        blocks = n // 128
        want_ks = (kd ** 2).sum(-1).view(b, h, blocks, 128).sum(2).repeat(1, 1, blocks)
        assert _err(ks, want_ks) < 1e-5
    assert bool((o_tail == SENTINEL).all()) and bool((ks_tail == SENTINEL).all()), "wrote past an output"
