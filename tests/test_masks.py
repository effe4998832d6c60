"""Index tiles (row_index/col_index) and the elementwise select(a < b, x, y) on tiles and vectors:
the pieces users build causal, sliding-window, ALiBi and document masks from, without
causal_mask. Each runs on the interpreter and on the register-tile PTX (simulated, and
assembled by ptxas), against torch, at shapes that do not divide the tiles."""
from __future__ import annotations

import pytest
import torch

from simkit import assemble, lower, simulate
from support import needs_cuda_tools

SRC = """
kernel masks(S: gl<f32>[N, M], Causal: gl<f32>[N, M], Window: gl<f32>[N, M], Alibi: gl<bf16>[N, M],
             Rowmax: gl<f32>[N], q0: i32, w: i32, slope: f32) {
  for (i, j) in blocks(N / 32, M / 64) {
    s: rt<f32>[32, 64] = S.tile(i, j)
    qi: rt<f32>[32, 64] = row_index(q0 + i * 32)     # the query position of each row
    kj: rt<f32>[32, 64] = col_index(j * 64)          # the key position of each column
    Causal.tile(i, j) = select(kj > qi, -inf, s)
    d = qi - kj
    Window.tile(i, j) = select(d < 0, -inf, select(d >= cvt<f32>(w), -inf, s))
    Alibi.tile(i, j) = cvt<bf16>(s - d * slope)
    m = row_max(s)
    if j == 0 {
      Rowmax.tile(i) = select(m > 0.5, m, 0)          # on a cv, with a constant
    }
  }
}
"""


def _inputs(n=40, m=100, q0=3, w=17, slope=0.25):
    s = torch.randn(n, m, generator=torch.Generator().manual_seed(0))
    nan = lambda *shape, dt=torch.float32: torch.full(shape, float("nan"), dtype=dt)  # noqa: E731
    return [s, nan(n, m), nan(n, m), nan(n, m, dt=torch.bfloat16), nan(n), q0, w, slope]


def _check(outs, args):
    s, q0, w, slope = args[0].double(), args[5], args[6], args[7]
    n, m = s.shape
    qi = (q0 + torch.arange(n, dtype=torch.float64))[:, None].expand(n, m)
    kj = torch.arange(m, dtype=torch.float64)[None, :].expand(n, m)
    causal, window, alibi, rowmax = (o.double() for o in outs)
    torch.testing.assert_close(causal, s.masked_fill(kj > qi, float("-inf")), rtol=0, atol=0)
    d = qi - kj
    torch.testing.assert_close(window, s.masked_fill((d < 0) | (d >= w), float("-inf")), rtol=0, atol=0)
    torch.testing.assert_close(alibi, s - d * slope, rtol=1e-2, atol=1e-2)
    mx = s[:, :64].amax(1)  # the row maximum of the first column block
    torch.testing.assert_close(rowmax, torch.where(mx > 0.5, mx, torch.zeros_like(mx)), rtol=0, atol=0)


def test_masks_on_the_interpreter():
    from tkjit.interpreter import run
    args = _inputs()
    run(lower(SRC), args)
    _check([args[i] for i in (1, 2, 3, 4)], args)


def test_masks_on_the_simulated_ptx():
    args = _inputs()
    _check(simulate(lower(SRC), args, [1, 2, 3, 4]), args)


@needs_cuda_tools
def test_masks_assemble_for_sm90a_without_spills():
    fn = assemble(lower(SRC))
    assert fn.spill_store_bytes == 0 and fn.stack_frame_bytes == 0


def test_masks_round_trip_through_textual_ir():
    from tkjit.ir.parser import parse_kernel
    from tkjit.ir.printer import print_kernel
    text = print_kernel(lower(SRC))
    assert 'iota {axis = "row"}' in text and 'cmp_select {cmp = "gt"}' in text
    assert print_kernel(parse_kernel(text)) == text


def test_nan_comparisons_follow_numpy():
    """ne is true with a NaN operand, the others false (setp.neu vs ordered setp)."""
    src = """
    kernel k(X: gl<f32>[N, 64], A: gl<f32>[N, 64], B: gl<f32>[N, 64]) {
      for i in blocks(N / 16) {
        x: rt<f32>[16, 64] = X.tile(i, 0)
        A.tile(i, 0) = select(x != x, 1.0, 0.0)
        B.tile(i, 0) = select(x < 0, 1.0, 0.0)
      }
    }"""
    x = torch.tensor([float("nan"), -1.0, 1.0, 0.0]).repeat(16, 16)
    nan = torch.full((16, 64), float("nan"))
    from tkjit.interpreter import run
    args = [x, nan.clone(), nan.clone()]
    run(lower(src), args)
    sim = simulate(lower(src), [x, nan.clone(), nan.clone()], [1, 2])
    for got in ([args[1], args[2]], sim):
        assert got[0].tolist() == torch.isnan(x).float().tolist()
        assert got[1].tolist() == (x < 0).float().tolist()


@pytest.mark.parametrize("body,message", [
    ("y = x < x", "tiles and vectors compare only as the condition of select(a < b, x, y)"),
    ("r: rt<bf16>[16, 64] = row_index()", "row_index() makes f32 register tiles"),
    ("y = row_index(3)", "row_index() takes its shape from a typed binding"),
    ("v: rv<f32>[64] = zeros()\n        y = select(v < 0.0, x, x)", "select: shapes differ"),
])
def test_mistakes_are_reported(body, message):
    from tkjit.errors import DiagnosticError
    src = f"""
    kernel k(X: gl<f32>[N, 64]) {{
      for i in blocks(N / 16) {{
        x: rt<f32>[16, 64] = X.tile(i, 0)
        {body}
        X.tile(i, 0) = x
      }}
    }}"""
    with pytest.raises(DiagnosticError) as err:
        lower(src)
    assert message in err.value.message
