"""Consumers whose rows all lie past the end: the proof behind ``own-trips{past_end}``.

A tile's register tiles of R rows are split over C cooperative consumers, consumer c holding rows
[c·R/C, (c+1)·R/C). On a tile at row offset r0 of a tensor of E rows, consumer c's rows are
[r0 + first_c, r0 + last_c]; when r0 + first_c >= E, none of them is stored (stores clip at the
tensor's end: TMA boxes, bounded register stores), so whatever the consumer computes for them is
never seen -- provided nothing it computes reaches another consumer's rows. Then its trips of the
tile's ring loop can all be idle (own trips 0): the epilogue runs on the carried initial values,
and its stores write nothing.

**What is proved** (``past_end_of``), on the block body that holds the loop:

1. *Row-local*: every op in the block body (at any depth) is one whose result rows depend only on
   the same rows of its register operands: elementwise maps and comparisons, ``cvt``, fills,
   ``iota``, ``causal_mask``, row reductions, row and column broadcasts (a row vector is one value
   a column, the same for every consumer: no op here makes one from a register tile), loads,
   copies and column chunks of shared tiles into registers, ``for``/``if``/``yield``, scalar ops
   (scalars come from scalars only), products whose register operand is the non-transposed A or
   the accumulator. Refused, with the op: column reductions, a register tile as a product's B or
   as a transposed A, a register tile copied into shared memory (another consumer's product may
   read it), cluster reductions, an op producing a scalar from a tile or vector, any other op.
2. *Stores*: every store in the block body writes a register tile or column vector of the loop's
   R rows (``rt``/``cv``), at the same row tile coordinate ``row0`` (the tile's second-to-last
   coordinate, a vector's last: rows ``row0·R ..``), along a tensor dimension the kernel reads as
   a ``dim`` (its extent at run time). Where the loop has a causal mask, the plan's query offset
   q0 may be the same expression as ``row0·R`` (then the lowering compares q0 + first_c itself).

Under those, consumer c's own trips are 0 when ``row0·R + first_c >= max(extents)``, and its
results are never stored: the valid rows are bit-identical to running every trip. The
consumer's epilogue may compute 0/0 or log(0) on its carried initial values; those rows are
clipped away (the roles interpreter stores each consumer's own rows only, so a row computed wrong
would show).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.core import Op, Value
from ..ir.ops import (BINARY_OPS, MMA_OPS, UNARY_OPS, Broadcast, CausalMask, Check, CmpSelect, Const, Copy,
                      CopyCols, Cvt, Dim, Fill, For, If, Iota, Load, MmaAtB, MmaAtBt, Reduce, Select, Store,
                      Yield, Zeros)
from ..ir.ops import async_ops
from ..ir.types import GlobalType, ScalarType, TileType, VectorType
from .decisions import subject_of


class NotPastEnd(Exception):
    """Why the rule does not apply (a consumer may not be idled for its rows past the end)."""


@dataclass
class PastEnd:
    """What a consumer needs to tell that its rows of the tile lie past every store's end: the
    stores' row tile coordinate ``row0`` (the block-body scalar ops after the loop that compute it,
    to emit before the loop), the tile's rows R (row offset row0·R), the ``dim`` values of the
    stores' row dimensions, and whether the loop's mask offset q0 is the same expression as
    row0·R."""

    row0: Value
    row0_ops: list
    tile_rows: int
    extents: list[Value]
    stores: list = field(default_factory=list)
    same_q0: bool = False

    def idle(self, consumer: int, rows: int, row0: int, extents: list[int]) -> bool:
        """Whether consumer ``consumer`` (``rows`` rows each) has all of its rows past the end."""
        return row0 * self.tile_rows + rows * consumer >= max(extents)

    def text(self) -> str:
        ends = " and ".join(v.owner.attrs["name"] for v in self.extents)
        return (f"every store ({', '.join(subject_of(s) for s in self.stores)}) writes rows "
                f"{self.tile_rows}·%{self.row0.hint or '?'} .. of the tile and clips at {ends}")


_ROW_LOCAL = (*BINARY_OPS, *UNARY_OPS, Cvt, Zeros, Fill, Iota, CausalMask, CmpSelect, Select, Const, Dim,
              Load, CopyCols, Broadcast, For, If, Yield, Check)
"""Ops whose result rows depend only on the same rows of their register operands (or on none)."""


def _register(v: Value) -> bool:
    t = v.type
    return (isinstance(t, TileType) and t.space == "rt") or isinstance(t, VectorType)


def mixing(op: Op) -> str | None:
    """Why ``op`` may make a result row from other rows (another consumer's), or None."""
    if isinstance(op, async_ops.AsyncOp):
        return None
    name = op.NAME
    if not isinstance(op, (For, If)) and any(isinstance(r.type, ScalarType) for r in op.results) and \
            any(not isinstance(x.type, ScalarType) and _register(x) for x in op.operands):
        return f"{name} makes a scalar of a register tile or vector"
    if isinstance(op, Reduce):
        return None if op.AXIS == "row" else f"{name} reduces over the rows of every consumer"
    if isinstance(op, MMA_OPS):
        a, b = op.operands[:2]
        if _register(b):
            return f"{name} takes a register tile as B (every consumer's rows)"
        if _register(a) and isinstance(op, (MmaAtB, MmaAtBt)):
            return f"{name} takes a register tile as a transposed A (its rows are the product's columns)"
        return None
    if isinstance(op, Copy):
        t = op.results[0].type
        if isinstance(t, TileType) and t.space == "st" and _register(op.operands[0]):
            return f"{name} writes a register tile to shared memory (another consumer may read it)"
        return None
    if isinstance(op, Store):
        return None  # checked by the stores' rule
    if isinstance(op, _ROW_LOCAL):
        return None
    return f"{name} is not known to keep each consumer's rows to itself"


def _row_coord(st: Store) -> tuple[Value, object]:
    """The store's row tile coordinate and the tensor dimension it runs along."""
    g, value, *coords = st.operands
    t = value.type
    dims = g.type.dims if isinstance(g.type, GlobalType) else ()
    if isinstance(t, TileType) and t.space == "rt":
        return coords[-2], dims[-2]
    if isinstance(t, VectorType) and t.kind == "cv":
        return coords[-1], dims[-1]
    raise NotPastEnd(f"{subject_of(st)} stores {t}, not a register tile or column vector")


def _rows(t) -> int:
    return t.rows if isinstance(t, TileType) else t.length


def same_expr(a: Value, b: Value) -> bool:
    """Structurally the same scalar expression (ops, attributes, operands; own-trips uses it too)."""
    if a is b:
        return True
    oa, ob = a.owner, b.owner
    if not isinstance(oa, Op) or not isinstance(ob, Op) or type(oa) is not type(ob) or oa.regions:
        return False
    return (oa.attrs == ob.attrs and len(oa.operands) == len(ob.operands)
            and all(same_expr(x, y) for x, y in zip(oa.operands, ob.operands)))


def _is_offset(q0: Value, row0: Value, rows: int) -> bool:
    """Whether ``q0`` is the expression row0·rows (either order)."""
    op = q0.owner
    if getattr(op, "NAME", "") != "mul":
        return False
    x, y = op.operands
    for v, c in ((x, y), (y, x)):
        if same_expr(v, row0) and isinstance(c.owner, Const) and c.owner.attrs["value"] == rows:
            return True
    return False


def _after(v: Value, body, loop: For, out: list) -> None:
    """The scalar ops of ``body`` after ``loop`` that compute ``v`` (not yet emitted where the
    consumer counts its trips), in order; values from before the loop or outside are inputs."""
    op = v.owner
    if not isinstance(op, Op):
        return
    if op.parent is not body:
        if any(o is op for inner in body.ops[body.ops.index(loop):] for o in inner.walk()):
            raise NotPastEnd(f"the stores' row coordinate %{v.hint or '?'} is computed inside a region")
        return
    if body.ops.index(op) < body.ops.index(loop) or op in out:
        return
    if op.regions or not all(isinstance(x.type, ScalarType) for x in (*op.operands, *op.results)):
        raise NotPastEnd(f"the stores' row coordinate %{v.hint or '?'} is not computed by scalar ops")
    for x in op.operands:
        _after(x, body, loop, out)
    out.append(op)


def _dims(loop: For) -> dict[str, Value]:
    """The kernel's ``dim`` values by name (the ops of the kernel body, above the block loop)."""
    op: Op | None = loop
    top = None
    while op is not None:
        top = op.parent
        op = top.parent if top is not None else None
    return {o.attrs["name"]: o.result for o in (top.ops if top is not None else []) if isinstance(o, Dim)}


def past_end_of(loop: For, q0: Value | None) -> PastEnd:
    """The facts that let a consumer whose rows all lie past every store's end idle its trips of
    ``loop`` (module docstring); raises NotPastEnd saying why not. ``q0``: the causal masks' query
    offset where the loop has a plan with one."""
    body = loop.parent
    for op in (o for top in body.ops for o in top.walk()):
        why = mixing(op)
        if why is not None:
            raise NotPastEnd(f"{why} ({subject_of(op)})")
    stores = [o for top in body.ops for o in top.walk() if isinstance(o, Store)]
    if not stores:
        raise NotPastEnd("the tile stores nothing")
    carried = [a.type for a in loop.regions[0].args[1:] if isinstance(a.type, (TileType, VectorType))]
    rows = {_rows(t) for t in carried if isinstance(t, TileType) or t.kind == "cv"}
    rows |= {_rows(s.operands[1].type) for s in stores}
    if len(rows) != 1:
        raise NotPastEnd(f"the stores' and the loop's register values differ in rows ({sorted(rows)})")
    (tile_rows,) = rows
    dims = _dims(loop)
    row0 = None
    extents: list[Value] = []
    for st in stores:
        coord, dim = _row_coord(st)
        if row0 is None:
            row0 = coord
        elif not same_expr(coord, row0):
            raise NotPastEnd(f"{subject_of(st)} stores at another row coordinate than {subject_of(stores[0])}")
        if not isinstance(dim, str) or dim not in dims:
            raise NotPastEnd(f"{subject_of(st)}'s row dimension ({dim}) is not a dim the kernel reads")
        if dims[dim] not in extents:
            extents.append(dims[dim])
    row0_ops: list = []
    _after(row0, body, loop, row0_ops)
    return PastEnd(row0, row0_ops, tile_rows, extents, stores,
                   same_q0=q0 is not None and _is_offset(q0, row0, tile_rows))
