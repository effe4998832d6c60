"""The activation maps gelu (erf form), gelu_tanh, silu and sigmoid: on tiles, vectors, scalars and
constants, on the interpreter and on the register-tile PTX (simulated, and assembled by ptxas),
against float64 torch over the whole interesting range, tails included.

Error bound (a user relies on it): f32 results within 2e-5 relative of float64 torch
(``torch.nn.functional.gelu``, ``gelu(approximate="tanh")``, ``silu``, ``torch.sigmoid``) wherever
the result is a normal f32, plus 1e-30 absolute near underflow. The simulator computes the
``ex2.approx``/``rcp.approx`` the PTX uses exactly; on the GPU they add at most 2^-22 and 1 ulp
relative, far below the bound's 1e-3 target.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from simkit import assemble, lower, simulate
from support import needs_cuda_tools

SRC = """
kernel acts(X: gl<f32>[N, 64], G: gl<f32>[N, 64], GT: gl<f32>[N, 64], S: gl<f32>[N, 64],
            SG: gl<f32>[N, 64], V: gl<bf16>[N, 64], c: f32, Out: gl<f32>[16, 64]) {
  for i in blocks(N / 16) {
    x: rt<f32>[16, 64] = X.tile(i, 0)
    G.tile(i, 0) = gelu(x)
    GT.tile(i, 0) = gelu_tanh(x)
    S.tile(i, 0) = silu(x)
    SG.tile(i, 0) = sigmoid(x)
    xb: rt<bf16>[16, 64] = X.tile(i, 0)
    V.tile(i, 0) = silu(xb)
    if i == 0 {
      s: rt<f32>[16, 64] = zeros()
      Out.tile(0, 0) = s + gelu(c) + sigmoid(1.0) + gelu_tanh(c) * silu(c)
    }
  }
}
"""

def _gelu(x):
    """x·Φ(x) in float64 without cancellation (torch's own gelu forms 1 + erf and 1 + tanh, which
    lose the negative tail even in float64: F.gelu(-8.37) is 0, not -2.3e-16)."""
    return x * 0.5 * torch.special.erfc(-x / math.sqrt(2))


def _gelu_tanh(x):
    return x * torch.sigmoid(2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))


REFS = {"G": _gelu, "GT": _gelu_tanh, "S": F.silu, "SG": torch.sigmoid}


def _inputs(n: int = 48):
    x = torch.linspace(-14.0, 14.0, n * 64, dtype=torch.float32)
    x[:8] = torch.tensor([0.0, -0.0, 1e-30, -1e-30, 3e-3, -3e-3, 30.0, -30.0])
    x = x.reshape(n, 64)
    nan = lambda *s, dt=torch.float32: torch.full(s, float("nan"), dtype=dt)  # noqa: E731
    return [x, nan(n, 64), nan(n, 64), nan(n, 64), nan(n, 64), nan(n, 64, dt=torch.bfloat16), 0.75,
            nan(16, 64)]


def _check(got: dict, x: torch.Tensor, c: float) -> None:
    xd = x.double()
    for name, fn in REFS.items():
        ref = fn(xd)
        torch.testing.assert_close(got[name].double(), ref, rtol=2e-5, atol=1e-30, msg=name)
    core = xd.abs() < 3  # where torch's own forms are accurate, they agree
    torch.testing.assert_close(REFS["G"](xd)[core], F.gelu(xd)[core], rtol=1e-12, atol=0)
    torch.testing.assert_close(REFS["GT"](xd)[core], F.gelu(xd, approximate="tanh")[core], rtol=1e-12, atol=0)
    torch.testing.assert_close(got["V"].double(), F.silu(x.bfloat16().double()), rtol=1e-2, atol=1e-6)
    cd = torch.tensor(c, dtype=torch.float64)
    want = F.gelu(cd) + torch.sigmoid(torch.tensor(1.0, dtype=torch.float64)) \
        + F.gelu(cd, approximate="tanh") * F.silu(cd)
    torch.testing.assert_close(got["Out"].double(), want.expand(16, 64), rtol=2e-5, atol=0)


def test_activations_on_the_interpreter():
    from tkjit.interpreter import run
    args = _inputs()
    run(lower(SRC), args)
    _check(dict(zip(["G", "GT", "S", "SG", "V", "Out"], [args[i] for i in (1, 2, 3, 4, 5, 7)])), args[0], args[6])


def test_activations_on_the_simulated_ptx():
    args = _inputs(n=20)  # not a multiple of the 16-row tile
    outs = simulate(lower(SRC), args, [1, 2, 3, 4, 5, 7])
    _check(dict(zip(["G", "GT", "S", "SG", "V", "Out"], outs)), args[0], args[6])


def test_gelu_with_its_reciprocal_on_the_fma_pipe_on_the_simulated_ptx():
    """The epilogue pass's option rcp=fma (``epilogue_rcp = "fma"``): gelu's reciprocal runs
    on the FMA pipe (no rcp.approx left in the PTX) within the same bound, tails, +-30, zeros and
    tiny values included."""
    from tkjit.codegen import emit_ptx
    kernel = lower(SRC)
    kernel.attrs["epilogue_rcp"] = "fma"
    ptx, _ = emit_ptx(kernel)
    assert "rcp.approx" not in ptx and "ex2.approx" in ptx
    assert "rcp.approx" in emit_ptx(lower(SRC))[0]
    args = _inputs(n=20)
    outs = simulate(kernel, args, [1, 2, 3, 4, 5, 7])
    _check(dict(zip(["G", "GT", "S", "SG", "V", "Out"], outs)), args[0], args[6])


GELU_ONLY = """
kernel g(X: gl<f32>[N, 64], G: gl<f32>[N, 64]) {
  for i in blocks(N / 16) {
    x: rt<f32>[16, 64] = X.tile(i, 0)
    G.tile(i, 0) = gelu(x)
  }
}"""


def test_reciprocals_pinned_to_mufu_on_the_simulated_ptx():
    """The epilogue pass's option rcp=mufu (``epilogue_rcp = "mufu"``): the sigmoid's (silu's,
    gelu_tanh's) reciprocal is rcp.approx instead of the FMA pipe's seven instructions, within the
    same bound."""
    from tkjit.codegen import emit_ptx
    kernel = lower(SRC)
    kernel.attrs["epilogue_rcp"] = "mufu"
    pinned, own = emit_ptx(kernel)[0], emit_ptx(lower(SRC))[0]
    assert pinned.count("rcp.approx") > own.count("rcp.approx") and pinned.count("fma.rn") < own.count("fma.rn")
    args = _inputs(n=20)
    outs = simulate(kernel, args, [1, 2, 3, 4, 5, 7])
    _check(dict(zip(["G", "GT", "S", "SG", "V", "Out"], outs)), args[0], args[6])


def test_gelu_fma_reciprocal_keeps_inf_and_nan():
    """+inf stays +inf, NaN stays NaN, -inf gives what the MUFU form gives (NaN: -inf·0), and
    |x| past the clamp (64) gives x or -0 as erfc's underflow says."""
    src = GELU_ONLY
    x = torch.full((16, 64), 1.0)
    x[0, :6] = torch.tensor([float("inf"), float("nan"), float("-inf"), 100.0, -100.0, 1e30])
    got = {}
    for rcp in ("fma", "mufu"):
        kernel = lower(src)
        kernel.attrs["epilogue_rcp"] = rcp
        got[rcp] = simulate(kernel, [x, torch.full((16, 64), 7.0)], [1])[0]
    row = got["fma"][0, :6]
    assert row[0] == float("inf") and math.isnan(row[1]) and row[3] == 100.0 and row[5] == 1e30
    assert row[4] == 0.0 and math.isnan(row[2])  # -inf: -inf·0, as on MUFU
    torch.testing.assert_close(got["fma"], got["mufu"], rtol=2e-6, atol=0, equal_nan=True)


@needs_cuda_tools
def test_activations_assemble_for_sm90a_without_spills():
    fn = assemble(lower(SRC))
    assert fn.spill_store_bytes == 0 and fn.stack_frame_bytes == 0


def test_activations_fold_on_constants():
    from tkjit.ir.printer import print_kernel
    src = """
    kernel k(Y: gl<f32>[16, 64]) {
      const A = gelu(1.0) + gelu_tanh(-2.0) + silu(3.0) + sigmoid(0.0)
      for i in blocks(1) {
        y: rt<f32>[16, 64] = fill(A)
        Y.tile(0, 0) = y
      }
    }"""
    text = print_kernel(lower(src))
    want = (F.gelu(torch.tensor(1.0, dtype=torch.float64)) + F.gelu(torch.tensor(-2.0, dtype=torch.float64),
            approximate="tanh") + F.silu(torch.tensor(3.0, dtype=torch.float64)) + 0.5).item()
    value = float(text.split("fill {value = ")[1].split("}")[0])
    assert value == pytest.approx(want, rel=1e-12)


def test_activations_round_trip_through_textual_ir():
    from tkjit.ir.parser import parse_kernel
    from tkjit.ir.printer import print_kernel
    text = print_kernel(lower(SRC))
    for name in ("gelu", "gelu_tanh", "silu", "sigmoid"):
        assert f"= {name} %" in text
    assert print_kernel(parse_kernel(text)) == text


def test_activation_of_an_integer_is_reported():
    from tkjit.errors import DiagnosticError
    src = """
    kernel k(Y: gl<f32>[16, 64], n: i32) {
      for i in blocks(1) {
        z = gelu(n)
        y: rt<f32>[16, 64] = zeros()
        Y.tile(0, 0) = y
      }
    }"""
    with pytest.raises(DiagnosticError) as err:
        lower(src)
    assert "expected a float operand" in err.value.message and "cvt<f32>" in err.value.message
