"""Handlers for row/column reductions and vector-over-tile broadcasts.

Reductions skip padding: invalid elements are replaced by the identity (-inf for max, +inf for
min, 0 for sum) so a row with no valid element reduces to the identity. Sums accumulate in
float64 and round once to the tile's dtype; max/min ignore NaN like the GPU's max.f32. The
result vector is valid where the tile's rows (row_*) or columns (col_*) are.
Broadcasts intersect the vector's validity with the tile's rows (``*_row``) or columns (``*_col``).
"""
from __future__ import annotations

import numpy as np

from ..numerics import round_to
from ..values import TileValue, VectorValue
from .scalar import FLOAT_BINARY

IDENTITY = {"max": -np.inf, "min": np.inf, "sum": 0.0}


def _sum(data: np.ndarray, axis: int) -> np.ndarray:
    return data.sum(axis=axis, dtype=np.float64)


def _max(data: np.ndarray, axis: int) -> np.ndarray:
    return np.fmax.reduce(data, axis=axis)


def _min(data: np.ndarray, axis: int) -> np.ndarray:
    return np.fmin.reduce(data, axis=axis)


REDUCERS = {"max": _max, "min": _min, "sum": _sum}


def run_reduce(it, op, args):
    (x,) = args
    data = x.data if x.all_valid() else np.where(x.mask(), x.data, np.float32(IDENTITY[op.FN]))
    axis = 1 if op.AXIS == "row" else 0
    out = REDUCERS[op.FN](data, axis)
    valid = x.rows if op.AXIS == "row" else x.cols
    return [VectorValue(round_to(out, x.dtype), valid, x.dtype)]


def run_broadcast(it, op, args):
    x, v = args
    fn = FLOAT_BINARY[op.FN]
    if op.AXIS == "row":
        data, rows, cols = fn(x.data, v.data[:, None]), x.rows & v.valid, x.cols
    else:
        data, rows, cols = fn(x.data, v.data[None, :]), x.rows, x.cols & v.valid
    return [TileValue(round_to(data, x.dtype), rows, cols, x.dtype)]
