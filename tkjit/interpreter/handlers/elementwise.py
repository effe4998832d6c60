"""Handlers for elementwise ops on tiles and vectors: binary/unary maps, cvt, zeros, fill, iota,
causal_mask, cmp_select.

Math is float32 (numpy); a result of a narrower dtype is rounded to it (RNE) after each op. A
scalar operand is first converted to the tile's dtype. Validity: an elementwise result is valid
where all its tile/vector operands are (rows and columns intersect); a scalar operand, ``cvt``
and ``causal_mask`` leave validity as it is; ``zeros``/``fill``/``iota`` are fully valid; a
``cmp_select`` result is valid where all its tile/vector operands are.
"""
from __future__ import annotations

import numpy as np

from ...ir.types import F32, TileType
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


def run_iota(it, op, args):
    """(r, c) is offset + r (axis row) or offset + c (axis col), as f32."""
    rows, cols = op.results[0].type.shape
    offset = args[0] if args else 0
    if op.attrs["axis"] == "row":
        idx = np.broadcast_to((offset + np.arange(rows, dtype=np.int64))[:, None], (rows, cols))
    else:
        idx = np.broadcast_to((offset + np.arange(cols, dtype=np.int64))[None, :], (rows, cols))
    return [TileValue.full(idx.astype(np.float32), op.results[0].type.dtype)]


CMP = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
       "eq": np.equal, "ne": np.not_equal}


def run_cmp_select(it, op, args):
    """a cmp b ? x : y per element; a scalar is first rounded to the dtype of its partner."""
    a, b, x, y = args
    out_dtype = op.results[0].type.dtype

    def data(v, partner_dtype):
        return v.data if isinstance(v, SHAPED) else np.float32(round_scalar(float(v), partner_dtype))

    # the comparison is in f32; a scalar takes its partner's dtype first (f32 if both are scalars)
    cmp_dtype = next((v.dtype for v in (a, b) if isinstance(v, SHAPED)), F32)
    chosen = np.where(CMP[op.attrs["cmp"]](data(a, cmp_dtype), data(b, cmp_dtype)),
                      data(x, out_dtype), data(y, out_dtype))
    shaped = [v for v in (a, b, x, y) if isinstance(v, SHAPED)]
    result = shaped[0]
    for v in shaped[1:]:
        result = result.intersect(v, result.data)
    chosen = np.broadcast_to(chosen, result.data.shape)
    return [result.with_data(round_to(np.array(chosen, np.float32), out_dtype), out_dtype)]
