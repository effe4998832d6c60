"""The staged epilogue of the general lowering: a register tile stored through shared memory and
TMA, where the epilogue pass staged the store (its ``epilogue`` / ``epilogue_cols``, over the
staging smem-plan planned).

The protocol holds the store's rounds (``sync_protocol.staged_store``); each of its steps prints
its part (``epilogue.py``): the TMA-issuing thread's wait for the stores still reading the round's
buffer, the consumer's warps meeting on its named barrier, every warp's stmatrix of its rows
(64-column panels; two halves of the staging in turn when a round holds an even number of
panels) and the fence, the second meeting, one thread's TMA store of each panel and the commit.
TMA clips the boxes at the tensor's edges. A store the pass did not stage goes from registers
(``lower_fragments._fragments``). A deferred store (``HoldStore``) is held in registers until
the protocol's next ``IfHeld``; ``StoreDrain`` ends the consumer.
"""
from __future__ import annotations

from ...ir.ops import Store
from ...ir.types import TileType
from ...passes.sync_protocol import StagedStore
from . import tma
from .epilogue import Staging, staging_lanes

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


class EpilogueWalk:
    """What a staged store's steps print from (``lower_consumer.ConsumerRole``'s epilogue step
    emitters): the staging, the tile's packed pairs, its first row and column, the round."""

    def __init__(self, staging: Staging, slabs: int, row0: str, col0: str, packed: dict, lead: tuple):
        self.staging, self.slabs, self.row0, self.col0 = staging, slabs, row0, col0
        self.packed, self.lead = packed, lead
        self.round = -1


def emit_staged(role, ctx, op: Store, tile, staging: Staging, step: StagedStore,
                coords: list[str] | None = None) -> list[str]:
    """Store register tile ``tile`` through ``staging`` at the store's coordinates (or the
    registers ``coords``): the tile's first row and column and its packed pairs, then the steps
    of ``step`` (the protocol's rounds), each printed by the role's table into these lines."""
    out: list[str] = []
    b = Lines(ctx, out)
    t: TileType = tile.type
    g = op.operands[0].type
    slabs = t.rows // 64 // role.owners
    coords = coords or [ctx.get(v).reg for v in op.variadic()]
    row0, col0 = b.reg(), b.reg()
    b(f"mul.lo.s32 {row0}, {coords[-2]}, {t.rows};", f"mad.lo.s32 {row0}, {role.share}, {slabs * 64}, {row0};",
      f"mul.lo.s32 {col0}, {coords[-1]}, {t.cols};")
    walk = EpilogueWalk(staging, slabs, row0, col0, _packed(ctx, tile, g.dtype, out), tuple(reversed(coords[:-2])))
    saved, role.b, role.epi = role.b, b, walk
    try:
        role.emit(step.body)
    finally:
        role.b, role.epi = saved, None
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
    """The deferred epilogue (the epilogue pass's ``epilogue = "deferred"``): a tile's staged store
    waits, packed in registers of its own, until the protocol's next ``IfHeld`` (after the next
    tile's first wgmma group is issued, after a ring loop without trips, after the tile loop);
    the held tile's predicate says whether one waits."""

    def __init__(self, role, op: Store, staging: Staging):
        from ..emit_control import fresh
        self.role, self.op, self.staging = role, op, staging
        ctx, b = role.ctx, role.b
        self.tile = fresh(ctx, op.operands[1].type)
        self.coords = [b.reg() for _ in op.variadic()]
        self.pending = b.pred()
        b(f"setp.ne.u32 {self.pending}, 0, 0;")

    def hold(self, ctx, tile) -> list[str]:
        """The protocol's ``HoldStore``: hold this tile (the one before it has been stored at an
        ``IfHeld`` since)."""
        from ..emit_control import moves
        out = moves(ctx, [self.tile], [tile])
        out += [f"mov.b32 {r}, {ctx.get(v).reg};" for r, v in zip(self.coords, self.op.variadic())]
        out.append(f"setp.eq.u32 {self.pending}, 0, 0;")
        return out

    def flush(self, ctx, step) -> list[str]:
        """The protocol's ``IfHeld``: its ``StagedStore`` when a tile is held."""
        skip = ctx.label("no_pending_tile")
        out = [f"@!{self.pending} bra {skip};"]
        (staged,) = step.body
        out += emit_staged(self.role, ctx, self.op, self.tile, self.staging, staged, self.coords)
        out += [f"setp.ne.u32 {self.pending}, 0, 0;", f"{skip}:"]
        return out


def staging_read(role) -> list[str]:
    """The protocol's ``StagingRead``: the staging lives in a one-shot tile's slot; the thread that
    issued its TMA stores waits until they have read it, before that same thread (the consumer's
    leader) arrives on the slot's empty barrier."""
    return [f"@{role.leader} {tma.store_wait(0, read_only=True)}"]


def drain(role) -> list[str]:
    """The protocol's ``StoreDrain``: before the consumer exits, its last TMA stores have finished
    with the staging tile."""
    return [f"@{role.leader} {tma.store_wait(0, read_only=False)}"]


__all__ = ["staging_for", "emit_staged", "staging_read", "drain", "Deferred", "EpilogueWalk", "FIRST_STAGING_BARRIER"]
