"""Register tiles fuse-elementwise deferred (passes/fuse_elementwise.py, liveness.deferred): the
op's emitter, where it stands, only prepares what every element shares (a scalar rounded to the
tile's dtype, a reciprocal, an index base) and binds a ``LazyTile``; each user's emitter reads it
through ``LazyElements`` (emit_elementwise._elements), which emits an element's instructions
when the user asks for that element -- so the user's loop over the fragment emits the chain
element by element and the tile never exists in registers. A ``remat`` tile is computed again at
each use, a ``chain`` tile inside its one user.

Each element follows the same PTX as the op's own emitter (emit_elementwise.py) does for it.
"""
from __future__ import annotations

from collections.abc import Mapping

from ..ir.ops import BINARY_OPS, BROADCAST_OPS, UNARY_OPS, CmpSelect
from ..ir.types import ScalarType
from .mathfn import binary_f32, unary_f32


class LazyTile:
    """A deferred register tile: ``element(key, out)`` emits element ``(b, j, i)`` into ``out``
    and returns its f32 register."""

    packed = False

    def __init__(self, t, layout, element):
        self.type, self.layout, self.element = t, layout, element


class LazyElements(Mapping):
    """A LazyTile's elements as the emitters' ``{(b, j, i): f32 register}``, each emitted into
    ``out`` when first read (once per user)."""

    def __init__(self, tile: LazyTile, out: list[str]):
        self.tile, self.out, self.done = tile, out, {}

    def __getitem__(self, key):
        if key not in self.done:
            self.done[key] = self.tile.element(key, self.out)
        return self.done[key]

    def __iter__(self):
        return iter(self.tile.layout.elements())

    def __len__(self) -> int:
        return len(list(self.tile.layout.elements()))


def element_of(ctx, rep, key, out: list[str]) -> str:
    """Element ``key`` of a tile operand as an f32 register (a deferred one emitted now)."""
    if isinstance(rep, LazyTile):
        return rep.element(key, out)
    return ctx.tile_f32(rep, *key, out)


def emit_deferred(ctx, op) -> list[str]:
    """The emitter of an op whose tile is deferred: the shared preparation here, the elements
    where its users read them."""
    out: list[str] = []
    t = op.result.type
    layout = ctx.tile_layout(t)
    element = _ELEMENTS[_kind(op)](ctx, op, layout, out)
    ctx.bind(op.result, LazyTile(t, layout, element))
    return out


def _kind(op) -> str:
    if isinstance(op, UNARY_OPS):
        return "map"
    if isinstance(op, BINARY_OPS):
        return "binary"
    if isinstance(op, BROADCAST_OPS):
        return "broadcast"
    return "cmp_select" if isinstance(op, CmpSelect) else "iota"


def _map(ctx, op, layout, out):
    src = ctx.get(op.operands[0])
    return lambda key, o: unary_f32(ctx, op.NAME, element_of(ctx, src, key, o), o)


def _binary(ctx, op, layout, out):
    """As emit_binary: a scalar rounded to the tile's dtype once, division by a scalar a product
    with its reciprocal."""
    a_v, b_v = op.operands
    a_s, b_s = isinstance(a_v.type, ScalarType), isinstance(b_v.type, ScalarType)
    name = op.NAME
    if a_s or b_s:
        scalar = ctx.round_f32(op.result.type.dtype, ctx.scalar_f32(a_v if a_s else b_v, out), out)
        if b_s and name == "div":
            r = ctx.new("f32")
            out.append(f"rcp.rn.f32 {r}, {scalar};")
            scalar, name = r, "mul"
        tile = ctx.get(b_v if a_s else a_v)
        if a_s:
            return lambda key, o: binary_f32(ctx, name, scalar, element_of(ctx, tile, key, o), o)
        return lambda key, o: binary_f32(ctx, name, element_of(ctx, tile, key, o), scalar, o)
    a, b = ctx.get(a_v), ctx.get(b_v)
    return lambda key, o: binary_f32(ctx, name, element_of(ctx, a, key, o), element_of(ctx, b, key, o), o)


def _broadcast(ctx, op, layout, out):
    """As emit_broadcast: division by the vector a product with its reciprocals (once each)."""
    tile, vec = ctx.get(op.operands[0]), ctx.get(op.operands[1])
    fn, vregs = op.FN, vec.regs
    if fn == "div":
        fn, vregs = "mul", []
        for unit in vec.regs:
            row = []
            for x in unit:
                r = ctx.new("f32")
                out.append(f"rcp.rn.f32 {r}, {x};")
                row.append(r)
            vregs.append(row)
    row = op.AXIS == "row"

    def element(key, o):
        b, j, i = key
        v = vregs[b][i >> 1] if row else vregs[j][i & 1]
        return binary_f32(ctx, fn, element_of(ctx, tile, key, o), v, o)
    return element


def _cmp_select(ctx, op, layout, out):
    """As emit_cmp_select: one setp and one selp an element; scalars rounded once."""
    from .emit_elementwise import SETP, cmp_select_parts
    parts = cmp_select_parts(ctx, op, out, ctx.get)
    cmp = SETP[op.attrs["cmp"]]

    def element(key, o):
        a, b, x, y = (p if isinstance(p, str) else element_of(ctx, p, key, o) for p in parts)
        p, r = ctx.new("pred"), ctx.new("f32")
        o.append(f"setp.{cmp}.f32 {p}, {a}, {b};")
        o.append(f"selp.f32 {r}, {x}, {y}, {p};")
        return r
    return element


def _iota(ctx, op, layout, out):
    """As emit_iota: the thread's row (column) base, offset once; an element's index is one add
    and one convert."""
    from .emit_elementwise import iota_base
    row = op.attrs["axis"] == "row"
    base = iota_base(ctx, op, layout, out)

    def element(key, o):
        b, j, i = key
        step = layout.rows.unit_offset(b, 16) + 8 * (i >> 1) if row else 8 * j + (i & 1)
        n, f = ctx.new("b32"), ctx.new("f32")
        o += [f"add.s32 {n}, {base}, {step};", f"cvt.rn.f32.s32 {f}, {n};"]
        return f
    return element


_ELEMENTS = {"map": _map, "binary": _binary, "broadcast": _broadcast, "cmp_select": _cmp_select, "iota": _iota}

__all__ = ["LazyTile", "LazyElements", "element_of", "emit_deferred"]
