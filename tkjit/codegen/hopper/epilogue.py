"""The staged epilogue: a consumer's tile, packed to 16-bit pairs, stmatrix'd into 128B-swizzled
staging panels in shared memory and TMA-stored to C (rows and columns outside C clipped by the
box), used by the general lowering's staged stores (lower_epilogue.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...frozen import Frozen
from .builder import Builder

PANEL_COLS, PANEL_BYTES = 64, 64 * 128
"""A staging panel: 64 rows x 64 columns of a 16-bit C, rows of 128 bytes, 128B-swizzled (what a
TMA box of 64 x 64 with CU_TENSOR_MAP_SWIZZLE_128B reads)."""


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
    holds an even number of panels. Then the stmatrix of one half overlaps the TMA store still
    reading the other, and a round waits only for the store before last."""
    return (st.cols // PANEL_COLS) % 2 == 0


def store_staged(b: Builder, st: Staging, slabs: int, bn: int, row0: str, col0: str,
                 packed: dict[tuple[int, int], list[str]], lead: tuple[str, ...] = ()) -> None:
    """stmatrix a tile's packed 16-bit pairs (``packed[slab, first column of 16]``: one
    stmatrix.x4's four registers, lower_epilogue.py) into the staging panels and TMA-store
    each panel to C at rows ``row0 + 64*slab``, columns ``col0 + ...``: rows and columns outside
    C are not written (TMA clips the box). A round covers ``st.cols`` columns, or half of them in
    alternating halves of the staging (``staging_halves``); before a round writes its panels,
    the store groups that read them have finished reading (``cp.async.bulk.wait_group.read``:
    0 pending with one buffer, 1 -- the other half's -- with two; 0 at a tile's first round
    when the tile has an odd number of rounds, as the last one used the same half). ``lead``:
    the store's leading coordinates (outermost last), for a C of rank above 2."""
    from . import tma
    panels = st.cols // PANEL_COLS
    halves = staging_halves(st)
    cols = st.cols // 2 if halves else st.cols
    per_round = cols // PANEL_COLS
    rounds = bn // cols
    for r in range(rounds):
        half = r % 2 if halves else 0
        pending = 1 if halves and (r > 0 or rounds % 2 == 0) else 0
        b(f"@{st.leader} {tma.store_wait(pending, read_only=True)}", f"bar.sync {st.barrier}, 128;")
        for slab in range(slabs):
            for jr in range(cols // 16):
                col = r * cols + 16 * jr
                chunk = packed[slab, col]
                p, q = divmod(jr, 4)
                panel = slab * panels + half * per_round + p
                b(f"stmatrix.sync.aligned.m8n8.x4.shared.b16 [{st.lanes[q]}+{panel * PANEL_BYTES}], "
                  f"{{{', '.join(chunk)}}};")
        b("fence.proxy.async.shared::cta;", f"bar.sync {st.barrier}, 128;")
        for slab in range(slabs):
            for p in range(per_round):
                inner, outer, src = b.reg(), b.reg(), b.reg()
                panel = slab * panels + half * per_round + p
                b(f"add.s32 {inner}, {col0}, {r * cols + p * PANEL_COLS};", f"add.s32 {outer}, {row0}, {64 * slab};",
                  f"add.u32 {src}, {st.base}, {panel * PANEL_BYTES};",
                  f"@{st.leader} {tma.store_nd(st.tmap, [inner, outer, *lead], src)}")
        b(f"@{st.leader} {tma.STORE_COMMIT}")
