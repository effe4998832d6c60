"""Register tiles stored into e4m3 tensors by the general lowering (session 19): a row-wise fp8
quantizer (no product: the contiguous column order, 8 bytes a lane, ``direct.store_direct``) and
an fp8-output GEMM epilogue (the wgmma fragment order, a byte pair a lane, single bytes at the
edges: ``lower_fragments._fragments``), each value ``cvt.rn.satfinite.e4m3x2.f32``: round to
nearest even, beyond ±448 saturated, as the interpreter rounds (interpreter/numerics.py). Before,
both failed at the PTX stage ("e4m3 tensors are not lowered yet"). Checked bit for bit on the
PTX simulator against the interpreter, at ragged shapes, outputs poisoned."""
from __future__ import annotations

import re

import pytest
import torch

import tkjit

QUANT = """
kernel rowquant<D = 512, BR = 16>(X: gl<bf16>[R, D], Q: gl<e4m3>[R, D], S: gl<f32>[R]) {
  for i in blocks(R / BR) {
    x: rt<f32>[BR, D] = X.tile(i, 0)
    s = row_max(abs(x)) / 448.0
    S.tile(i) = s
    Q.tile(i, 0) = div_row(x, s)
  }
}
"""
"""Per-row fp8 quantization as a user writes it: the store converts the f32 tile to e4m3."""

GEMM_FP8_OUT = """
kernel gemm_fp8_out<BM = 128, BN = 256, BK = 64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], R: gl<bf16>[M, N],
                                                 C: gl<e4m3>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<bf16>[BM, BK] = A.tile(m, k)
      b: st<bf16>[BK, BN] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    r: rt<f32>[BM, BN] = R.tile(m, n)
    C.tile(m, n) = (acc + r) * 64.0
  }
}
"""
"""A GEMM whose epilogue stores e4m3 (scaled so that some values pass 448 and saturate); at 256
columns its consumers are cooperative (the PTX simulator cannot run ping-pong consumers on a grid
of one tile: a known limit of tests/ptxsim.py)."""


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8)


SCALED = """
kernel scaled_store<D = 512, BR = 16>(X: gl<bf16>[R, D], Inv: gl<f32>[R], Q: gl<e4m3>[R, D]) {
  for i in blocks(R / BR) {
    x: rt<f32>[BR, D] = X.tile(i, 0)
    inv: cv<f32>[BR] = Inv.tile(i)
    Q.tile(i, 0) = mul_row(x, inv)
  }
}
"""
"""The quantizer's store with its scale given (a product, exactly rounded on both sides): the
store's rounding checked bit for bit."""


def _poisoned_q(r: int, d: int) -> torch.Tensor:
    return torch.full((r, d), float("nan")).to(torch.float8_e4m3fn)


def test_the_contiguous_order_stores_e4m3_bit_for_bit():
    from simkit import simulate
    k = tkjit.compile(SCALED, cache=False, require_hopper=True)
    assert k.metadata["lowering"] == "general"
    ptx = k.asm["ptx"]
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx and re.search(r"st\.global\.v2\.b32", ptx)
    torch.manual_seed(0)
    r = 40  # not a multiple of BR: the last block's rows past R are not written
    x = torch.randn(r, 512).bfloat16()
    inv = torch.rand(r) * 200 + 20  # some rows pass 448: saturated
    want = _poisoned_q(r, 512)
    k(x, inv, want)  # the CPU interpreter
    (got,) = simulate(k._result.tkir, [x, inv, _poisoned_q(r, 512)], [2], ptx_meta=(ptx, dict(k.metadata)))
    assert torch.equal(_bits(got), _bits(want))
    assert (want.float().abs() == 448).any()


def test_a_row_quantizer_as_written_takes_the_general_lowering():
    """Per-row amax scaling (a division, rounded as the GPU's div.rn.f32 on the interpreter but
    approximately by the simulator): the scales agree to rounding, the codes to one step, and
    dequantized they are within e4m3's half step of the input."""
    from simkit import simulate
    k = tkjit.compile(QUANT, cache=False, require_hopper=True)
    assert k.metadata["lowering"] == "general"
    torch.manual_seed(0)
    r = 40
    x = torch.randn(r, 512).bfloat16() * 3
    want_q, want_s = _poisoned_q(r, 512), torch.full((r,), float("nan"))
    k(x, want_q, want_s)
    q, s = simulate(k._result.tkir, [x, _poisoned_q(r, 512), torch.full((r,), float("nan"))], [1, 2],
                    ptx_meta=(k.asm["ptx"], dict(k.metadata)))
    assert torch.allclose(s, want_s, rtol=1e-6, atol=0)
    assert (_bits(q).int() - _bits(want_q).int()).abs().max() <= 1
    assert ((want_q.float() * want_s[:, None] - x.float()).abs() <= 0.0625 * x.float().abs() + 1e-3).all()


@pytest.mark.parametrize("m, n", [(200, 512), (130, 403)])
def test_an_fp8_output_gemm_stores_its_epilogue_bit_for_bit(monkeypatch, m, n):
    """The wgmmas skipped on the simulator (the accumulator stays zero), so C is the epilogue of
    the residual alone; the interpreter runs it with B = 0. An odd N takes the edge path's single
    bytes; values past 448 saturate."""
    import ptxsim
    from simkit import simulate
    monkeypatch.setattr(ptxsim, "SKIP_WGMMA", True)
    k = tkjit.compile(GEMM_FP8_OUT, cache=False, require_hopper=True)
    assert k.metadata["lowering"] == "general"
    ptx = k.asm["ptx"]
    assert re.search(r"st\.global\.b16 \[%rd\d+(\+\d+)?\], %h\d+;", ptx) and re.search(r"@%p\d+ st\.global\.b8", ptx)
    torch.manual_seed(1)
    kk = 64
    a, b = torch.randn(m, kk).bfloat16(), torch.zeros(kk, n).bfloat16()
    res = torch.randn(m, n).bfloat16() * 4
    want = torch.full((m, n), float("nan")).to(torch.float8_e4m3fn)
    k(a, b, res, want)
    (got,) = simulate(k._result.tkir, [a, b, res, torch.full((m, n), float("nan")).to(torch.float8_e4m3fn)], [3],
                      ptx_meta=(ptx, dict(k.metadata)))
    assert torch.equal(_bits(got), _bits(want))
    assert (want.float().abs() == 448).any(), "no value reached the saturation it is meant to test"


def test_an_e5m2_store_is_refused_at_its_line_and_says_why():
    src = GEMM_FP8_OUT.replace("C: gl<e4m3>[M, N]", "C: gl<e5m2>[M, N]")
    k = tkjit.compile(src, cache=False)
    with pytest.raises(tkjit.TkError) as err:
        k.asm["ptx"]
    msg = str(err.value)
    assert "stores into e5m2 tensors are not lowered yet" in msg and "overflow to ±inf" in msg
