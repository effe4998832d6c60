"""Handlers for global loads and stores, and shared <-> register copies.

A 2-D tile covers the last two dimensions of its global: coordinate (i, j) means rows i*R ..
and columns j*C ..; a vector covers the last dimension; earlier coordinates are plain indices.
A tile must start inside its tensor (0 <= i < cdiv(size, R)) and an index must be in range,
else ``InterpreterError`` at the op. The part of the tile past the tensor's edge is padding:
it loads as zero (invalid) and is never stored. A load rounds to the tile's dtype; a store
rounds to the global's dtype and writes only elements that are valid and inside the tensor.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir.ops.check import index_template, render, tile_coordinate_template
from ...ir.types import TileType
from ..numerics import decode, encode, round_to
from ..values import GlobalValue, TileValue, VectorValue


@dataclass
class Window:
    """Where a tile/vector lies in its global: the index into the memory, and its in-bounds extents."""

    index: tuple
    extents: tuple[int, ...]


def _locate(it, op, g: GlobalValue, coords: list[int], shape: tuple[int, ...]) -> Window:
    ntile = len(shape)
    lead = len(coords) - ntile
    index: list = []
    for axis in range(lead):
        c, size = coords[axis], g.shape[axis]
        if not 0 <= c < size:
            raise it.error(op, render(index_template(g.name, axis, g.type.dims[axis]), [c, size]))
        index.append(c)
    units = ("rows", "columns") if ntile == 2 else ("elements",)
    extents = []
    for k, (extent, unit) in enumerate(zip(shape, units)):
        axis = lead + k
        c, size = coords[axis], g.shape[axis]
        count = -(-size // extent)
        if not 0 <= c < count:
            template = tile_coordinate_template(g.name, axis, g.type.dims[axis], extent, unit)
            raise it.error(op, render(template, [c, count, size]))
        start = c * extent
        n = min(extent, size - start)
        index.append(slice(start, start + n))
        extents.append(n)
    return Window(tuple(index), tuple(extents))


def run_load(it, op, args):
    g, *coords = args
    t = op.results[0].type
    win = _locate(it, op, g, coords, t.shape)
    values = decode(g.memory[win.index], g.dtype)
    if t.dtype != g.dtype:
        values = round_to(values, t.dtype)
    data = np.zeros(t.shape, np.float32)
    if isinstance(t, TileType):
        data[:win.extents[0], :win.extents[1]] = values
        rows = np.arange(t.rows) < win.extents[0]
        cols = np.arange(t.cols) < win.extents[1]
        return [TileValue(data, rows, cols, t.dtype)]
    data[:win.extents[0]] = values
    return [VectorValue(data, np.arange(t.length) < win.extents[0], t.dtype)]


def run_store(it, op, args):
    g, value, *coords = args
    win = _locate(it, op, g, coords, value.data.shape)
    inside = tuple(slice(0, n) for n in win.extents)
    bits = encode(value.data[inside], g.dtype)
    if isinstance(value, TileValue):
        keep = value.mask()[inside]
    else:
        keep = value.valid[inside]
    if keep.all():
        g.memory[win.index] = bits
    else:
        g.memory[win.index] = np.where(keep, bits, g.memory[win.index])
    return []


def run_copy(it, op, args):
    (x,) = args
    dst = op.results[0].type.dtype
    return [x.with_data(round_to(x.data, dst) if dst != x.dtype else x.data, dst)]


def run_copy_cols(it, op, args):
    """Column chunk ``c`` of a shared tile (its validity masks too), rounded to the result's dtype."""
    x, c = args
    w = op.results[0].type.cols
    if not 0 <= c < x.data.shape[1] // w:
        raise it.error(op, f"column chunk {c} of {x.data.shape[1] // w} chunks of {w} columns")
    dst = op.results[0].type.dtype
    data = x.data[:, c * w:(c + 1) * w]
    data = round_to(data, dst) if dst != x.dtype else data.copy()
    return [TileValue(data, x.rows, x.cols[c * w:(c + 1) * w].copy(), dst)]
