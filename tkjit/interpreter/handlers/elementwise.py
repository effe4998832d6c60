"""Handlers for elementwise ops on tiles and vectors: binary/unary maps, cvt, zeros, fill, causal_mask.

Math is float32 (numpy); a result of a narrower dtype is rounded to it (RNE) after each op. A
scalar operand is first converted to the tile's dtype. Validity: an elementwise result is valid
where all its tile/vector operands are (rows and columns intersect); a scalar operand, ``cvt``
and ``causal_mask`` leave validity as it is; ``zeros``/``fill`` are fully valid.
"""
from __future__ import annotations

import numpy as np

from ...ir.types import TileType
from ..numerics import round_scalar, round_to
from ..values import TileValue, VectorValue
from .scalar import FLOAT_BINARY, FLOAT_UNARY, scalar_binary, scalar_cvt, scalar_unary

SHAPED = (TileValue, VectorValue)


def run_binary(it, op, args):
    a, b = args
    if not isinstance(a, SHAPED) and not isinstance(b, SHAPED):
        return [scalar_binary(it, op, a, b)]
    fn = FLOAT_BINARY[op.NAME]
    if not isinstance(a, SHAPED):
        data = fn(round_scalar(float(a), b.dtype), b.data)
        return [b.with_data(round_to(data, b.dtype))]
    if not isinstance(b, SHAPED):
        data = fn(a.data, round_scalar(float(b), a.dtype))
        return [a.with_data(round_to(data, a.dtype))]
    return [a.intersect(b, round_to(fn(a.data, b.data), a.dtype))]


def run_unary(it, op, args):
    (x,) = args
    if not isinstance(x, SHAPED):
        return [scalar_unary(op, x)]
    return [x.with_data(round_to(FLOAT_UNARY[op.NAME](x.data), x.dtype))]


def run_cvt(it, op, args):
    (x,) = args
    dst = op.results[0].type.dtype
    if not isinstance(x, SHAPED):
        return [scalar_cvt(x, op.operands[0].type.dtype, dst)]
    return [x.with_data(round_to(x.data, dst), dst)]


def _created(op, value: float):
    t = op.results[0].type
    fill = round_scalar(value, t.dtype)
    if isinstance(t, TileType):
        return TileValue.full(np.full(t.shape, fill, np.float32), t.dtype)
    return VectorValue.full(np.full(t.shape, fill, np.float32), t.dtype)


def run_zeros(it, op, args):
    return [_created(op, 0.0)]


def run_fill(it, op, args):
    return [_created(op, float(op.attrs["value"]))]


def run_causal_mask(it, op, args):
    """(r, c) becomes the fill value (default -inf) where k0 + c > q0 + r."""
    x, q0, k0 = args
    rows, cols = x.data.shape
    hidden = (k0 + np.arange(cols))[None, :] > (q0 + np.arange(rows))[:, None]
    fill = round_scalar(float(op.attrs.get("fill", -np.inf)), x.dtype)
    return [x.with_data(np.where(hidden, fill, x.data))]
