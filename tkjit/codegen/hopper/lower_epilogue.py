"""The staged epilogue of the general lowering: a register tile stored through shared memory and
TMA, where smem-plan planned a staging tile for the store (its ``staging`` / ``staging_cols``).

Each consumer stmatrix-es its rows, 64-column panels of ``cols`` columns per round (two halves in
turn when a round holds an even number of panels), into its share of the staging tile, and one
thread TMA-stores each panel; the stores run on while the consumer goes on to the next tile
(``epilogue.store_staged``: before a round writes a half, the stores still reading it have read
it). TMA clips the boxes at the tensor's edges. Otherwise -- no staging planned, too little of it
for a consumer's rows, a 32-bit tensor, a replicated layout -- the tile is stored from registers
(``lower_consumer._fragments``).
"""
from __future__ import annotations

from ...ir.ops import Store
from ...ir.types import BF16, F16, F32, TileType
from . import tma
from .epilogue import PANEL_COLS, Staging, staging_lanes, store_staged

FIRST_STAGING_BARRIER = 2
"""Named barriers: 0 the CTA's, 1 every consumer's (ConsumerSync), 2 + c consumer c's staging."""


class Lines:
    """The Builder interface of epilogue.py over an emission context: registers from the
    context's namer, lines into ``out``."""

    def __init__(self, ctx, out: list[str]):
        self.ctx, self.out = ctx, out

    def reg(self, kind: str = "b32") -> str:
        return self.ctx.new(kind)

    def pred(self) -> str:
        return self.ctx.new("pred")

    def __call__(self, *lines: str) -> None:
        self.out.extend(lines)

    def label(self, what: str) -> str:
        return self.ctx.label(what)

    def place(self, label: str) -> None:
        self.out.append(f"{label}:")


def staging_columns(op: Store, consumers: int, whole_tiles: bool = False) -> int:
    """Columns per round of the staging smem-plan planned for ``op``, or 0 to store registers.
    ``consumers``: those sharing each tile's rows; ``whole_tiles``: ping-pong, where each of the
    two consumers has a staging of its own for all its rows."""
    t: TileType = op.operands[1].type
    g = op.operands[0].type
    if "smem" not in op.attrs or op.attrs.get("staging") not in ("tile", "chunks"):
        return 0
    if g.dtype not in (BF16, F16) or t.dtype not in (BF16, F16, F32) or t.cols % PANEL_COLS:
        return 0
    if t.rows % (64 * consumers) or op.attrs["smem"] % 1024:
        return 0
    rows = t.rows // consumers
    cols = t.cols if op.attrs["staging"] == "tile" else int(op.attrs.get("staging_cols", PANEL_COLS))
    copies, chunk_rows = (2, rows) if whole_tiles else (1, 64)
    planned = (copies * t.rows * t.cols * 2 if op.attrs["staging"] == "tile"
               else copies * consumers * chunk_rows * cols * 2)
    if copies * consumers * rows * cols * 2 > planned or t.cols % cols:
        return 0
    return cols


def emit_staged(role, ctx, op: Store, tile, cols: int) -> list[str]:
    """Store register tile ``tile`` through consumer ``role.index``'s staging (see the module)."""
    out: list[str] = []
    b = Lines(ctx, out)
    k = role.k
    t: TileType = tile.type
    g = op.operands[0].type
    slabs = t.rows // 64 // role.owners
    tmap = k.store_map(op.operands[0])
    base, lane, warp, barrier = b.reg(), b.reg(), b.reg(), b.reg()
    b(f"mad.lo.u32 {base}, {role.index}, {slabs * 64 * cols * 2}, {k.smem};",
      f"add.u32 {base}, {base}, {op.attrs['smem']};",
      f"and.b32 {lane}, {k.tid_wg}, 31;", f"shr.u32 {warp}, {k.tid_wg}, 5;",
      f"add.u32 {barrier}, {role.index}, {FIRST_STAGING_BARRIER};")
    raw, addr = b.reg("b64"), b.reg("b64")
    b(*tma.generic_address(tmap.symbol, raw, addr))
    staging = Staging(base, staging_lanes(b, base, lane, warp), barrier, role.leader, cols, addr)
    coords = [ctx.get(v).reg for v in op.variadic()]
    row0, col0 = b.reg(), b.reg()
    b(f"mul.lo.s32 {row0}, {coords[-2]}, {t.rows};", f"mad.lo.s32 {row0}, {role.share}, {slabs * 64}, {row0};",
      f"mul.lo.s32 {col0}, {coords[-1]}, {t.cols};")
    store_staged(b, staging, [None] * slabs, 16, t.cols, row0, col0, g.dtype.name,
                 packed=_packed(ctx, tile, g.dtype, out), lead=tuple(reversed(coords[:-2])))
    role.staged = True
    return out


def _packed(ctx, tile, dtype, out: list[str]) -> dict[tuple[int, int], list[str]]:
    """The tile as stmatrix.x4 operands per (slab, first column of 16): packed 16-bit pairs."""
    layout = tile.layout
    chunks = {}
    for u in range(layout.bands):
        for j in range(0, layout.chunks, 2):
            regs = []
            for jj in (j, j + 1):
                for h in (0, 1):
                    if tile.packed and tile.type.dtype == dtype:
                        regs.append(tile.regs[u][jj][h])
                    else:
                        lo, hi = (ctx.tile_f32(tile, u, jj, i, out) for i in (2 * h, 2 * h + 1))
                        regs.append(ctx.pack(dtype, lo, hi, out))
            chunks[(u, 8 * j)] = regs
    return chunks


def drain(role) -> list[str]:
    """Before the consumer exits: its last TMA stores have finished with the staging tile."""
    if not getattr(role, "staged", False):
        return []
    return [f"@{role.leader} {tma.store_wait(0, read_only=False)}"]


__all__ = ["staging_columns", "emit_staged", "drain", "FIRST_STAGING_BARRIER", "tma"]
