"""``copy_cols``: a column chunk of a shared tile into a register tile (the register-tile backend).

Chunk ``c`` of width ``w`` starts ``c * w * elem_bytes`` bytes into each row of the shared tile.
The row-XOR layout (smem.py) swaps 16-byte chunks only within groups of ``mask + 1`` chunks, so
when a chunk's width is a whole number of those groups, its element (r, k) lies exactly that
many bytes past the tile's element (r, k): the chunk is read as the tile itself with a run-time
byte offset (``SharedTile.dyn``), through the same fragment reads as ``copy``.
"""
from __future__ import annotations

from ..errors import NotAvailableError
from ..ir.ops import CopyCols
from .emit_memory import read_fragments
from .values import SharedTile


def emit_copy_cols(ctx, op: CopyCols) -> list[str]:
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
    out += ctx.sync.read_(src.region)
    view = SharedTile(src.type, geo, src.offset, dyn, src.span)
    ctx.bind(op.result, read_fragments(ctx, view, t, out))
    return out


COPY_COLS_EMITTERS = {CopyCols: emit_copy_cols}
