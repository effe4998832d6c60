"""Emitters for loads, stores and copies between global memory, shared tiles and registers.

* global → shared tile: a cooperative coalesced copy (globalmem.copy_in);
* global → register tile: the same copy into a scratch tile, then each thread reads its fragment
  (``ld.shared.b32`` pairs for 16-bit, ``ld.shared.v2.f32`` for f32), converting the dtype;
* register tile → global: fragments into a scratch tile of the tensor's dtype, then
  globalmem.copy_out (16-byte coalesced, clipped);
* vectors: one predicated element access per owned element (cv: rows g, g+8 of each band;
  rv: columns 2t, 2t+1 of each chunk), stores by one replica only;
* shared ↔ register copies: fragment reads/writes; dirty padding is zeroed on the way into
  shared memory, so shared tiles never hold non-zero padding.
"""
from __future__ import annotations

from ..errors import NotAvailableError
from ..ir.ops import Copy, Load, Store
from ..ir.types import BF16, F16, F32, TileType, VectorType, describe
from .emit_elementwise import _elements, make_value
from .direct import load_direct, store_direct
from .globalmem import GlobalView, copy_in, copy_out
from .layout import AxisSplit
from .smem import Geometry
from .values import RegTile, RegVec, SharedTile


def _is_rt(t) -> bool:
    return isinstance(t, TileType) and t.space == "rt"


def memory_scratch_bytes(op, grid) -> int:
    """Loads into and stores from register tiles stage the tile in shared memory (in the
    contiguous column order they go straight between global memory and registers)."""
    if grid.contiguous_cols:
        return 0
    if isinstance(op, Load) and _is_rt(op.result.type):
        t = op.result.type
        return t.rows * t.cols * op.operands[0].type.dtype.nbytes
    if isinstance(op, Store) and _is_rt(op.operands[1].type):
        t = op.operands[1].type
        return t.rows * t.cols * op.operands[0].type.dtype.nbytes
    return 0


# ------------------------------------------------------------------ fragments

def read_fragments(ctx, st: SharedTile, t: TileType, out: list[str]) -> RegTile:
    """The thread's fragment of shared tile ``st`` as a register tile of type ``t``."""
    layout = ctx.tile_layout(t)
    geo = st.geometry
    pat = ctx.fragment_pattern(layout, geo)
    es = geo.elem_bytes
    same = st.type.dtype == t.dtype and es == 2
    elems, packed = {}, {}
    for b in range(layout.bands):
        for j in range(layout.chunks):
            for h in (0, 1):
                addr = ctx.address(pat, st.offset, layout.rows.unit_offset(b, 16) + 8 * h, j * (8 * es // 16), out, st.dyn)
                if es == 2:
                    r = ctx.new("b32")
                    out.append(f"ld.shared.b32 {r}, {addr};")
                    if same:
                        packed[(b, j, h)] = r
                        continue
                    for c in (0, 1):
                        elems[(b, j, 2 * h + c)] = ctx.unpack(st.type.dtype, r, c, out)
                else:
                    x0, x1 = ctx.new("f32"), ctx.new("f32")
                    out.append(f"ld.shared.v2.f32 {{{x0}, {x1}}}, {addr};")
                    elems[(b, j, 2 * h)], elems[(b, j, 2 * h + 1)] = x0, x1
    if same:
        regs = [[[packed[(b, j, h)] for h in (0, 1)] for j in range(layout.chunks)] for b in range(layout.bands)]
        return RegTile(t, layout, regs)
    return ctx.build_tile(t, layout, elems, out)


def write_fragments(ctx, tile: RegTile, st: SharedTile, out: list[str]) -> None:
    """Store the thread's fragment into shared tile ``st`` (converting to its dtype)."""
    layout = tile.layout
    geo = st.geometry
    pat = ctx.fragment_pattern(layout, geo)
    es = geo.elem_bytes
    dst = st.type.dtype
    guard = ""
    if layout.rows.replicated or layout.cols.replicated:
        guard = f"@{ctx.writer(layout.rows, layout.cols, None)} "
    for b in range(layout.bands):
        for j in range(layout.chunks):
            for h in (0, 1):
                addr = ctx.address(pat, st.offset, layout.rows.unit_offset(b, 16) + 8 * h, j * (8 * es // 16), out, st.dyn)
                if es == 2:
                    if tile.packed and tile.type.dtype == dst:
                        r = tile.regs[b][j][h]
                    else:
                        lo, hi = (ctx.tile_f32(tile, b, j, 2 * h + c, out) for c in (0, 1))
                        r = ctx.pack(dst, lo, hi, out)
                    out.append(f"{guard}st.shared.b32 {addr}, {r};")
                elif dst == F32:
                    lo, hi = (ctx.tile_f32(tile, b, j, 2 * h + c, out) for c in (0, 1))
                    out.append(f"{guard}st.shared.v2.f32 {addr}, {{{lo}, {hi}}};")
                else:
                    raise NotAvailableError(f"cannot write register tiles into {describe(st.type)}")


def zero_padding(ctx, op, tile: RegTile, axes: list[tuple[str, object]], what: str,
                 out: list[str]) -> RegTile:
    """A copy of ``tile`` whose padding along ``axes`` ((which, Axis) pairs) is exactly zero."""
    layout = tile.layout
    rows = cols = None
    for which, axis in axes:
        if which == "rows":
            rows = ctx.axis_preds(axis, layout.rows, "rows", what, op, out)
        else:
            cols = ctx.axis_preds(axis, layout.cols, "cols", what, op, out)
    if not tile.packed:
        elems = {}
        for b, j, i in layout.elements():
            x = tile.regs[b][j][i]
            for preds, key in ((rows, (b, i >> 1)), (cols, (j, i & 1))):
                if preds is not None:
                    y = ctx.new("f32")
                    out.append(f"selp.f32 {y}, {x}, 0f00000000, {preds[key]};")
                    x = y
            elems[(b, j, i)] = x
        return ctx.build_tile(tile.type, layout, elems, out)
    col_words = {}
    for j in range(layout.chunks):
        if cols is None:
            col_words[j] = "-1"
            continue
        lo, hi, w = ctx.new("b32"), ctx.new("b32"), ctx.new("b32")
        out.append(f"selp.b32 {lo}, 0x0000FFFF, 0, {cols[(j, 0)]};")
        out.append(f"selp.b32 {hi}, 0xFFFF0000, 0, {cols[(j, 1)]};")
        out.append(f"or.b32 {w}, {lo}, {hi};")
        col_words[j] = w
    regs = []
    for b in range(layout.bands):
        band = []
        for j in range(layout.chunks):
            pair = []
            for h in (0, 1):
                word = col_words[j]
                if rows is not None:
                    m = ctx.new("b32")
                    out.append(f"selp.b32 {m}, {word}, 0, {rows[(b, h)]};")
                    word = m
                r = ctx.new("b32")
                out.append(f"and.b32 {r}, {tile.regs[b][j][h]}, {word};")
                pair.append(r)
            band.append(pair)
        regs.append(band)
    return RegTile(tile.type, layout, regs)


def dirty_axes(pad) -> list[tuple[str, object]]:
    return [(w, a) for w, a in (("rows", pad.rows), ("cols", pad.cols)) if a is not None and not a.clean]


# ------------------------------------------------------------------ vectors

def _vector_positions(ctx, t: VectorType, split: AxisSplit) -> tuple[str, dict]:
    """The thread's base index register and {(unit, k): offset} of its vector elements."""
    if t.kind == "cv":
        return ctx.row_base(split), {(b, h): split.unit_offset(b, 16) + 8 * h for b in range(split.per_warp) for h in (0, 1)}
    return ctx.col_base(split), {(j, c): ctx.grid.col_offset(j, c) for j in range(split.per_warp) for c in (0, 1)}


def _load_vector(ctx, op, out: list[str]) -> RegVec:
    g, t = op.operands[0].type, op.result.type
    view = GlobalView(ctx, op.operands[0], op.variadic(), None, t.length, out)
    split = ctx.vec_split(t)
    base, positions = _vector_positions(ctx, t, split)
    es = g.dtype.nbytes
    from .vector_direct import load_vector_direct, vector_loads_direct
    if vector_loads_direct(ctx, op.operands[0], t, split):
        return make_value(ctx, t, load_vector_direct(ctx, view, g, split, base, out), out)
    from .vector_pairs import load_vector_paired, vector_loads_paired
    if vector_loads_paired(ctx, op.operands[0], t, split, positions):
        return make_value(ctx, t, load_vector_paired(ctx, view, g, base, positions, out), out)
    elems = {}
    for key, off in positions.items():
        idx = ctx.new("b32")
        out.append(f"add.s32 {idx}, {base}, {off};")
        ok = view.valid(None, idx, out)
        addr = view.element_address(None, idx, out)
        f = ctx.new("f32")
        if es == 4:
            out.append(f"mov.f32 {f}, 0f00000000;")
            out.append(f"@{ok} ld.global.f32 {f}, [{addr}];")
        elif g.dtype in (BF16, F16):
            h = ctx.new("b16")
            out.append(f"mov.b16 {h}, 0;")
            out.append(f"@{ok} ld.global.b16 {h}, [{addr}];")
            out.append(f"cvt.f32.{'bf16' if g.dtype == BF16 else 'f16'} {f}, {h};")
        else:
            raise NotAvailableError(f"load: vectors of {g.dtype} are not supported yet", op.span)
        elems[key] = f
    return make_value(ctx, t, elems, out)


def _store_vector(ctx, op, vec: RegVec, out: list[str]) -> None:
    g = op.operands[0].type
    t = vec.type
    view = GlobalView(ctx, op.operands[0], op.variadic(), None, t.length, out)
    base, positions = _vector_positions(ctx, t, vec.split)
    if t.kind == "cv":
        other = AxisSplit(1, 1, 1, ctx.grid.wc)
        writer = ctx.writer(vec.split, other, "t0")
    else:
        other = AxisSplit(1, 1, 1, ctx.grid.wr)
        writer = ctx.writer(other, vec.split, "g0")
    for (u, k), off in positions.items():
        idx = ctx.new("b32")
        out.append(f"add.s32 {idx}, {base}, {off};")
        ok = view.valid(None, idx, out, writer)
        addr = view.element_address(None, idx, out)
        x = vec.regs[u][k]
        if g.dtype == F32:
            out.append(f"@{ok} st.global.f32 [{addr}], {x};")
        elif g.dtype in (BF16, F16):
            h = ctx.new("b16")
            out.append(f"cvt.rn.{'bf16' if g.dtype == BF16 else 'f16'}.f32 {h}, {x};")
            out.append(f"@{ok} st.global.b16 [{addr}], {h};")
        else:
            raise NotAvailableError(f"store: vectors into {g.dtype} tensors are not supported yet", op.span)


# ------------------------------------------------------------------ the emitters

def _scratch_tile(ctx, op, t: TileType, dtype) -> SharedTile:
    region = ctx.plan.of_op(op)
    st_type = TileType("st", dtype, t.rows, t.cols)
    return SharedTile(st_type, Geometry.of_tile(st_type), region.offset)


def emit_load(ctx, op) -> list[str]:
    out: list[str] = []
    t = op.result.type
    param, coords = op.operands[0], op.variadic()
    if isinstance(t, VectorType):
        ctx.bind(op.result, _load_vector(ctx, op, out))
        return out
    if id(op) in ctx.prefetched:            # a pipelined load: the loop fetched it ahead
        ctx.bind(op.result, ctx.prefetched[id(op)])
        return [f"// {t} prefetched by the loop pipeline"]
    view = GlobalView(ctx, param, coords, t.rows, t.cols, out)
    if t.space == "st":
        st = SharedTile(t, Geometry.of_tile(t), ctx.plan.of_value(op.result).offset)
        out += ctx.sync.write(st.region)
        deferred = op.attrs.get("wait") == "deferred"
        copy_in(ctx, view, st.geometry, st.offset, out, wait=not deferred)
        if deferred:  # its copies stay in flight: awaited by the next wait (Ctx.await_copies)
            ctx.copies_in_flight.add(id(op.result))
            ctx.in_flight_regions[id(op.result)] = st.region
        else:  # cp.async.wait_all: every earlier copy has landed too
            ctx.copies_landed()
        ctx.bind(op.result, st)
        return out
    if ctx.grid.contiguous_cols:
        ctx.bind(op.result, load_direct(ctx, view, t, param.type.dtype, out))
        return out
    stage = _scratch_tile(ctx, op, t, param.type.dtype)
    out += ctx.sync.write(stage.region)
    copy_in(ctx, view, stage.geometry, stage.offset, out)
    out += ctx.sync.read_(stage.region)
    tile = read_fragments(ctx, stage, t, out)
    ctx.bind(op.result, tile)
    return out


def emit_store(ctx, op) -> list[str]:
    out: list[str] = []
    param, value = op.operands[0], op.operands[1]
    coords = op.variadic()
    rep = ctx.get(value)
    if isinstance(rep, RegVec):
        _store_vector(ctx, op, rep, out)
        return out
    t = value.type
    view = GlobalView(ctx, param, coords, t.rows, t.cols, out)
    if isinstance(rep, SharedTile):
        if rep.type.dtype != param.type.dtype:
            raise NotAvailableError(f"store: a {rep.type.dtype} shared tile into a {param.type.dtype} "
                                    "tensor; copy it into a register tile first", op.span)
        out += ctx.sync.read_(rep.region)
        copy_out(ctx, view, rep.geometry, rep.offset, out, rep.dyn)
        return out
    if ctx.grid.contiguous_cols:
        store_direct(ctx, view, rep, param.type.dtype, out)
        return out
    stage = _scratch_tile(ctx, op, t, param.type.dtype)
    out += ctx.sync.write(stage.region)
    write_fragments(ctx, rep, stage, out)
    out += ctx.sync.read_(stage.region)
    copy_out(ctx, view, stage.geometry, stage.offset, out)
    return out


def _copy_shared(ctx, src: SharedTile, dst: SharedTile, out: list[str]) -> None:
    geo = src.geometry
    total = geo.rows * geo.chunks_per_row
    src_base, dst_base = ctx.smem_base(src.dyn, out), ctx.smem_base(dst.dyn, out)
    threads = ctx.grid.threads
    for k in range(-(-total // threads)):
        i, a, b, p = ctx.new("b32"), ctx.new("b32"), ctx.new("b32"), ctx.new("pred")
        out.append(f"add.u32 {i}, {ctx.tid('tid')}, {k * threads};")
        out.append(f"setp.lt.u32 {p}, {i}, {total};")
        out.append(f"shl.b32 {i}, {i}, 4;")
        out.append(f"add.u32 {a}, {i}, {src_base};")
        out.append(f"add.u32 {b}, {i}, {dst_base};")
        words = [ctx.new("b32") for _ in range(4)]
        out.append(f"@{p} ld.shared.v4.b32 {{{', '.join(words)}}}, [{a}+{src.offset}];")
        out.append(f"@{p} st.shared.v4.b32 [{b}+{dst.offset}], {{{', '.join(words)}}};")


def emit_copy(ctx, op) -> list[str]:
    out: list[str] = []
    src = ctx.get(op.operands[0])
    t = op.result.type
    if isinstance(t, TileType) and t.space == "st":
        dst = SharedTile(t, Geometry.of_tile(t), ctx.plan.of_value(op.result).offset)
        if isinstance(src, SharedTile):
            out += ctx.sync.read_(src.region)
            out += ctx.sync.write(dst.region)
            _copy_shared(ctx, src, dst, out)
        else:
            dirty = dirty_axes(ctx.pads[op.operands[0]])
            if dirty:
                src = zero_padding(ctx, op, src, dirty, "the copied tile", out)
            out += ctx.sync.write(dst.region)
            write_fragments(ctx, src, dst, out)
        ctx.bind(op.result, dst)
        return out
    if isinstance(src, SharedTile):
        out += ctx.sync.read_(src.region)
        ctx.bind(op.result, read_fragments(ctx, src, t, out))
        return out
    ctx.bind(op.result, make_value(ctx, t, _elements(ctx, src, out), out))
    return out


MEMORY_EMITTERS = {Load: emit_load, Store: emit_store, Copy: emit_copy}
MEMORY_SCRATCH = {Load: memory_scratch_bytes, Store: memory_scratch_bytes}
