"""The GEMM epilogue: accumulator registers → C in global memory, clipped at the tensor's edges.

Thread t = 32w + l of a consumer warpgroup holds, for register i of a 64 x N accumulator,
row 16w + l/4 + 8((i>>1)&1) and column 8(i>>2) + 2(l%4) + (i&1) (the wgmma D fragment). So
registers (i, i+1) are two neighbouring columns of one row: one 4-byte bf16x2 store (8 bytes
for f32). A tile that lies wholly inside C (and an even N, so pairs are aligned) takes
unpredicated stores at immediate offsets; an edge tile stores element by element under
row/column predicates, so nothing outside C is written.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...frozen import Frozen
from .builder import Builder

PACK = {"bf16": "cvt.rn.bf16x2.f32", "f16": "cvt.rn.f16x2.f32"}
ELEM_BYTES = {"bf16": 2, "f16": 2, "f32": 4}


@dataclass(unsafe_hash=True)
class Fragment(Frozen):
    """One consumer accumulator: 64 rows from ``row`` and ``n`` columns from ``col`` (registers
    holding the thread's first row and first column), ``regs`` its n/2 f32 registers."""

    regs: tuple[str, ...]
    row: str
    col: str
    n: int


def store_fragment(b: Builder, frag: Fragment, c_ptr: str, dim_m: str, dim_n: str, c_dtype: str,
                   inside: str) -> None:
    """Store one fragment; ``inside`` is the predicate 'this whole tile lies in C, N even'."""
    esz = ELEM_BYTES[c_dtype]
    rows = (frag.row, b.reg())
    b(f"add.s32 {rows[1]}, {frag.row}, 8;")
    addrs = []
    for r in rows:
        off, addr = b.reg("b64"), b.reg("b64")
        b(f"mul.wide.s32 {off}, {r}, {dim_n};", f"cvt.s64.s32 {addr}, {frag.col};",
          f"add.s64 {off}, {off}, {addr};", f"shl.b64 {off}, {off}, {esz.bit_length() - 1};",
          f"add.s64 {addr}, {c_ptr}, {off};")
        addrs.append(addr)
    edge, done = b.label("edge"), b.label("stored")
    b(f"@!{inside} bra {edge};")
    for j in range(frag.n // 8):
        for h in (0, 1):
            lo, hi = frag.regs[4 * j + 2 * h], frag.regs[4 * j + 2 * h + 1]
            offset = j * 8 * esz
            if c_dtype == "f32":
                b(f"st.global.v2.f32 [{addrs[h]}+{offset}], {{{lo}, {hi}}};")
            else:
                packed = b.reg()
                b(f"{PACK[c_dtype]} {packed}, {hi}, {lo};", f"st.global.b32 [{addrs[h]}+{offset}], {packed};")
    b(f"bra.uni {done};")
    b.place(edge)
    _store_clipped(b, frag, addrs, rows, dim_m, dim_n, c_dtype)
    b.place(done)


def _store_clipped(b: Builder, frag: Fragment, addrs, rows, dim_m: str, dim_n: str, c_dtype: str) -> None:
    esz = ELEM_BYTES[c_dtype]
    row_ok = []
    for r in rows:
        p = b.pred()
        b(f"setp.lt.s32 {p}, {r}, {dim_m};")
        row_ok.append(p)
    cols_left = b.reg()
    b(f"sub.s32 {cols_left}, {dim_n}, {frag.col};")
    for j in range(frag.n // 8):
        col_ok = []
        for e in (0, 1):
            p = b.pred()
            b(f"setp.gt.s32 {p}, {cols_left}, {8 * j + e};")
            col_ok.append(p)
        for h in (0, 1):
            lo, hi = frag.regs[4 * j + 2 * h], frag.regs[4 * j + 2 * h + 1]
            values = (lo, hi)
            if c_dtype != "f32":
                packed, half_lo, half_hi = b.reg(), b.reg("b16"), b.reg("b16")
                b(f"{PACK[c_dtype]} {packed}, {hi}, {lo};", f"mov.b32 {{{half_lo}, {half_hi}}}, {packed};")
                values = (half_lo, half_hi)
            for e in (0, 1):
                ok = b.pred()
                b(f"and.pred {ok}, {row_ok[h]}, {col_ok[e]};")
                kind = "f32" if c_dtype == "f32" else "b16"
                b(f"@{ok} st.global.{kind} [{addrs[h]}+{(j * 8 + e) * esz}], {values[e]};")


# ------------------------------------------------------------------ staged through shared memory

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


def pack_chunk(b: Builder, acc, wgmma_n: int, slab: int, col: int, c_dtype: str,
               out: list[str] | None = None) -> list[str]:
    """The four 16-bit pairs (one stmatrix.x4) of columns [col, col + 16) of slab ``slab``, in
    ``out`` or new registers."""
    piece, inner = divmod(col, wgmma_n)
    regs = acc[slab][piece][inner // 2:inner // 2 + 8]
    packed = []
    for k in range(4):
        x = out[k] if out else b.reg()
        b(f"{PACK[c_dtype]} {x}, {regs[2 * k + 1]}, {regs[2 * k]};")
        packed.append(x)
    return packed


def packed_registers(b: Builder, slabs: int, bn: int) -> dict[tuple[int, int], list[str]]:
    """Registers for every 16-column chunk of a tile packed to 16-bit pairs, by (slab, first
    column): half the accumulators' registers."""
    return {(slab, col): [b.reg() for _ in range(4)] for slab in range(slabs) for col in range(0, bn, 16)}


def pack_tile(b: Builder, acc, wgmma_n: int, c_dtype: str, packed: dict[tuple[int, int], list[str]]) -> None:
    """Pack the accumulators into ``packed`` (``packed_registers``), so they can wait for their
    stores while the accumulators take the next tile's wgmmas (the deferred epilogue, gemm.py)."""
    for (slab, col), out in packed.items():
        pack_chunk(b, acc, wgmma_n, slab, col, c_dtype, out)


def store_staged(b: Builder, st: Staging, acc, wgmma_n: int, bn: int, row0: str, col0: str, c_dtype: str,
                 packed: dict[tuple[int, int], list[str]] | None = None, lead: tuple[str, ...] = ()) -> None:
    """stmatrix the accumulators (``acc[slab][piece]``) into the staging panels and TMA-store
    each panel to C at rows ``row0 + 64*slab``, columns ``col0 + ...``: rows and columns outside
    C are not written (TMA clips the box). A round covers ``st.cols`` columns, or half of them in
    alternating halves of the staging (``staging_halves``); before a round writes its panels,
    the store groups that read them have finished reading (``cp.async.bulk.wait_group.read``:
    0 pending with one buffer, 1 -- the other half's -- with two; 0 at a tile's first round
    when the tile has an odd number of rounds, as the last one used the same half). ``packed``
    (``pack_tile``) gives the chunks already packed; else each round packs its own. ``lead``:
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
        for slab in range(len(acc)):
            for jr in range(cols // 16):
                col = r * cols + 16 * jr
                chunk = packed[slab, col] if packed else pack_chunk(b, acc, wgmma_n, slab, col, c_dtype)
                p, q = divmod(jr, 4)
                panel = slab * panels + half * per_round + p
                b(f"stmatrix.sync.aligned.m8n8.x4.shared.b16 [{st.lanes[q]}+{panel * PANEL_BYTES}], "
                  f"{{{', '.join(chunk)}}};")
        b("fence.proxy.async.shared::cta;", f"bar.sync {st.barrier}, 128;")
        for slab in range(len(acc)):
            for p in range(per_round):
                inner, outer, src = b.reg(), b.reg(), b.reg()
                panel = slab * panels + half * per_round + p
                b(f"add.s32 {inner}, {col0}, {r * cols + p * PANEL_COLS};", f"add.s32 {outer}, {row0}, {64 * slab};",
                  f"add.u32 {src}, {st.base}, {panel * PANEL_BYTES};",
                  f"@{st.leader} {tma.store_nd(st.tmap, [inner, outer, *lead], src)}")
        b(f"@{st.leader} {tma.STORE_COMMIT}")
