"""``copy_cols``: a column chunk of a shared tile into a register tile (the register-tile backend).

Chunk ``c`` of width ``w`` starts ``c * w * elem_bytes`` bytes into each row of the shared tile.
The row-XOR layout (smem.py) swaps 16-byte chunks only within groups of ``mask + 1`` chunks, so
when a chunk's width is a whole number of those groups, its element (r, k) lies exactly that
many bytes past the tile's element (r, k): the chunk is read as the tile itself with a run-time
byte offset (``SharedTile.dyn``).

In the mma fragment's column order the reads are ``copy``'s (two columns a lane at a time). In
the contiguous column order (``WarpGrid.contiguous_cols``) a lane's 8 columns of a 32-column
group are one 16-byte chunk of the row, which the XOR layout keeps whole: one ``ld.shared.v4``
per row and group, at 16 x ((the thread's 16-byte chunk) XOR (its row's key)); the row key of
rows g + 8k is the same for every k, so each group's address serves every row of the thread.
"""
from __future__ import annotations

from ..errors import NotAvailableError
from ..ir.ops import CopyCols
from .emit_memory import read_fragments
from .values import RegTile, SharedTile


def emit_copy_cols(ctx, op: CopyCols) -> list[str]:
    return read_chunk(ctx, op)


def read_chunk(ctx, op: CopyCols, hazards: bool = True) -> list[str]:
    """``op``'s chunk of its shared tile into registers; ``hazards``: a barrier where the hazard
    tracker (``ctx.sync``) sees an earlier write of the tile (False: the caller's protocol ordered
    every write before: the general lowering's ``CopyFill`` step, hopper/lower_copy_fill.py)."""
    out: list[str] = []
    src: SharedTile = ctx.get(op.operands[0])
    t = op.result.type
    geo = src.geometry
    width = t.cols * geo.elem_bytes
    group = 16 * (geo.mask + 1)
    if width % group:
        raise NotAvailableError(f"copy_cols: a chunk of {t.cols} columns ({width} B) is not a whole number of "
                                f"the shared tile's {group}-byte swizzle groups", op.span)
    chunk = ctx.get(op.operands[1]).reg
    dyn = ctx.new("b32")
    out.append(f"mul.lo.u32 {dyn}, {chunk}, {width};")
    if src.dyn:
        out.append(f"add.u32 {dyn}, {dyn}, {src.dyn};")
    if hazards:
        out += ctx.sync.read_(src.region)
    view = SharedTile(src.type, geo, src.offset, dyn, src.span)
    if ctx.grid.contiguous_cols:
        ctx.bind(op.result, _read_contiguous(ctx, view, t, out))
    else:
        ctx.bind(op.result, read_fragments(ctx, view, t, out))
    return out


def _read_contiguous(ctx, st: SharedTile, t, out: list[str]) -> RegTile:
    """The thread's part of ``t`` in the contiguous column order, 16 bytes per row and 32-column group."""
    layout = ctx.tile_layout(t)
    geo = st.geometry
    if geo.elem_bytes != 2:
        raise NotAvailableError(f"copy_cols in the contiguous column order reads 16-bit shared tiles, got {st.type}")
    row0 = ctx.row_base(layout.rows)
    key, first = ctx.new("b32"), ctx.new("b32")
    out.append(f"shr.u32 {key}, {row0}, {geo.shift};")
    out.append(f"and.b32 {key}, {key}, {geo.mask};")
    out.append(f"shr.u32 {first}, {ctx.col_base(layout.cols)}, 3;")  # the thread's 16-byte chunk of the row
    base = ctx.new("b32")
    out.append(f"mad.lo.u32 {base}, {row0}, {geo.row_bytes}, {ctx.smem_base(st.dyn, out)};")

    def group(m: int) -> str:
        c16, addr = ctx.new("b32"), ctx.new("b32")
        out.append(f"add.u32 {c16}, {first}, {4 * m};")
        out.append(f"xor.b32 {c16}, {c16}, {key};")
        out.append(f"mad.lo.u32 {addr}, {c16}, 16, {base};")
        return addr
    return read_row_groups(ctx, t, st.type.dtype, layout, group, lambda dr: st.offset + dr * geo.row_bytes, out)


def read_row_groups(ctx, t, src, layout, group, row_bytes, out: list[str]) -> RegTile:
    """The thread's part of ``t`` in the contiguous column order from 16-bit shared memory, one
    ``ld.shared.v4`` per row and 32-column group: ``group(m)`` emits the address of the thread's
    16 bytes of group ``m`` in its first row, ``row_bytes(dr)`` is the immediate to the row ``dr``
    rows below (the same for every group: the swizzle key of rows g + 8k does not change with k).
    The layout of the shared tile is the caller's (smem.py's row-XOR rows here, TMA's swizzled
    panels in the general lowering: hopper/lower_copy_cols.py)."""
    keep_packed = t.dtype == src
    elems, packed = {}, {}
    for m in range(layout.chunks // 4):
        addr = group(m)
        for b in range(layout.bands):
            for h in (0, 1):
                dr = layout.rows.unit_offset(b, 16) + 8 * h
                words = [ctx.new("b32") for _ in range(4)]
                out.append(f"ld.shared.v4.b32 {{{', '.join(words)}}}, [{addr}+{row_bytes(dr)}];")
                for q, w in enumerate(words):
                    if keep_packed:
                        packed[(b, 4 * m + q, h)] = w
                        continue
                    for c in (0, 1):
                        elems[(b, 4 * m + q, 2 * h + c)] = ctx.unpack(src, w, c, out)
    if keep_packed:
        regs = [[[packed[(b, j, h)] for h in (0, 1)] for j in range(layout.chunks)] for b in range(layout.bands)]
        return RegTile(t, layout, regs)
    return ctx.build_tile(t, layout, elems, out)


COPY_COLS_EMITTERS = {CopyCols: emit_copy_cols}
