"""Register tiles straight between global memory and registers, 16 bytes per lane: the loads and
stores of the contiguous column order (``WarpGrid.contiguous_cols``).

In that order a thread holds, for each of its rows (rows g and g+8 of each band) and each group
of 4 chunks m, the 8 contiguous columns ``col_base + 32m .. + 7`` -- one 16-byte vector of a bf16
row (two of an f32 row). A quad of lanes covers 64 contiguous bytes of a row, a warp 8 rows of
them per instruction, every 32-byte sector whole. Each access is one ``ld.global.v4`` /
``st.global.v4`` at the thread's base address plus an immediate (the tensor's row length is a
constant: ``contiguous_columns`` requires it, a multiple of 16 bytes, so a vector is all inside
the tensor or all outside); one predicate per access clips rows, columns and lead coordinates
(loads leave zeros there: clean padding). An e4m3 tensor's row takes a lane's 8 columns as 8
bytes, one ``st.global.v2.b32`` (``Ctx.pack_e4m3`` a pair: a row-wise fp8 quantizer's codes). Every load of a tile is issued before any of its
values is used, so a thread has all of its tile's bytes in flight at once.
"""
from __future__ import annotations

from ..ir.types import E4M3, DType, F32, TileType
from .cache_hints import global_store
from .values import RegTile


def _accesses(layout):
    """(band, half, group of 4 chunks, row offset, column offset) of each 16-byte access."""
    for b in range(layout.bands):
        for h in (0, 1):
            dr = layout.rows.unit_offset(b, 16) + 8 * h
            for m in range(layout.chunks // 4):
                yield b, h, m, dr, 32 * m


def _valid(ctx, view, layout, dr: int, dc: int, out: list[str], guard: str | None = None) -> str:
    r, c = ctx.new("b32"), ctx.new("b32")
    out.append(f"add.s32 {r}, {ctx.row_base(layout.rows)}, {dr};")
    out.append(f"add.s32 {c}, {ctx.col_base(layout.cols)}, {dc};")
    return view.valid(r, c, out, guard)


def _base(ctx, view, layout, out: list[str]) -> str:
    return view.element_address(ctx.row_base(layout.rows), ctx.col_base(layout.cols), out)


def load_direct(ctx, view, t: TileType, src: DType, out: list[str]) -> RegTile:
    """The thread's part of tile ``t`` read from ``view`` (elements of dtype ``src``)."""
    layout = ctx.tile_layout(t)
    base = _base(ctx, view, layout, out)
    es = src.nbytes
    keep_packed = es == 2 and t.dtype == src
    elems, packed = {}, {}
    for b, h, m, dr, dc in _accesses(layout):
        ok = _valid(ctx, view, layout, dr, dc, out)
        imm = (dr * view.const_cols + dc) * es
        if es == 2:
            words = [ctx.new("b32") for _ in range(4)]
            out += [f"mov.b32 {w}, 0;" for w in words]
            out.append(f"@{ok} ld.global.v4.b32 {{{', '.join(words)}}}, [{base}+{imm}];")
            for q, w in enumerate(words):
                if keep_packed:
                    packed[(b, 4 * m + q, h)] = w
                    continue
                for c in (0, 1):
                    elems[(b, 4 * m + q, 2 * h + c)] = ctx.unpack(src, w, c, out)
        else:
            vals = [ctx.new("f32") for _ in range(8)]
            out += [f"mov.f32 {v}, 0f00000000;" for v in vals]
            for half in (0, 1):
                four = ", ".join(vals[4 * half:4 * half + 4])
                out.append(f"@{ok} ld.global.v4.f32 {{{four}}}, [{base}+{imm + 16 * half}];")
            for e, v in enumerate(vals):
                elems[(b, 4 * m + e // 2, 2 * h + e % 2)] = v
    if keep_packed:
        regs = [[[packed[(b, j, h)] for h in (0, 1)] for j in range(layout.chunks)] for b in range(layout.bands)]
        return RegTile(t, layout, regs)
    return ctx.build_tile(t, layout, elems, out)


def store_direct(ctx, view, tile: RegTile, dst: DType, out: list[str]) -> None:
    """Write the thread's part of ``tile`` into ``view`` (converted to ``dst``), one replica only."""
    layout = tile.layout
    base = _base(ctx, view, layout, out)
    es = dst.nbytes
    guard = ctx.writer(layout.rows, layout.cols, None) if layout.rows.replicated or layout.cols.replicated else None
    st, hint = global_store(ctx)
    for b, h, m, dr, dc in _accesses(layout):
        ok = _valid(ctx, view, layout, dr, dc, out, guard)
        imm = (dr * view.const_cols + dc) * es
        if es == 2:
            words = []
            for q in range(4):
                j = 4 * m + q
                if tile.packed and tile.type.dtype == dst:
                    words.append(tile.regs[b][j][h])
                else:
                    lo, hi = (ctx.tile_f32(tile, b, j, 2 * h + c, out) for c in (0, 1))
                    words.append(ctx.pack(dst, lo, hi, out))
            out.append(f"@{ok} {st}.v4.b32 [{base}+{imm}], {{{', '.join(words)}}}{hint};")
        elif es == 1:  # e4m3: the 8 columns rounded into 8 bytes, lower columns in lower bytes
            assert dst == E4M3
            vals = [ctx.tile_f32(tile, b, 4 * m + e // 2, 2 * h + e % 2, out) for e in range(8)]
            halves = [ctx.pack_e4m3(vals[2 * q], vals[2 * q + 1], out) for q in range(4)]
            words = [ctx.new("b32") for _ in range(2)]
            out += [f"mov.b32 {words[q]}, {{{halves[2 * q]}, {halves[2 * q + 1]}}};" for q in range(2)]
            out.append(f"@{ok} {st}.v2.b32 [{base}+{imm}], {{{', '.join(words)}}}{hint};")
        else:
            assert dst == F32
            vals = [ctx.tile_f32(tile, b, 4 * m + e // 2, 2 * h + e % 2, out) for e in range(8)]
            for half in (0, 1):
                out.append(f"@{ok} {st}.v4.f32 [{base}+{imm + 16 * half}], "
                           f"{{{', '.join(vals[4 * half:4 * half + 4])}}}{hint};")
