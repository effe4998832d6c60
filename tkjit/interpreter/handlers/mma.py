"""Handler for the tensor-core products mma_AB, mma_ABt, mma_AtB, mma_AtBt.

Numerics: the operands (bf16/f16/fp8 values, exact in float32) are multiplied and summed over
the inner dimension in float64, the accumulator is added in float64, and the result is rounded
once per mma to the accumulator's dtype (f32, or f16 via f32). Deterministic: no BLAS ordering
in float32. Padding: the inner dimension counts only where A's inner index AND B's inner index
are valid; there both operands are replaced by exact zeros (even if the padding holds NaN or
inf, e.g. exp2 of a padded score). The result's rows are A's output rows, its columns B's, each
intersected with the accumulator's.
"""
from __future__ import annotations

import numpy as np

from ..numerics import round_to
from ..values import TileValue


def run_mma(it, op, args):
    a, b = args[0], args[1]
    acc = args[2] if len(args) > 2 else None
    if op.TA:
        a_mat, out_rows, a_inner = a.data.T, a.cols, a.rows
    else:
        a_mat, out_rows, a_inner = a.data, a.rows, a.cols
    if op.TB:
        b_mat, b_inner, out_cols = b.data.T, b.cols, b.rows
    else:
        b_mat, b_inner, out_cols = b.data, b.rows, b.cols
    inner = a_inner & b_inner
    a64, b64 = a_mat.astype(np.float64), b_mat.astype(np.float64)
    if not inner.all():
        a64 = np.where(inner[None, :], a64, 0.0)
        b64 = np.where(inner[:, None], b64, 0.0)
    d = a64 @ b64
    if acc is not None:
        d += acc.data
        out_rows, out_cols = out_rows & acc.rows, out_cols & acc.cols
    dt = op.results[0].type.dtype
    return [TileValue(round_to(d.astype(np.float32), dt), out_rows, out_cols, dt)]
