"""Which register values may carry padding, where it starts, and whether it is zero.

Elements of a tile that lie outside its tensor are *padding* (docs/language.md, "Tile
coordinates and edges"): loads make them zero, stores skip them, and they must never reach a
reduction or the inner dimension of an mma. This analysis tells the emitters, for every tile
and vector value, per axis:

* ``None``: the axis has no padding (statically in range);
* ``Axis(limit, clean)``: elements at index >= ``limit`` along the axis are padding, and
  ``clean`` says they are known to be zero.

A ``Limit`` is symbolic: ``dim - coord * extent`` with the tensor dimension, the tile coordinate
(an SSA value) and the tile extent; it is 0 when a leading (batch) coordinate is outside its
dimension. Emitters turn it into per-thread predicates. Reductions mask padding with their
identity (always for max/min, for sums when it is not clean); mma operands whose inner-dimension
padding is not clean are masked to zero. When two different limits meet (rare: tiles from
different places combined elementwise) the limit is ``UNKNOWN`` and a consumer that needs it
reports NotAvailableError.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field

from ..ir.core import Block, Kernel, Op, Value
from ..ir.ops import (Abs, Blocks, Broadcast, CausalMask, ClusterRank, CmpSelect, Const, Copy, CopyCols, Cvt, Fill, For, Gelu, GeluTanh, If,
                      Load, Mma, Neg, Reduce, Relu, Silu, Sin, Sqrt, Tanh, Unary, Yield, Zeros)
from ..ir.ops import Add, Binary, CDiv, Div, FloorDiv, Max, Min, Mod, Mul, Sub
from ..ir.types import GlobalType, ScalarType, TileType

ZERO_PRESERVING = (Neg, Abs, Relu, Sqrt, Sin, Tanh, Gelu, GeluTanh, Silu)
"""Maps with f(0) == 0: clean padding stays clean."""


@dataclass(frozen=True, eq=False)
class Limit:
    """Valid elements along an axis: index < dim - coord*extent, or none if a lead coordinate is out."""

    dim: str | int
    coord: Value
    extent: int
    lead: tuple[tuple[str | int, Value], ...] = ()

    def key(self):
        return (self.dim, id(self.coord), self.extent, tuple((d, id(v)) for d, v in self.lead))

    def __eq__(self, other) -> bool:
        return isinstance(other, Limit) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def values(self) -> list[Value]:
        return [self.coord] + [v for _, v in self.lead]


UNKNOWN = "unknown"
"""A limit the analysis cannot name (different limits met)."""


@dataclass(frozen=True)
class Axis:
    limit: Limit | str
    clean: bool


@dataclass(frozen=True)
class Pad:
    rows: Axis | None = None
    cols: Axis | None = None
    zero: bool = False
    """The whole value is known to be zero (zeros(), fill(0))."""

    def axis(self, which: str) -> Axis | None:
        return self.rows if which == "rows" else self.cols


NONE = Pad()


def _clean_or_zero(pad: Pad, which: str) -> bool:
    a = pad.axis(which)
    return pad.zero if a is None else a.clean


def _merge_limits(limits: list, meet: bool = False) -> Limit | str | None:
    """The one limit of ``limits``; UNKNOWN when they differ. With ``meet`` (values combined
    element by element, so an element is padding where any operand's is), limits that differ only
    in their lead coordinates meet at the limit with every lead: its count is the common
    ``dim - coord*extent`` where all those coordinates are inside, else 0, the smaller of the two
    (a key-padding vector KM[b, j] beside a key tile K[b, h, j]). Not for joins of two paths."""
    present = [lim for lim in limits if lim is not None]
    if not present:
        return None
    first = present[0]
    if all(lim == first for lim in present):
        return first
    if meet and all(isinstance(lim, Limit) and lim.dim == first.dim and lim.coord is first.coord
                    and lim.extent == first.extent for lim in present):
        lead: dict = {}
        for lim in present:
            for d, v in lim.lead:
                lead.setdefault((d, id(v)), (d, v))
        return Limit(first.dim, first.coord, first.extent, tuple(lead.values()))
    return UNKNOWN


def _merge_axis(pads: list[Pad], which: str, clean: bool) -> Axis | None:
    """The meet of the operands' axes (elementwise combination). Where their limits differ (in
    leads only) the operand with the larger count holds valid values past the merged limit, so
    the merged padding is not known to be zero."""
    limits = [p.axis(which).limit if p.axis(which) else None for p in pads]
    limit = _merge_limits(limits, meet=True)
    if limit is None:
        return None
    if any(lim is not None and lim != limit for lim in limits):
        clean = False
    return Axis(limit, clean)


@dataclass
class PaddingInfo:
    """The analysis result: ``info[value]`` is its Pad (scalars and shared tiles included)."""

    pads: dict[int, Pad] = field(default_factory=dict)

    def __getitem__(self, v: Value) -> Pad:
        return self.pads.get(id(v), NONE)

    def set(self, v: Value, pad: Pad) -> None:
        self.pads[id(v)] = pad


# ------------------------------------------------------------------ static ranges

def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


_FOLD = {Add: operator.add, Sub: operator.sub, Mul: operator.mul, FloorDiv: operator.floordiv,
         Mod: operator.mod, CDiv: _ceil_div}
"""Integer ops whose constant operands fold."""


def const_int(v: Value) -> int | None:
    """The value of an i32 computed from constants only, else None."""
    op = v.owner
    if isinstance(op, Const) and isinstance(op.attrs["value"], int):
        return int(op.attrs["value"])
    fold = _FOLD.get(type(op)) if isinstance(v.type, ScalarType) else None
    if fold is None:
        return None
    a, b = (const_int(x) for x in op.operands)
    if a is None or b is None or (b == 0 and fold not in (operator.add, operator.sub, operator.mul)):
        return None
    return fold(a, b)


def upper_bound(v: Value) -> int | None:
    """A static exclusive upper bound of an index: constants, block indices, loop variables."""
    c = const_int(v)
    if c is not None:
        return c + 1
    owner = v.owner
    if isinstance(owner, ClusterRank):  # below the cluster size of the enclosing block loop
        loop = owner.parent.parent if owner.parent is not None else None
        return loop.attrs.get("cluster", 1) if isinstance(loop, Blocks) else None
    if isinstance(owner, Block) and owner.parent is not None:
        parent = owner.parent
        if isinstance(parent, Blocks):
            return const_int(parent.variadic()[v.index])
        if isinstance(parent, For) and v.index == 0:
            return const_int(parent.operands[1])
    return _bound_of_arithmetic(owner)


def _bound_of_arithmetic(op) -> int | None:
    """Upper bounds through min, max, + and - of bounded indices and products with a constant
    (what stream-cols' chunk indices are made of: ``n - 1 - c``, ``min(c + 1, n - 1)``,
    ``max(c - 1, 0)``, ``rank * n + c``)."""
    if not isinstance(op, (Min, Max, Add, Sub, Mul)) or not isinstance(op.results[0].type, ScalarType):
        return None
    a, b = op.operands
    if isinstance(op, Mul):
        k, ua = const_int(b), upper_bound(a)
        return (ua - 1) * k + 1 if k is not None and k >= 0 and ua is not None and _non_negative(a) else None
    if isinstance(op, Sub):
        k = const_int(b)
        if k is not None and k >= 0:
            ua = upper_bound(a)
            return None if ua is None else ua - k
        k = const_int(a)
        return k + 1 if k is not None and _non_negative(b) else None
    ua, ub = upper_bound(a), upper_bound(b)
    if isinstance(op, Min):
        known = [u for u in (ua, ub) if u is not None]
        return min(known) if known else None
    if ua is None or ub is None:
        return None
    return max(ua, ub) if isinstance(op, Max) else ua + ub - 1


def _non_negative(v: Value) -> bool:
    """A block index, a cluster rank, or the variable of a loop that starts at a constant >= 0."""
    owner = v.owner
    if isinstance(owner, ClusterRank):
        return True
    if isinstance(owner, Block) and owner.parent is not None and v.index == 0:
        if isinstance(owner.parent, Blocks):
            return True
        if isinstance(owner.parent, For):
            lo = const_int(owner.parent.operands[0])
            return lo is not None and lo >= 0
    return isinstance(owner, Block) and isinstance(owner.parent, Blocks)


def _in_range(dim, coord: Value, extent: int) -> bool:
    if not isinstance(dim, int):
        return False
    ub = upper_bound(coord)
    return ub is not None and ub * extent <= dim


def load_pad(g: GlobalType, coords: list[Value], t) -> Pad:
    """Padding of a freshly loaded tile or vector: zero-filled, limited by the tensor's edges."""
    if isinstance(t, TileType):
        lead = tuple((d, c) for d, c in zip(g.dims[:-2], coords[:-2]) if not _in_range(d, c, 1))
        row_in = _in_range(g.dims[-2], coords[-2], t.rows) and not lead
        rows = None if row_in else Axis(Limit(g.dims[-2], coords[-2], t.rows, lead), True)
        col_in = _in_range(g.dims[-1], coords[-1], t.cols)
        cols = None if col_in else Axis(Limit(g.dims[-1], coords[-1], t.cols), True)
        return Pad(rows, cols)
    lead = tuple((d, c) for d, c in zip(g.dims[:-1], coords[:-1]) if not _in_range(d, c, 1))
    inside = _in_range(g.dims[-1], coords[-1], t.length) and not lead
    axis = None if inside else Axis(Limit(g.dims[-1], coords[-1], t.length, lead), True)
    return Pad(rows=axis) if t.kind == "cv" else Pad(cols=axis)


# ------------------------------------------------------------------ transfer rules

def _binary(op: Binary, a: Pad, b: Pad, b_scalar: bool, a_scalar: bool) -> Pad:
    if a_scalar:
        a, b, a_scalar, b_scalar = b, a, b_scalar, a_scalar
    zero = (a.zero and b.zero) if not b_scalar else (a.zero and isinstance(op, (Mul, Div)))
    out = {}
    for which in ("rows", "cols"):
        if b_scalar:
            ax = a.axis(which)
            clean = ax is not None and ax.clean and isinstance(op, (Mul, Div))
            out[which] = None if ax is None else Axis(ax.limit, clean)
            continue
        both = _clean_or_zero(a, which) and _clean_or_zero(b, which)
        clean = both and isinstance(op, (Add, Sub, Mul, Max, Min))
        out[which] = _merge_axis([a, b], which, clean)
    return Pad(out["rows"], out["cols"], zero)


def _broadcast(op: Broadcast, t: Pad, v: Pad) -> Pad:
    along, cross = ("rows", "cols") if op.AXIS == "row" else ("cols", "rows")
    ax_cross = t.axis(cross)
    cross_axis = None if ax_cross is None else Axis(ax_cross.limit, ax_cross.clean and op.FN in ("mul", "div"))
    along_clean = _clean_or_zero(t, along) and _clean_or_zero(v, along) and op.FN != "div"
    along_axis = _merge_axis([t, v], along, along_clean)
    out = {along: along_axis, cross: cross_axis}
    return Pad(out["rows"], out["cols"], t.zero and op.FN in ("mul", "div"))


def _reduce(op: Reduce, t: Pad) -> Pad:
    which = "rows" if op.AXIS == "row" else "cols"
    ax = t.axis(which)
    axis = None if ax is None else Axis(ax.limit, ax.clean and op.FN == "sum")
    return Pad(rows=axis) if which == "rows" else Pad(cols=axis)


def _mma(op: Mma, a: Pad, b: Pad, acc: Pad | None) -> Pad:
    m_axis = a.cols if op.TA else a.rows
    n_axis = b.rows if op.TB else b.cols
    src = {"rows": (m_axis, a.zero), "cols": (n_axis, b.zero)}
    out = {}
    for which, (ax, _) in src.items():
        own = Pad(rows=ax) if which == "rows" else Pad(cols=ax)
        pads = [own] + ([acc] if acc is not None else [])
        clean = (ax is None or ax.clean) and (acc is None or _clean_or_zero(acc, which))
        out[which] = _merge_axis(pads, which, clean)
    zero = (a.zero or b.zero) and (acc is None or acc.zero)
    return Pad(out["rows"], out["cols"], zero)


def _join(x: Pad, y: Pad, inside: set[int]) -> Pad:
    """The padding of a value that is x on one path and y on another (loop carries, if results)."""
    out = {}
    for which in ("rows", "cols"):
        limit = _merge_limits([p.axis(which).limit if p.axis(which) else None for p in (x, y)])
        if isinstance(limit, Limit) and any(id(v) in inside for v in limit.values()):
            limit = UNKNOWN
        if any(p.axis(which) is None and not p.zero for p in (x, y)) and limit is not None:
            # padded on one path, wholly valid (and not all zero) on the other: where the
            # padding starts depends on the path taken; masking by the one limit would drop
            # valid elements on the other path (found by the differential generator)
            limit = UNKNOWN
        clean = _clean_or_zero(x, which) and _clean_or_zero(y, which)
        out[which] = None if limit is None else Axis(limit, clean)
    return Pad(out["rows"], out["cols"], x.zero and y.zero)


def _defined_inside(block: Block) -> set[int]:
    ids = {id(a) for a in block.args}
    for op in block.ops:
        for inner in op.walk():
            ids.update(id(r) for r in inner.results)
            for region in inner.regions:
                ids.update(id(a) for a in region.args)
    return ids


class _Analysis:
    def __init__(self) -> None:
        self.info = PaddingInfo()

    def block(self, block: Block) -> None:
        for op in block.ops:
            self.op(op)

    def op(self, op: Op) -> None:
        info = self.info
        ins = [info[v] for v in op.operands]
        if isinstance(op, Load):
            info.set(op.result, load_pad(op.operands[0].type, op.variadic(), op.result.type))
        elif isinstance(op, Copy):
            src = ins[0]
            if isinstance(op.result.type, TileType) and op.result.type.space == "st":
                src = Pad(*(None if a is None else Axis(a.limit, True) for a in (src.rows, src.cols)),
                          zero=src.zero)
            info.set(op.result, src)
        elif isinstance(op, CopyCols):  # the rows' padding is the tile's; a padded column limit is not per chunk
            src = ins[0]
            info.set(op.result, Pad(src.rows, None if src.cols is None else Axis(UNKNOWN, src.cols.clean),
                                    zero=src.zero))
        elif isinstance(op, Zeros):
            info.set(op.result, Pad(zero=True))
        elif isinstance(op, Fill):
            info.set(op.result, Pad(zero=op.attrs["value"] == 0))
        elif isinstance(op, Cvt):
            info.set(op.result, ins[0])
        elif isinstance(op, Unary):
            keeps = isinstance(op, ZERO_PRESERVING)
            p = ins[0]
            axes = [None if a is None else Axis(a.limit, a.clean and keeps) for a in (p.rows, p.cols)]
            info.set(op.result, Pad(*axes, zero=p.zero and keeps))
        elif isinstance(op, Binary):
            a_s, b_s = (isinstance(v.type, ScalarType) for v in op.operands)
            if not (a_s and b_s):
                info.set(op.result, _binary(op, ins[0], ins[1], b_s, a_s))
        elif isinstance(op, Broadcast):
            info.set(op.result, _broadcast(op, ins[0], ins[1]))
        elif isinstance(op, Reduce):
            info.set(op.result, _reduce(op, ins[0]))
        elif isinstance(op, Mma):
            info.set(op.result, _mma(op, ins[0], ins[1], ins[2] if len(ins) > 2 else None))
        elif isinstance(op, CmpSelect):  # what lands in the padding is not known to be zero
            pads = [p for p, v in zip(ins, op.operands) if not isinstance(v.type, ScalarType)]
            info.set(op.result, Pad(_merge_axis(pads, "rows", False), _merge_axis(pads, "cols", False)))
        elif isinstance(op, CausalMask):
            p = ins[0]
            info.set(op.result, Pad(*(None if a is None else Axis(a.limit, False) for a in (p.rows, p.cols))))
        elif isinstance(op, Blocks):
            self.block(op.regions[0])
        elif isinstance(op, For):
            self.loop(op, ins[3:])
        elif isinstance(op, If):
            self.branches(op)

    def loop(self, op: For, inits: list[Pad]) -> None:
        body = op.regions[0]
        inside = _defined_inside(body)
        carried = list(inits)
        for _ in range(6):
            for arg, pad in zip(body.args[1:], carried):
                self.info.set(arg, pad)
            self.block(body)
            yields = [self.info[v] for v in body.terminator.operands] if isinstance(body.terminator, Yield) else []
            joined = [_join(c, y, inside) for c, y in zip(carried, yields)]
            if joined == carried:
                break
            carried = joined
        else:
            carried = [Pad(*(None if a is None else Axis(UNKNOWN, False) for a in (c.rows, c.cols)))
                       for c in carried]
            for arg, pad in zip(body.args[1:], carried):
                self.info.set(arg, pad)
            self.block(body)
        for r, pad in zip(op.results, carried):
            self.info.set(r, pad)

    def branches(self, op: If) -> None:
        for region in op.regions:
            self.block(region)
        inside = _defined_inside(op.regions[0]) | _defined_inside(op.regions[1])
        then_y, else_y = (r.terminator.operands for r in op.regions)
        for r, a, b in zip(op.results, then_y, else_y):
            self.info.set(r, _join(self.info[a], self.info[b], inside))


def analyze_padding(kernel: Kernel) -> PaddingInfo:
    """Padding facts for every value of a verified kernel."""
    analysis = _Analysis()
    analysis.block(kernel.body)
    return analysis.info

