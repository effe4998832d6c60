"""The staged epilogue: a consumer's tile, packed to 16-bit pairs, stmatrix'd into 128B-swizzled
staging panels in shared memory and TMA-stored to C (rows and columns outside C clipped by the
box), used by the general lowering's staged stores (lower_epilogue.py). One function per protocol
step of a round (``sync_protocol.staged_store``: ``StoreWait``, ``StagingSync``,
``StagingWrite``, ``StagingSync``, ``TmaStore``); the rounds are the epilogue pass's.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...frozen import Frozen
from ...passes.epilogue import PANEL_BYTES, PANEL_COLS
from .builder import Builder


@dataclass(unsafe_hash=True)
class Staging(Frozen):
    """One consumer's staging tiles: ``cols`` columns of each of its 64-row slabs per round,
    64-column panels one after another (slab-major). ``lanes[q]`` is this thread's stmatrix
    address for the q-th 16-column chunk of a panel (row 16w + l%8 + 8((l>>3)&1), chunk 2q + l/16,
    swizzled); ``barrier`` the consumer's named barrier; ``leader`` its one TMA-issuing thread."""

    base: str
    lanes: tuple[str, ...]
    barrier: str
    leader: str
    cols: int
    tmap: str


def staging_lanes(b: Builder, base: str, lane: str, warp: str) -> tuple[str, ...]:
    row, low, hi, t = b.reg(), b.reg(), b.reg(), b.reg()
    b(f"and.b32 {low}, {lane}, 7;", f"bfe.u32 {t}, {lane}, 3, 1;", f"shl.b32 {row}, {t}, 3;",
      f"add.u32 {row}, {row}, {low};", f"mad.lo.u32 {row}, {warp}, 16, {row};",
      f"mad.lo.u32 {row}, {row}, 128, {base};", f"shr.u32 {hi}, {lane}, 4;")
    lanes = []
    for q in range(4):
        x = b.reg()
        b(f"add.u32 {x}, {hi}, {2 * q};", f"xor.b32 {x}, {x}, {low};", f"mad.lo.u32 {x}, {x}, 16, {row};")
        lanes.append(x)
    return tuple(lanes)


def staging_halves(st: Staging) -> bool:
    """Whether a consumer's staging is used as two halves in turn (double-buffered): when it
    holds an even number of panels (``passes/epilogue.staging_rounds``)."""
    from ...passes.epilogue import staging_halves as halves
    return halves(st.cols)


def _round_shape(st: Staging) -> tuple[int, int, int]:
    """(panels of the staging, columns of a round, panels of a round)."""
    panels = st.cols // PANEL_COLS
    cols = st.cols // 2 if staging_halves(st) else st.cols
    return panels, cols, cols // PANEL_COLS


def wait_stores(b: Builder, st: Staging, pending: int) -> None:
    """The protocol's ``StoreWait``: the TMA-issuing thread waits until at most ``pending`` store
    groups still read their staging."""
    from . import tma
    b(f"@{st.leader} {tma.store_wait(pending, read_only=True)}")


def meet(b: Builder, st: Staging) -> None:
    """The protocol's ``StagingSync``: the consumer's warps meet on its named barrier."""
    b(f"bar.sync {st.barrier}, 128;")


def write_round(b: Builder, st: Staging, slabs: int, r: int, buffer: int,
                packed: dict[tuple[int, int], list[str]]) -> None:
    """The protocol's ``StagingWrite``: round ``r``'s columns of every slab, stmatrix-ed into
    ``buffer`` (a half, or the whole staging), then fenced for the async proxy.
    ``packed[slab, first column of 16]``: one stmatrix.x4's four registers (lower_epilogue.py)."""
    panels, cols, per_round = _round_shape(st)
    for slab in range(slabs):
        for jr in range(cols // 16):
            chunk = packed[slab, r * cols + 16 * jr]
            p, q = divmod(jr, 4)
            panel = slab * panels + buffer * per_round + p
            b(f"stmatrix.sync.aligned.m8n8.x4.shared.b16 [{st.lanes[q]}+{panel * PANEL_BYTES}], "
              f"{{{', '.join(chunk)}}};")
    b("fence.proxy.async.shared::cta;")


def store_round(b: Builder, st: Staging, slabs: int, r: int, buffer: int, row0: str, col0: str,
                lead: tuple[str, ...] = ()) -> None:
    """The protocol's ``TmaStore``: one thread TMA-stores the round's panels to C at rows
    ``row0 + 64*slab``, columns ``col0 + ...`` (TMA clips rows and columns outside C), then
    commits them as one bulk group. ``lead``: the store's leading coordinates (outermost last),
    for a C of rank above 2."""
    from . import tma
    panels, cols, per_round = _round_shape(st)
    for slab in range(slabs):
        for p in range(per_round):
            inner, outer, src = b.reg(), b.reg(), b.reg()
            panel = slab * panels + buffer * per_round + p
            b(f"add.s32 {inner}, {col0}, {r * cols + p * PANEL_COLS};", f"add.s32 {outer}, {row0}, {64 * slab};",
              f"add.u32 {src}, {st.base}, {panel * PANEL_BYTES};",
              f"@{st.leader} {tma.store_nd(st.tmap, [inner, outer, *lead], src)}")
    b(f"@{st.leader} {tma.STORE_COMMIT}")
