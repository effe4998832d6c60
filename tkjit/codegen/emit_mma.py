"""The tensor-core emitter: tile matrix products as warp-level ``mma.sync.m16n8k16``.

The result tile D [M, N] is in the fragment layout, so warp (row group q, column group p)
computes its bands x chunks of D. For every 16-deep step of K it loads

* A fragments of its bands with ``ldmatrix.x4`` (``.trans`` when A is given as [K, M]), or
  straight from registers when A is a bf16/f16 register tile whose warp holds all of K (the
  accumulator layout of a 16x16 block *is* the A fragment: FlashAttention's P·V trick);
* B fragments of its chunks, two chunks per ``ldmatrix.x4`` (``.trans`` when B is [K, N]);

then issues one mma per (band, chunk). Register operands in any other layout are first written
to shared scratch. Inner-dimension padding that is not known to be zero (e.g. P = exp2(...) of a
key tile past the sequence end) is masked to zero before use.
"""
from __future__ import annotations

from ..errors import NotAvailableError
from ..ir.ops import MMA_OPS
from ..ir.types import BF16, F16, F32, TileType
from .context import Pattern
from .emit_memory import write_fragments, zero_padding
from .smem import Geometry
from .values import RegTile, SharedTile


def _a_direct(op, grid) -> bool:
    """Whether A can feed the mma from registers as it is."""
    a = op.operands[0].type
    return a.space == "rt" and not op.TA and grid.col_split(a.cols).groups == 1


def _scratch_parts(op, grid) -> list[tuple[int, TileType]]:
    """(operand index, type) of register operands staged through shared memory."""
    parts = []
    a, b = op.operands[0].type, op.operands[1].type
    if a.space == "rt" and not _a_direct(op, grid):
        parts.append((0, a))
    if b.space == "rt":
        parts.append((1, b))
    return parts


def _align(n: int, a: int = 128) -> int:
    return -(-n // a) * a


def mma_scratch_bytes(op, grid) -> int:
    return sum(_align(t.nbytes) for _, t in _scratch_parts(op, grid))


def _k_axis(op, index: int) -> str:
    """Which axis of operand ``index`` is the inner (K) dimension."""
    if index == 0:
        return "rows" if op.TA else "cols"
    return "cols" if op.TB else "rows"


def _k_dirty(ctx, op, index: int):
    pad = ctx.pads[op.operands[index]]
    which = _k_axis(op, index)
    axis = pad.rows if which == "rows" else pad.cols
    return [(which, axis)] if axis is not None and not axis.clean else []


def _lane_regs(ctx, mapping: str) -> tuple[str, str]:
    """(row, chunk) of the 8x8 matrix row this lane addresses for ldmatrix.

    L1: row = l & 15, chunk = l >> 4        (A, and B given as [K, N] with .trans)
    L2: row = (l & 7) + 8 * (l >> 4), chunk = (l >> 3) & 1   (A given as [K, M], B as [N, K])"""
    lane = ctx.tid("lane")
    if mapping == "L1":
        row = ctx.imm_expr(("ldm_row", "L1"), f"and.b32 {{r}}, {lane}, 15;")
        chunk = ctx.imm_expr(("ldm_chunk", "L1"), f"shr.u32 {{r}}, {lane}, 4;")
        return row, chunk
    hi = ctx.imm_expr(("lane_hi8",), f"shr.u32 {{r}}, {lane}, 4;\nshl.b32 {{r}}, {{r}}, 3;")
    low = ctx.imm_expr(("lane_lo7",), f"and.b32 {{r}}, {lane}, 7;")
    row = ctx.imm_expr(("ldm_row", "L2"), f"add.u32 {{r}}, {low}, {hi};")
    chunk = ctx.imm_expr(("ldm_chunk", "L2"), f"shr.u32 {{r}}, {lane}, 3;\nand.b32 {{r}}, {{r}}, 1;")
    return row, chunk


def _operand_pattern(ctx, st: SharedTile, mapping: str, row_warp: tuple | None,
                     chunk_warp: tuple | None) -> Pattern:
    """ldmatrix addresses: lane rows/chunks plus a warp part (group register, units, scale)."""
    lrow, lchunk = _lane_regs(ctx, mapping)
    row = lrow
    if row_warp is not None:
        split, axis, scale = row_warp
        if split.groups > 1:
            grp = ctx.group(split, axis)
            row = ctx.imm_expr(("ldm_wrow", mapping, axis, split.groups, split.per_warp, scale),
                               f"mad.lo.u32 {{r}}, {grp}, {split.per_warp * scale}, {lrow};")
    wchunk, walign = None, 1 << 20
    if chunk_warp is not None:
        split, axis, scale = chunk_warp
        if split.groups > 1:
            grp = ctx.group(split, axis)
            walign = split.per_warp * scale
            wchunk = ctx.imm_expr(("ldm_wchunk", axis, split.groups, split.per_warp, scale),
                                  f"mul.lo.u32 {{r}}, {grp}, {walign};")
    return Pattern(st.geometry, row, wchunk, walign, lchunk, 1, None)


def _ldmatrix(ctx, count: int, trans: bool, addr: str, out: list[str]) -> list[str]:
    regs = [ctx.new("b32") for _ in range(count)]
    t = ".trans" if trans else ""
    out.append(f"ldmatrix.sync.aligned.m8n8.x{count}{t}.shared.b16 {{{', '.join(regs)}}}, {addr};")
    return regs


def emit_mma(ctx, op) -> list[str]:
    out: list[str] = []
    d_type: TileType = op.result.type
    a_t, b_t = op.operands[0].type, op.operands[1].type
    if a_t.dtype not in (BF16, F16) or b_t.dtype != a_t.dtype:
        raise NotAvailableError(f"{op.NAME}: {a_t.dtype} x {b_t.dtype} products are not supported by the "
                                "mma.sync backend (bf16 and f16 are)", op.span)
    layout = ctx.tile_layout(d_type)
    grid = ctx.grid
    k_total = a_t.rows if op.TA else a_t.cols
    ab = "bf16" if a_t.dtype == BF16 else "f16"
    acc_dt = "f32" if d_type.dtype == F32 else "f16"
    # --- operands ------------------------------------------------------------------------
    region = ctx.plan.of_op(op) if mma_scratch_bytes(op, grid) else None
    cursor = region.offset if region else 0
    shared: dict[int, SharedTile] = {}
    a_regs: RegTile | None = None
    for index in (0, 1):
        v = op.operands[index]
        rep = ctx.get(v)
        dirty = _k_dirty(ctx, op, index)
        if isinstance(rep, SharedTile):
            shared[index] = rep
            continue
        if dirty:
            rep = zero_padding(ctx, op, rep, dirty, f"mma operand {'AB'[index]}", out)
        if index == 0 and _a_direct(op, grid):
            a_regs = rep
            continue
        st_type = TileType("st", v.type.dtype, v.type.rows, v.type.cols)
        st = SharedTile(st_type, Geometry.of_tile(st_type), cursor)
        cursor += _align(st_type.nbytes)
        out += ctx.sync.write(st.region)
        write_fragments(ctx, rep, st, out)
        shared[index] = st
    for st in shared.values():
        out += ctx.sync.read_(st.region)
    a_pat = b_pat = None
    if 0 in shared:
        if op.TA:   # A is [K, M]: rows are k, chunks are m (2 per band)
            a_pat = _operand_pattern(ctx, shared[0], "L2", None, (layout.rows, "row", 2))
        else:       # A is [M, K]: rows are m
            a_pat = _operand_pattern(ctx, shared[0], "L1", (layout.rows, "row", 16), None)
    if op.TB:       # B is [N, K]: rows are n (8 per chunk)
        b_pat = _operand_pattern(ctx, shared[1], "L2", (layout.cols, "col", 8), None)
    else:           # B is [K, N]: rows are k, chunks are n
        b_pat = _operand_pattern(ctx, shared[1], "L1", None, (layout.cols, "col", 1))
    # --- accumulator --------------------------------------------------------------------------
    acc_v = op.operand("acc")
    if acc_v is not None:
        acc = ctx.get(acc_v)
        cur = {(b, j): list(acc.regs[b][j]) for b in range(layout.bands) for j in range(layout.chunks)}
    else:
        zero = ctx.const_f32(0.0) if acc_dt == "f32" else ctx.imm_expr(("zero_b32",), "mov.b32 {r}, 0;")
        width = 4 if acc_dt == "f32" else 2
        cur = {(b, j): [zero] * width for b in range(layout.bands) for j in range(layout.chunks)}
    # --- the k loop ------------------------------------------------------------------------------
    for s in range(k_total // 16):
        a_frag = {}
        for b in range(layout.bands):
            if a_regs is not None:
                r = a_regs.regs[b]
                a_frag[b] = [r[2 * s][0], r[2 * s][1], r[2 * s + 1][0], r[2 * s + 1][1]]
            elif op.TA:
                addr = ctx.address(a_pat, shared[0].offset, 16 * s, 2 * b, out, shared[0].dyn)
                a_frag[b] = _ldmatrix(ctx, 4, True, addr, out)
            else:
                addr = ctx.address(a_pat, shared[0].offset, 16 * b, 2 * s, out, shared[0].dyn)
                a_frag[b] = _ldmatrix(ctx, 4, False, addr, out)
        for j in range(0, layout.chunks, 2):
            count = 4 if j + 1 < layout.chunks else 2
            if op.TB:
                addr = ctx.address(b_pat, shared[1].offset, 8 * j, 2 * s, out, shared[1].dyn)
            else:
                addr = ctx.address(b_pat, shared[1].offset, 16 * s, j, out, shared[1].dyn)
            regs = _ldmatrix(ctx, count, not op.TB, addr, out)
            b_frags = {j: regs[0:2]}
            if count == 4:
                b_frags[j + 1] = regs[2:4]
            for jj, bf in b_frags.items():
                for b in range(layout.bands):
                    kind = "f32" if acc_dt == "f32" else "b32"
                    d = [ctx.new(kind) for _ in cur[(b, jj)]]
                    out.append(f"mma.sync.aligned.m16n8k16.row.col.{acc_dt}.{ab}.{ab}.{acc_dt} "
                               f"{{{', '.join(d)}}}, {{{', '.join(a_frag[b])}}}, {{{', '.join(bf)}}}, "
                               f"{{{', '.join(cur[(b, jj)])}}};")
                    cur[(b, jj)] = d
    regs = [[cur[(b, j)] for j in range(layout.chunks)] for b in range(layout.bands)]
    ctx.bind(op.result, RegTile(d_type, layout, regs))
    return out


MMA_EMITTERS = {cls: emit_mma for cls in MMA_OPS}
MMA_SCRATCH = {cls: mma_scratch_bytes for cls in MMA_OPS}
