"""A shared tile read into registers by the general lowering's consumers (``copy`` st -> rt).

    rs: st<bf16>[BM, BN] = R.tile(g, m, n)     # loaded once per tile: the producer's TMA copy
    for k in ... { ... acc = mma_ABt(a, b, acc) }
    r: rt<f32>[BM, BN] = rs                    # IR: %r = copy %rs (st -> rt)
    C.tile(g, m, n) = cvt<bf16>(silu(acc) + r)

An operand an epilogue reads -- a residual, a tile to blend in -- loaded as a shared tile arrives
by TMA while the K loop runs (the producer issues it with the tile's other one-shot loads, ahead
of the consumers), so the consumers read it from shared memory after the loop instead of waiting
for global memory there. The read lands in the registers a register tile holds in the wgmma
fragment layout: ``regs[band][chunk][half]``, the pair (row ``row_base + band offset + 8*half``,
columns ``col_base + 8*chunk``, +1), from the bytes the TMA box put it at (the swizzle the layout
pass chose, panel after panel, 16-byte chunks XOR-swizzled with bits 7.. of the offset).

A 16-bit tile is read with ``ldmatrix.sync.aligned.m8n8.x4.shared.b16`` (``ldmatrix_reads``): the
pairs a warp holds of two chunks of one band are four 8x8 matrices (half 0 and 1 of chunk j, then
of chunk j + 1), and ldmatrix hands lane l row l/4, columns 2*(l%4), +1 of each -- exactly its
pairs. Each lane supplies the address of one 16-byte matrix row (lane l: row l % 16 of the band,
chunk pair half l / 16), contiguous under every swizzle, so a thread's share costs one instruction
per 4 pairs instead of one ``ld.shared.b32`` and ~5 integer ops of swizzle arithmetic per pair.
The swizzle XOR of a lane's row depends only on the row modulo 8 and on the 16-byte chunk inside
its panel, so the XORed lane offsets (one per chunk pair position in a panel: at most 4) are
prologue registers; band offsets (multiples of 16 rows) and whole panels are immediates, and only
the stage's base is added at the read (ptxas folds it into the LDSM's uniform-register operand).
An odd chunk a warp holds last takes an ``x2``.

An f32 tile keeps one ``ld.shared.v2.f32`` a pair (``pair_addresses``): ldmatrix hands a lane 4
bytes of a matrix row, one f32 where the fragment wants two neighbouring ones (the neighbour lane
holds the other: a shuffle each to put them back). An fp8 tile keeps one ``ld.shared.b16`` a pair
widened to f32 (``fp8_pair``): there the 4 bytes are 4 columns, 4t .. 4t + 3, where the fragment
wants 2t, 2t + 1. An f32 result of a 16-bit tile read only elementwise stays packed
(``liveness.held_packed``); otherwise its elements are unpacked (exact).
The protocol's one-shot ``Wait`` on the tile's full barrier comes before the first op that reads
it (interleave.py anchors it at the load), and its release at the tile's end, so the read needs
no step of its own.

A tile a loop streams through its ring (``x: st<bf16>[BM, BK] = X.tile(m, k)`` in the K loop,
``xr: rt<f32>[BM, BK] = x``) is read the same way from the trip's current stage, in the layout
pass's swizzle: the read is the trip's ``Read`` step (``sync_protocol.place_read``), after the
stage's full ``Wait`` and before its release (both the checker and the roles executor see it).
"""
from __future__ import annotations

from ...errors import NotAvailableError
from ...ir.ops import Copy, For, Load
from ...ir.types import BF16, E4M3, E5M2, F16, F32, FP8, TileType
from ...passes.hopper import is_shared, swizzle_bytes
from ...passes.liveness import held_packed
from .copy import SWIZZLE_MASKS
from .lower_fragments import _fragment_rows
from .lower_shared_store import pair_addresses


def is_tile_read(op) -> bool:
    """A shared tile copied into a register tile."""
    return isinstance(op, Copy) and is_shared(op.operands[0]) and not is_shared(op.result)


def tile_read_refusal(op: Copy):
    """None when ``emit_tile_read`` can lower this copy of a shared tile into registers."""
    from .lower import Refusal
    src, dst = op.operands[0].type, op.result.type
    if not isinstance(op.operands[0].owner, Load):
        return Refusal(op, "a shared tile read into registers must be one the producer loads "
                           "(a tile loaded in the block body)")
    if isinstance(getattr(op.operands[0].owner.parent, "parent", None), For) and \
            op.parent is not op.operands[0].owner.parent:
        # a ring tile's read is a step of its trip (Read), which stands for an op of the trip
        return Refusal(op, "a tile a loop streams through its ring is read into registers in that "
                           "loop's body itself (not in an 'if' or a loop inside it): the read is a "
                           "step of the trip's protocol")
    if src.dtype not in (BF16, F16, F32, *FP8):
        return Refusal(op, f"a {src.dtype} shared tile read into registers")
    if src.dtype in FP8 and not (isinstance(dst, TileType) and dst.space == "rt" and dst.dtype == F32):
        return Refusal(op, f"a {src.dtype} shared tile is read into an rt<f32> tile (converted from its pairs)")
    if not (isinstance(dst, TileType) and dst.space == "rt") or dst.dtype not in (src.dtype, F32):
        return Refusal(op, f"a {src.dtype} shared tile is read into an rt<{src.dtype}> or rt<f32> tile")
    if swizzle_bytes(src) not in SWIZZLE_MASKS:
        return Refusal(op, "a shared tile without a swizzle (rows not a multiple of 32 bytes)")
    if src.rows % 8:
        return Refusal(op, f"{src.rows} rows: the swizzle pattern repeats every 8 rows")
    return None


def emit_tile_read(ctx, op: Copy) -> list[str]:
    """The consumer's loads of ``op``'s shared tile into a packed 16-bit register tile."""
    from ..emit_control import fresh
    from ..emit_elementwise import _elements, make_value
    role = ctx.role
    src: TileType = op.operands[0].type
    t: TileType = op.result.type
    load = role.shared.get(id(op.operands[0]))
    if load is None:
        raise NotAvailableError(f"{op.NAME}: the shared tile is read before its bytes are known to "
                                "have landed (no one-shot wait placed it)", op.span)
    rep = fresh(ctx, t if src.dtype in FP8 else t.with_dtype(src.dtype))
    span = swizzle_bytes(src)
    base = role.stage_address(load)
    name = op.operands[0].hint or "tile"
    ldsm = src.dtype.bits == 16 and not ctx.grid.contiguous_cols  # (the wgmma fragment's columns)
    how = "ldmatrix" if ldsm else {F32: "ld.shared.v2.f32"}.get(src.dtype, "ld.shared.b16")
    out: list[str] = [(f"// read %{name} ({src.rows} x {src.cols}, {span}B swizzle) into registers with "
                       f"{how}, from where its TMA box put each pair")]
    if ldsm:
        counts = ldmatrix_reads(ctx, rep, src, base, out)
    else:
        counts = {}
        for (u, j, h), a in pair_addresses(ctx, rep.layout, src, base, out):
            if src.dtype == F32:  # the pair's two elements, 8 bytes inside one 16-byte chunk
                out.append(f"ld.shared.v2.f32 {{{rep.regs[u][j][2 * h]}, {rep.regs[u][j][2 * h + 1]}}}, [{a}];")
            else:  # fp8: two bytes, widened exactly: f8x2 -> f16x2 -> f32, f32
                out += fp8_pair(ctx, src.dtype.name, a, rep.regs[u][j][2 * h], rep.regs[u][j][2 * h + 1])
            counts[how] = counts.get(how, 0) + 1
    packed = t.dtype == src.dtype or src.dtype in FP8 or held_packed(op, role.users.get(id(op.result), []))
    if packed:
        ctx.bind(op.result, rep)
    else:
        ctx.bind(op.result, make_value(ctx, t, _elements(ctx, rep, out), out))
    ring = role.ring_of_load.get(load)
    if ring is not None and isinstance(getattr(load.parent, "parent", None), For):
        where = f" at {op.span.location()}" if op.span else ""
        pairs = {F32: "f32", E4M3: "e4m3", E5M2: "e5m2"}.get(src.dtype, "16-bit")
        used = " + ".join(f"{n} {instr}" for instr, n in counts.items())
        decision = {"decision": "tile read",
                    "value": f"%{name}{where}: {' and '.join(counts)} from ring {ring}'s stage",
                    "why": f"the trip's Read step, after the stage's full wait and before its release: "
                           f"each consumer thread loads its {pairs} pairs of the "
                           f"{src.rows} x {src.cols} tile from where the TMA box put them ({span}B swizzle; "
                           f"{used} a thread), "
                           + ("widened to f32 (cvt f8x2 -> f16x2, exact)" if src.dtype in FP8 else
                              "kept packed (read only elementwise)" if packed and t.dtype != src.dtype else
                              "as they are" if t.dtype == src.dtype else "unpacked to f32")}
        if decision not in role.k.decisions:
            role.k.decisions.append(decision)
    return out


def ldmatrix_reads(ctx, rep, t: TileType, base: str, out: list[str]) -> dict[str, int]:
    """Append the ldmatrix instructions that fill the packed 16-bit register tile ``rep`` (wgmma
    fragment layout) from the shared tile ``t`` a TMA box put at ``base``; return how many of each
    (``{"ldmatrix.x4": n, ...}``).

    Per band, chunks j and j + 1 are one ``x4`` (matrices: half 0 and 1 of chunk j, then of j + 1);
    a last odd chunk is an ``x2`` (lanes 0-15 give its rows). Lane l addresses row l % 16 of the
    band at chunk j + l / 16: its byte is ``lane_offset`` (the prologue's XORed offset of that row
    and chunk, for j's position inside its swizzle panel) + the band's rows * span + whole panels
    past it, the last two immediates: both are multiples of 8 rows of the span (a panel is the
    tile's rows, a multiple of 8, times the span), above the offset bits the XOR reads (bits 7 ..
    log2(8 * span) - 1), so they add to the XORed offset."""
    layout = rep.layout
    span = swizzle_bytes(t)
    panel_cols = span // t.dtype.nbytes
    rb, rows, cb, cols = _fragment_rows(ctx, layout)
    counts: dict[str, int] = {}
    at: dict[int, str] = {}  # a chunk position in a panel -> the lane's address of it at ``base``
    for u in range(layout.bands):
        for j in range(0, layout.chunks, 2):
            n = 4 if j + 1 < layout.chunks else 2
            panel, inner = divmod(cols[j], panel_cols)
            if inner not in at:
                at[inner] = ctx.new("b32")
                out.append(f"add.u32 {at[inner]}, {base}, {lane_offset(ctx, layout, t, inner)};")
            imm = rows[(u, 0)] * span + panel * t.rows * span
            regs = [rep.regs[u][j + q // 2][q % 2] for q in range(n)]
            out.append(f"ldmatrix.sync.aligned.m8n8.x{n}.shared.b16 {{{', '.join(regs)}}}, "
                       f"[{at[inner]}{f'+{imm}' if imm else ''}];")
            counts[f"ldmatrix.x{n}"] = counts.get(f"ldmatrix.x{n}", 0) + 1
    return counts


def lane_offset(ctx, layout, t: TileType, col: int) -> str:
    """A prologue register: the byte offset, in the shared tile ``t`` as its TMA box lays it out,
    of the 16-byte matrix row this lane gives ldmatrix for band 0 at column ``col`` of the thread's
    chunks: row (the warp's first row) + lane % 16, column (the warp's first column) + ``col`` +
    8 * (lane / 16), in its panel, the row's 16-byte chunks XOR-swizzled."""
    rb, _, cb, _ = _fragment_rows(ctx, layout)
    span = swizzle_bytes(t)
    elem = t.dtype.nbytes
    panel_cols = span // elem

    def build(out):
        lane, row, c, x = ctx.tid("lane"), ctx.new("b32"), ctx.new("b32"), ctx.new("b32")
        t2 = ctx.imm_expr(("t2", 1), f"shl.b32 {{r}}, {ctx.tid('t')}, 1;")
        out += [f"sub.u32 {row}, {rb}, {ctx.tid('g')};", f"and.b32 {x}, {lane}, 15;", f"add.u32 {row}, {row}, {x};",
                f"sub.u32 {c}, {cb}, {t2};", f"shr.u32 {x}, {lane}, 4;", f"mad.lo.u32 {c}, {x}, 8, {c};"]
        if col:
            out.append(f"add.u32 {c}, {c}, {col};")
        a = ctx.new("b32")  # panel * panel bytes + row * span + the column's byte in its panel row
        out += [f"shr.u32 {x}, {c}, {panel_cols.bit_length() - 1};", f"mul.lo.u32 {a}, {x}, {t.rows * span};",
                f"mad.lo.u32 {a}, {row}, {span}, {a};", f"and.b32 {c}, {c}, {panel_cols - 1};",
                f"mad.lo.u32 {a}, {c}, {elem}, {a};",
                f"shr.u32 {x}, {a}, 3;", f"and.b32 {x}, {x}, {SWIZZLE_MASKS[span] << 4};", f"xor.b32 {a}, {a}, {x};"]
        return a
    return ctx.cached(("ldmatrix_lane", rb, cb, span, t.rows, elem, col), build)


def fp8_pair(ctx, dtype: str, address: str, lo: str, hi: str) -> list[str]:
    """Two neighbouring fp8 elements at ``address`` into the f32 registers ``lo``, ``hi``: one
    ``ld.shared.b16``, ``cvt.rn.f16x2.{e4m3x2,e5m2x2}`` (exact: every fp8 value is an f16 one; the
    lower byte, the lower column, lands in the lower half), then each half to f32."""
    h, p, x, y = ctx.new("b16"), ctx.new("b32"), ctx.new("b16"), ctx.new("b16")
    return [f"ld.shared.b16 {h}, [{address}];", f"cvt.rn.f16x2.{dtype}x2 {p}, {h};", f"mov.b32 {{{x}, {y}}}, {p};",
            f"cvt.f32.f16 {lo}, {x};", f"cvt.f32.f16 {hi}, {y};"]


__all__ = ["emit_tile_read", "fp8_pair", "is_tile_read", "lane_offset", "ldmatrix_reads", "tile_read_refusal"]
