"""On a Hopper GPU: register tiles stored into e4m3 tensors (tests/test_fp8_stores.py has the CPU
side): the row quantizer with its scale given matches the interpreter bit for bit, the quantizer
as written within one code of it, and the fp8-output GEMM matches float64 torch within e4m3's
half step (its accumulation order is the GPU's), at tile multiples and ragged shapes, outputs
NaN-poisoned and the bytes after them untouched.

    python -m pytest -q tests/gpu/test_fp8_stores_gpu.py
"""
from __future__ import annotations

import pytest
import torch

import tkjit

from test_fp8_stores import GEMM_FP8_OUT, QUANT, SCALED

pytestmark = pytest.mark.gpu
E4M3 = torch.float8_e4m3fn


def _out(shape):
    """A NaN-poisoned e4m3 output at the start of a buffer whose 4096-byte tail is 0x55."""
    n = 1
    for d in shape:
        n *= d
    buf = torch.full((n + 4096,), 0x55, dtype=torch.uint8, device="cuda")
    buf[:n] = torch.tensor(0x7F, dtype=torch.uint8)  # e4m3fn NaN
    return buf, buf[:n].view(E4M3).view(shape)


def _tail_untouched(buf, n):
    assert bool((buf[n:] == 0x55).all()), "bytes after the output were written"


@pytest.mark.parametrize("r", [16384, 40, 1000])
def test_the_scaled_store_matches_the_interpreter_bit_for_bit(r):
    k = tkjit.compile(SCALED)
    torch.manual_seed(r)
    x = torch.randn(r, 512).bfloat16()
    inv = torch.rand(r) * 200 + 20
    want = torch.full((r, 512), float("nan")).to(E4M3)
    k(x, inv, want)
    buf, q = _out((r, 512))
    k(x.cuda(), inv.cuda(), q)
    torch.cuda.synchronize()
    assert torch.equal(q.cpu().view(torch.uint8), want.view(torch.uint8))
    _tail_untouched(buf, r * 512)


@pytest.mark.parametrize("r", [16384, 40])
def test_the_quantizer_as_written_matches_within_one_code(r):
    k = tkjit.compile(QUANT)
    torch.manual_seed(r)
    x = torch.randn(r, 512).bfloat16() * 3
    want_q, want_s = torch.full((r, 512), float("nan")).to(E4M3), torch.full((r,), float("nan"))
    k(x, want_q, want_s)
    buf, q = _out((r, 512))
    s = torch.full((r,), float("nan"), device="cuda")
    k(x.cuda(), q, s)
    torch.cuda.synchronize()
    assert torch.allclose(s.cpu(), want_s, rtol=1e-6, atol=0)
    assert (q.cpu().view(torch.uint8).int() - want_q.view(torch.uint8).int()).abs().max() <= 1
    _tail_untouched(buf, r * 512)


@pytest.mark.parametrize("m, n, kk", [(4096, 4096, 4096), (1000, 3003, 520), (130, 203, 72)])
def test_an_fp8_output_gemm_matches_float64(m, n, kk):
    k = tkjit.compile(GEMM_FP8_OUT)
    torch.manual_seed(m)
    a, b = (torch.randn(m, kk) / 8).bfloat16().cuda(), (torch.randn(kk, n) / 8).bfloat16().cuda()
    res = (torch.randn(m, n) * 4).bfloat16().cuda()
    buf, c = _out((m, n))
    k(a, b, res, c)
    torch.cuda.synchronize()
    assert k.metadata["lowering"] == "general"
    ref = ((a.double() @ b.double() + res.double()) * 64).clamp(-448, 448)
    got = c.double()
    assert not torch.isnan(got).any(), "an output element was never written"
    assert ((got - ref).abs() <= 0.07 * ref.abs() + 2.0 ** -6).all()  # (half an e4m3 step, and the GPU sum order)
    _tail_untouched(buf, m * n)
