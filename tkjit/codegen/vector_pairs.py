"""Row vectors of a 16-bit tensor in the fragment column order, one 32-bit load per column pair.

In the mma / wgmma fragment order a thread's elements (chunk j, k = 0, 1) of an ``rv`` lie at
columns ``col_base + offset(j) + k`` with ``col_base`` and every ``offset(j)`` even: pairs of
adjacent 16-bit elements, 4-byte aligned (a tensor's data is 16-byte aligned, launcher.py).
The thread's elements are addressed from one base address at immediate offsets, against one
count of the columns left in the tensor: a pair wholly inside is one ``ld.global.b32``, a pair
whose second element is past the end (an odd length) one ``ld.global.u16`` of the first, both
predicated (zero outside). Before (``emit_memory._load_vector``'s element path) each element
took its own 64-bit address and bounds test: the bias of a 128x256 GEMM epilogue was 64 loads
and about 450 integer instructions per thread and tile, ahead of the activation on the tile's
critical path; now 64 loads of which at most 32 run, and about 100 instructions. Unpredicated
loads (a branch to an edge path) measured worse on the CPU side: ptxas then hoists all of them
and spills the bias of gelu's epilogue (68 spill instructions at 232 registers).
"""
from __future__ import annotations

from ..ir.types import BF16, F16, VectorType


def vector_loads_paired(ctx, param, t: VectorType, split, positions: dict) -> bool:
    """Whether ``load_vector_paired`` applies: an ``rv`` of a row-major 16-bit tensor whose
    element pairs (j, 0), (j, 1) are adjacent columns at even offsets."""
    g = param.type
    if t.kind != "rv" or g.dtype not in (BF16, F16) or ctx.strides.get(id(param)):
        return False
    chunks = {j for (j, _) in positions}
    return all((j, 0) in positions and (j, 1) in positions and positions[(j, 0)] % 2 == 0
               and positions[(j, 1)] == positions[(j, 0)] + 1 for j in chunks) and len(positions) == 2 * len(chunks)


def load_vector_paired(ctx, view, g, base: str, positions: dict, out: list[str]) -> dict:
    """{(chunk, k): f32 register} of the thread's elements (zero outside the tensor)."""
    kind = "bf16" if g.dtype == BF16 else "f16"
    c64, addr, left = ctx.new("b64"), ctx.new("b64"), ctx.new("b32")
    out.append(f"cvt.s64.s32 {c64}, {base};")
    out.append(f"shl.b64 {c64}, {c64}, 1;")
    out.append(f"add.s64 {addr}, {view.base}, {c64};")
    out.append(f"sub.s32 {left}, {view.d_cols}, {view.col0};")
    out.append(f"sub.s32 {left}, {left}, {base};")       # the valid columns from the thread's first
    elems = {key: ctx.new("f32") for key in positions}
    for j in sorted({j for (j, _) in positions}):
        off = positions[(j, 0)]
        both, first, w, lo, hi = ctx.new("pred"), ctx.new("pred"), ctx.new("b32"), ctx.new("b16"), ctx.new("b16")
        out.append(f"setp.gt.s32 {both}, {left}, {off + 1};")
        out.append(f"setp.eq.s32 {first}, {left}, {off + 1};")
        if view.lead_ok is not None:
            out.append(f"and.pred {both}, {both}, {view.lead_ok};")
            out.append(f"and.pred {first}, {first}, {view.lead_ok};")
        out.append(f"mov.b32 {w}, 0;")
        out.append(f"@{both} ld.global.b32 {w}, [{addr}+{2 * off}];")
        out.append(f"@{first} ld.global.u16 {w}, [{addr}+{2 * off}];")
        out.append(f"mov.b32 {{{lo}, {hi}}}, {w};")
        out.append(f"cvt.f32.{kind} {elems[(j, 0)]}, {lo};")
        out.append(f"cvt.f32.{kind} {elems[(j, 1)]}, {hi};")
    return elems
