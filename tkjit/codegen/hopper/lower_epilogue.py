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

EPILOGUE_MARK = "// epilogue sync: stmatrix + TMA store rounds (a consumer's named barrier, bulk-store waits)"
"""Brackets the staged epilogue's synchronization, which is not a protocol step yet."""
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


def staging_for(role, op: Store, cols: int) -> Staging:
    """Consumer ``role.index``'s staging of ``op``: its base, stmatrix lanes, named barrier and
    the store's tensor map, in registers set once when the role starts (not per tile: inside the
    K loop, where a deferred store runs, every register is needed)."""
    k, b = role.k, role.b
    t: TileType = op.operands[1].type
    slabs = t.rows // 64 // role.owners
    tmap = k.store_map(op.operands[0])
    base, lane, warp, barrier = b.reg(), b.reg(), b.reg(), b.reg()
    b(f"mad.lo.u32 {base}, {role.index}, {slabs * 64 * cols * 2}, {k.smem};",
      f"add.u32 {base}, {base}, {op.attrs['smem']};",
      f"and.b32 {lane}, {k.tid_wg}, 31;", f"shr.u32 {warp}, {k.tid_wg}, 5;",
      f"add.u32 {barrier}, {role.index}, {FIRST_STAGING_BARRIER};")
    raw, addr = b.reg("b64"), b.reg("b64")
    b(*tma.generic_address(tmap.symbol, raw, addr))
    return Staging(base, staging_lanes(b, base, lane, warp), barrier, role.leader, cols, addr)


def emit_staged(role, ctx, op: Store, tile, staging: Staging, coords: list[str] | None = None) -> list[str]:
    """Store register tile ``tile`` through ``staging`` (see the module), at the store's
    coordinates (or the registers ``coords``)."""
    out: list[str] = []
    b = Lines(ctx, out)
    t: TileType = tile.type
    g = op.operands[0].type
    slabs = t.rows // 64 // role.owners
    coords = coords or [ctx.get(v).reg for v in op.variadic()]
    row0, col0 = b.reg(), b.reg()
    b(f"mul.lo.s32 {row0}, {coords[-2]}, {t.rows};", f"mad.lo.s32 {row0}, {role.share}, {slabs * 64}, {row0};",
      f"mul.lo.s32 {col0}, {coords[-1]}, {t.cols};")
    out.append(EPILOGUE_MARK)
    store_staged(b, staging, slabs, t.cols, row0, col0, _packed(ctx, tile, g.dtype, out),
                 lead=tuple(reversed(coords[:-2])))
    out.append("// end epilogue sync")
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


class Deferred:
    """The deferred epilogue: a tile's staged store waits, packed in registers of its own, until
    the next tile's first wgmma group is issued (so the tensor cores work under the stores), or
    until the tile loop ends. The lowering chooses it for a persistent kernel whose tile ends in
    a staged store of a 16-bit tile when the packed tile fits beside the accumulators
    (``defer_choice``); measured on the GEMM template (H200, 2026-11-21): M = N = 4096 with
    K = 64..512 1.06-1.12 -> 1.07-1.11 of cuBLAS, neutral at 4096^3."""

    def __init__(self, role, op: Store, staging: Staging):
        from ..emit_control import fresh
        self.role, self.op, self.staging = role, op, staging
        ctx, b = role.ctx, role.b
        self.tile = fresh(ctx, op.operands[1].type)
        self.coords = [b.reg() for _ in op.variadic()]
        self.pending = b.pred()
        b(f"setp.ne.u32 {self.pending}, 0, 0;")

    def hold(self, ctx, tile) -> list[str]:
        """At the store: hold this tile (the one before it has been flushed: ``flush`` runs
        after the first wgmma group and again after the ring loop, for a tile without trips)."""
        from ..emit_control import moves
        out = moves(ctx, [self.tile], [tile])
        out += [f"mov.b32 {r}, {ctx.get(v).reg};" for r, v in zip(self.coords, self.op.variadic())]
        out.append(f"setp.eq.u32 {self.pending}, 0, 0;")
        return out

    def flush(self, ctx) -> list[str]:
        skip = ctx.label("no_pending_tile")
        out = [f"@!{self.pending} bra {skip};"]
        out += emit_staged(self.role, ctx, self.op, self.tile, self.staging, self.coords)
        out += [f"setp.ne.u32 {self.pending}, 0, 0;", f"{skip}:"]
        return out


def defer_choice(role, op: Store, cols: int) -> tuple[bool, str]:
    """Whether ``op`` (the tile's last op, staged) is deferred, and why."""
    k = role.k
    if role.pingpong:
        return False, "ping-pong: a consumer's epilogue already runs while the other consumer's wgmmas do"
    if k.blocks.attrs.get("schedule") != "persistent":
        return False, "one tile per CTA: no next tile to overlap the stores with"
    t: TileType = op.operands[1].type
    if t.dtype != op.operands[0].type.dtype:
        return False, "the stored tile is not already in the tensor's 16-bit dtype"
    per_thread = t.rows * t.cols // (128 * role.owners)
    packed = per_thread // 2
    accs = sum(v.type.rows * v.type.cols // (128 * role.owners)
               for loop in role.loop_of.values() for v in loop.results if isinstance(v.type, TileType))
    room = k.regs[1] - 32
    if accs + packed > room:
        return False, (f"the packed tile ({packed} registers) and the accumulators ({accs}) exceed the "
                       f"{room} registers a consumer thread has beside 32 for the rest")
    return True, (f"each consumer thread holds its accumulators ({accs} registers) and the previous tile "
                  f"packed to 16 bits ({packed}) within its {k.regs[1]}; a tile's stores run after the "
                  "next tile's first wgmma group is issued (or after the last tile)")


def drain(role) -> list[str]:
    """Before the consumer exits: its last TMA stores have finished with the staging tile."""
    if not getattr(role, "staged", False):
        return []
    return [EPILOGUE_MARK, f"@{role.leader} {tma.store_wait(0, read_only=False)}", "// end epilogue sync"]


__all__ = ["staging_columns", "staging_for", "emit_staged", "drain", "Deferred", "defer_choice",
           "FIRST_STAGING_BARRIER"]
