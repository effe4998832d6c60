"""Row/column reductions of register tiles, and broadcasts of vectors over tiles."""
from __future__ import annotations

from ..core import Op
from ..types import TileType, VectorType, describe


def _need_rt(op: Op, t) -> TileType:
    if not (isinstance(t, TileType) and t.space == "rt"):
        hint = "; copy it into a register tile (rt) first" if isinstance(t, TileType) else ""
        raise op.error(f"expected a register tile, got {describe(t)}{hint}")
    return t


class Reduce(Op):
    """``%m = row_max %s : cv<f32>[128]`` (per row) / ``col_sum`` (per column). Padding is skipped.
    ``partial = true`` (set by the row-sums pass on a row_sum): the value is the same, but each
    thread keeps the sum of its own elements of the row, combined with the others' once, after
    the loop that carries it (``for {partial_sums = [...]}``); it changes registers, not values."""

    OPERANDS = ("x",)
    ATTRS = {"partial": bool}
    OPTIONAL_ATTRS = frozenset({"partial"})
    AXIS = "row"
    FN = "max"

    def infer(self):
        t = _need_rt(self, self.operands[0].type)
        if self.AXIS == "row":
            return [VectorType("cv", t.dtype, t.rows)]
        return [VectorType("rv", t.dtype, t.cols)]


class Broadcast(Op):
    """``%r = sub_row %s, %m`` — subtract m[r] from row r (``*_col``: v[c] from column c)."""

    OPERANDS = ("x", "v")
    AXIS = "row"
    FN = "sub"
    ATTRS = {"fuse": str}
    OPTIONAL_ATTRS = frozenset({"fuse"})

    def infer(self):
        t = _need_rt(self, self.operands[0].type)
        v = self.operands[1].type
        kind, length = ("cv", t.rows) if self.AXIS == "row" else ("rv", t.cols)
        noun = "column vector (cv) with one value per row" if kind == "cv" else \
            "row vector (rv) with one value per column"
        if not isinstance(v, VectorType) or v.kind != kind:
            raise self.error(f"expected a {noun}, got {describe(v)}")
        if v.length != length:
            raise self.error(f"the tile is {t.rows}x{t.cols} but the vector has {v.length} "
                             f"values (expected {length})")
        if v.dtype != t.dtype:
            raise self.error(f"dtypes differ: tile {t.dtype}, vector {v.dtype}")
        return [t]


def _make(base, fn: str, axis: str):
    name = f"{axis}_{fn}" if base is Reduce else f"{fn}_{axis}"
    cls = type("".join(p.capitalize() for p in name.split("_")), (base,),
               {"NAME": name, "AXIS": axis, "FN": fn, "__doc__": f"``{name}``."})
    return cls


REDUCE_OPS = tuple(_make(Reduce, fn, ax) for ax in ("row", "col") for fn in ("max", "min", "sum"))
BROADCAST_OPS = tuple(_make(Broadcast, fn, ax) for ax in ("row", "col")
                      for fn in ("add", "sub", "mul", "div", "max", "min"))
