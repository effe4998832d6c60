"""Emitters for elementwise ops on register tiles and vectors: zeros/fill, maps, arithmetic with
tiles, vectors or broadcast scalars, dtype conversion, row/column broadcasts, the causal mask, index
tiles (iota) and the elementwise compare-and-select.

All of them work element by element in the fragment layout, so no data moves between threads.
bf16/f16 tiles are unpacked to f32, computed in f32 and rounded back (round to nearest even) once
per op; a scalar combined with a tile is first rounded to the tile's dtype.
"""
from __future__ import annotations

from collections.abc import Mapping

from ..ir.ops import BROADCAST_OPS, BINARY_OPS, UNARY_OPS, CausalMask, CmpSelect, Cvt, Fill, Iota, Zeros
from ..ir.types import F32, DTYPES, ScalarType, TileType
from .mathfn import binary_f32, unary_f32
from .ptx import f32_imm
from .emit_fused import LazyElements, LazyTile
from .values import RegTile, RegVec


def vec_keys(vec_type, split):
    """The (unit, k) keys of a thread's vector registers: cv (band, half), rv (chunk, column)."""
    return [(u, k) for u in range(split.per_warp) for k in (0, 1)]


def _elements(ctx, rep, out: list[str]):
    """{key: f32 register} for a RegTile ((b, j, i) keys) or RegVec ((unit, k) keys); for a
    deferred tile (emit_fused.LazyTile) a mapping that emits each element when it is read."""
    if isinstance(rep, LazyTile):
        return LazyElements(rep, out)
    if isinstance(rep, RegTile):
        return {(b, j, i): ctx.tile_f32(rep, b, j, i, out) for b, j, i in rep.layout.elements()}
    return {(u, k): rep.regs[u][k] for u, k in vec_keys(rep.type, rep.split)}


def make_value(ctx, t, elems: dict, out: list[str]):
    """A RegTile or RegVec of type ``t`` from f32 element registers (rounded to ``t``'s dtype)."""
    if isinstance(t, TileType):
        return ctx.build_tile(t, ctx.tile_layout(t), elems, out)
    split = ctx.vec_split(t)
    regs = [[ctx.round_f32(t.dtype, elems[(u, k)], out) for k in (0, 1)] for u in range(split.per_warp)]
    return RegVec(t, split, regs)


def emit_fill(ctx, op) -> list[str]:
    value = 0.0 if isinstance(op, Zeros) else float(op.attrs["value"])
    t = op.result.type
    if t.dtype != F32:
        from .ptx import f32_round
        value = f32_round(value)
    out: list[str] = []
    if isinstance(t, TileType):
        layout = ctx.tile_layout(t)
        elems = {}
        for key in layout.elements():
            r = ctx.new("f32")
            out.append(f"mov.f32 {r}, {f32_imm(value)};")
            elems[key] = r
    else:
        elems = {}
        for key in vec_keys(t, ctx.vec_split(t)):
            r = ctx.new("f32")
            out.append(f"mov.f32 {r}, {f32_imm(value)};")
            elems[key] = r
    ctx.bind(op.result, make_value(ctx, t, elems, out))
    return out


def emit_map(ctx, op) -> list[str]:
    out: list[str] = []
    src = _elements(ctx, ctx.get(op.operands[0]), out)
    res = {key: unary_f32(ctx, op.NAME, x, out) for key, x in src.items()}
    ctx.bind(op.result, make_value(ctx, op.result.type, res, out))
    return out


def emit_binary(ctx, op) -> list[str]:
    out: list[str] = []
    a_v, b_v = op.operands
    t = op.result.type
    a_s, b_s = isinstance(a_v.type, ScalarType), isinstance(b_v.type, ScalarType)
    tile_v = b_v if a_s else a_v
    elems = _elements(ctx, ctx.get(tile_v), out)
    if a_s or b_s:
        scalar = ctx.round_f32(t.dtype, ctx.scalar_f32(a_v if a_s else b_v, out), out)
        name = op.NAME
        if b_s and name == "div":
            scalar, name = _reciprocal(ctx, scalar, out), "mul"
        res = {k: binary_f32(ctx, name, scalar, x, out) if a_s else binary_f32(ctx, name, x, scalar, out)
               for k, x in elems.items()}
    else:
        other = _elements(ctx, ctx.get(b_v), out)
        res = {k: binary_f32(ctx, op.NAME, x, other[k], out) for k, x in elems.items()}
    ctx.bind(op.result, make_value(ctx, t, res, out))
    return out


def emit_cvt(ctx, op) -> list[str]:
    out: list[str] = []
    src = ctx.get(op.operands[0])
    if src.type.dtype == DTYPES[op.attrs["dtype"]]:
        ctx.bind(op.result, src)
        return out
    ctx.bind(op.result, make_value(ctx, op.result.type, _elements(ctx, src, out), out))
    return out


def _reciprocal(ctx, x: str, out: list[str]) -> str:
    r = ctx.new("f32")
    out.append(f"rcp.rn.f32 {r}, {x};")
    return r


def emit_broadcast(ctx, op) -> list[str]:
    """Division by a broadcast vector multiplies by its reciprocal (rcp.rn, once per vector element)."""
    out: list[str] = []
    tile = ctx.get(op.operands[0])
    vec = ctx.get(op.operands[1])
    fn, vregs = op.FN, vec.regs
    if fn == "div":
        fn, vregs = "mul", [[_reciprocal(ctx, x, out) for x in unit] for unit in vec.regs]
    res = {}
    for (b, j, i), x in _elements(ctx, tile, out).items():
        v = vregs[b][i >> 1] if op.AXIS == "row" else vregs[j][i & 1]
        res[(b, j, i)] = binary_f32(ctx, fn, x, v, out)
    ctx.bind(op.result, make_value(ctx, op.result.type, res, out))
    return out


def emit_causal_mask(ctx, op) -> list[str]:
    """(r, c) := fill where k0 + c > q0 + r, i.e. (c_off - r_off) > q0 - k0 + row_base - col_base."""
    out: list[str] = []
    tile = ctx.get(op.operands[0])
    q0, k0 = (ctx.get(v).reg for v in op.operands[1:])
    fill = f32_imm(float(op.attrs.get("fill", float("-inf"))))
    layout = tile.layout
    d = ctx.new("b32")
    out.append(f"sub.s32 {d}, {q0}, {k0};")
    out.append(f"add.s32 {d}, {d}, {ctx.row_base(layout.rows)};")
    out.append(f"sub.s32 {d}, {d}, {ctx.col_base(layout.cols)};")
    res = {}
    for (b, j, i), x in _elements(ctx, tile, out).items():
        k = 8 * j + (i & 1) - layout.rows.unit_offset(b, 16) - 8 * (i >> 1)
        p, r = ctx.new("pred"), ctx.new("f32")
        out.append(f"setp.lt.s32 {p}, {d}, {k};")
        out.append(f"selp.f32 {r}, {fill}, {x}, {p};")
        res[(b, j, i)] = r
    ctx.bind(op.result, make_value(ctx, op.result.type, res, out))
    return out


def iota_base(ctx, op, layout, out: list[str]) -> str:
    """The thread's first row (``axis = row``) or column index of an ``iota``'s tile, plus its
    offset operand where it has one."""
    base = ctx.row_base(layout.rows) if op.attrs["axis"] == "row" else ctx.col_base(layout.cols)
    if op.operands:
        shifted = ctx.new("b32")
        out.append(f"add.s32 {shifted}, {base}, {ctx.get(op.operands[0]).reg};")
        base = shifted
    return base


def emit_iota(ctx, op) -> list[str]:
    """Element (b, j, i) sits at row row_base + 16b + 8(i >> 1) and column col_base + 8j + (i & 1);
    the distinct indices are computed once (2 per band or per chunk), then copied per element."""
    out: list[str] = []
    t = op.result.type
    layout = ctx.tile_layout(t)
    row = op.attrs["axis"] == "row"
    base = iota_base(ctx, op, layout, out)
    units = layout.bands if row else layout.chunks
    index = {}
    for u in range(units):
        for h in (0, 1):
            step = layout.rows.unit_offset(u, 16) + 8 * h if row else 8 * u + h
            n, f = ctx.new("b32"), ctx.new("f32")
            out.append(f"add.s32 {n}, {base}, {step};")
            out.append(f"cvt.rn.f32.s32 {f}, {n};")
            index[(u, h)] = f
    elems = {}
    for b, j, i in layout.elements():
        r = ctx.new("f32")
        out.append(f"mov.f32 {r}, {index[(b, i >> 1)] if row else index[(j, i & 1)]};")
        elems[(b, j, i)] = r
    ctx.bind(op.result, make_value(ctx, t, elems, out))
    return out


SETP = {"lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "eq": "eq", "ne": "neu"}
"""cmp_select's comparisons: ordered (false with a NaN) except ne, true with a NaN (as in C)."""


def cmp_select_parts(ctx, op, out: list[str], tile) -> list:
    """The operands of a ``cmp_select``: a scalar rounded to its partner's dtype (a to b's, x to
    the result's) as one f32 register, a tile as ``tile(value)`` (its elements, or the fused
    emitter's lazy tile: emit_fused.py)."""
    vals = list(op.operands)
    cmp_dtype = next((v.type.dtype for v in vals[:2] if not isinstance(v.type, ScalarType)), F32)
    parts = []
    for k, v in enumerate(vals):
        if isinstance(v.type, ScalarType):
            parts.append(ctx.round_f32(cmp_dtype if k < 2 else op.result.type.dtype, ctx.scalar_f32(v, out), out))
        else:
            parts.append(tile(v))
    return parts


def emit_cmp_select(ctx, op) -> list[str]:
    """``a cmp b ? x : y`` per element: one setp and one selp. A scalar operand is rounded to its
    partner's dtype first (a to b's, x to the result's), as the binary ops do."""
    out: list[str] = []
    t = op.result.type
    parts = cmp_select_parts(ctx, op, out, lambda v: _elements(ctx, ctx.get(v), out))
    keys = next(p for p in parts if isinstance(p, Mapping)).keys()
    pick = [(lambda key, p=p: p[key]) if isinstance(p, Mapping) else (lambda key, p=p: p) for p in parts]
    res = {}
    for key in keys:
        a, b, x, y = (f(key) for f in pick)
        p, r = ctx.new("pred"), ctx.new("f32")
        out.append(f"setp.{SETP[op.attrs['cmp']]}.f32 {p}, {a}, {b};")
        out.append(f"selp.f32 {r}, {x}, {y}, {p};")
        res[key] = r
    ctx.bind(op.result, make_value(ctx, t, res, out))
    return out


REGISTER_EMITTERS = {Zeros: emit_fill, Fill: emit_fill, Cvt: emit_cvt, CausalMask: emit_causal_mask,
                     Iota: emit_iota, CmpSelect: emit_cmp_select}
for _cls in UNARY_OPS:
    REGISTER_EMITTERS[_cls] = emit_map
for _cls in BINARY_OPS:
    if _cls.KIND == "arith":
        REGISTER_EMITTERS[_cls] = emit_binary
for _cls in BROADCAST_OPS:
    REGISTER_EMITTERS[_cls] = emit_broadcast
