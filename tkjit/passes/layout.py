"""layout: the swizzle of every shared tile, the operand major-ness of every mma, and the
register fragment layout of everything tensor cores produce or read.

* Shared tiles: ``swizzle`` = the largest of 128/64/32 B that divides the row bytes (a row of
  st<bf16>[128, 64] is 128 B: 128B), or ``none``; a ``swizzle`` already on the type is a pin.
  Rows wider than the span are stored as panels of ``span`` bytes (TMA boxes, wgmma atoms).
* mma: ``a_major``/``b_major`` say which dimension of a shared operand is contiguous. Tiles are
  row-major, so mma_AB's A [M, K] is K-major and its B [K, N] is MN-major; mma_ABt's B [N, K]
  is K-major. MN-major f16/bf16 operands are read as they are (wgmma's tA/tB bits); fp8 wgmma
  reads K-major only, so an MN-major fp8 operand is named in ``transpose``.
* Registers: every rt/cv/rv value connected to an mma's accumulator or register A operand (by
  elementwise maps, broadcasts, reductions, conversions, loop-carried values) gets
  ``layout=wgmma``: the accumulator fragment of wgmma (PTX §9.7.15.5, Fig. 149), whose
  bf16-packed form is also the A fragment of the next wgmma.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import PassError
from ..ir.core import Kernel, Op, Value
from ..ir.ops import (BINARY_OPS, BROADCAST_OPS, MMA_OPS, REDUCE_OPS, UNARY_OPS, CausalMask, CmpSelect, Copy,
                      Cvt, Mma)
from ..ir.types import FP8, TileType, Type, VectorType, is_register
from .decisions import subject_of
from .hopper import carried_groups, swizzle_for_row_bytes, wgmma_n
from .manager import Pass, PassContext, register_pass

SWIZZLE_NAMES = {128: "128B", 64: "64B", 32: "32B", 0: "none"}
PINNED_SWIZZLES = {"128B": 128, "64B": 64, "32B": 32, "none": 0, "0B": 0}
MAPS = (*BINARY_OPS, *UNARY_OPS, Cvt, CausalMask, CmpSelect, Copy, *BROADCAST_OPS, *REDUCE_OPS)
"""Ops whose register operands and results share one fragment layout."""


def with_type_attrs(t: Type, **updates) -> Type:
    merged = dict(t.attrs)
    merged.update(updates)
    return dataclasses.replace(t, attrs=tuple(sorted(merged.items())))


class _Groups:
    """Union-find over values."""

    def __init__(self) -> None:
        self.parent: dict[Value, Value] = {}

    def find(self, v: Value) -> Value:
        self.parent.setdefault(v, v)
        while self.parent[v] is not v:
            v = self.parent[v]
        return v

    def union(self, *values: Value) -> None:
        roots = [self.find(v) for v in values]
        for r in roots[1:]:
            if r is not roots[0]:
                self.parent[r] = roots[0]

    def members(self) -> dict[Value, list[Value]]:
        out: dict[Value, list[Value]] = {}
        for v in list(self.parent):
            out.setdefault(self.find(v), []).append(v)
        return out


def _all_values(kernel: Kernel):
    for op in kernel.walk():
        yield from op.results
        for region in op.regions:
            yield from region.args


@register_pass
@dataclass(frozen=True)
class Layout(Pass):
    """The ``layout`` pass: shared-tile swizzles, mma operand major-ness, wgmma register fragment
    layouts."""

    name = "layout"
    summary = "shared-tile swizzles, mma operand major-ness, wgmma register fragment layouts"
    target_specific = True
    max_swizzle: int = 128
    """The widest swizzle span to choose (128, 64, 32, or 0 for none); pins are kept."""

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        if self.max_swizzle not in SWIZZLE_NAMES:
            raise PassError(f"layout: max-swizzle must be 128, 64, 32 or 0, got {self.max_swizzle}")
        self.shared_tiles(kernel, ctx)
        for op in kernel.walk():
            if isinstance(op, MMA_OPS):
                self.mma_operands(op, ctx)
        self.register_tiles(kernel, ctx)
        return kernel

    # -- shared tiles ---------------------------------------------------------------------
    def shared_tiles(self, kernel: Kernel, ctx: PassContext) -> None:
        groups = _Groups()
        for v in _all_values(kernel):
            if isinstance(v.type, TileType) and v.type.space == "st":
                groups.union(v)
        for carried in carried_groups(kernel):
            if any(v in groups.parent for v in carried):
                groups.union(*carried)
        for members in groups.members().values():
            self.swizzle_group(members, ctx)

    def swizzle_group(self, members: list[Value], ctx: PassContext) -> None:
        head = next((v for v in members if v.owner is not None and isinstance(v.owner, Op)), members[0])
        t: TileType = head.type
        where = head.owner.span if isinstance(head.owner, Op) else None
        row_bytes = t.cols * t.dtype.nbytes
        pins = {str(v.type.attr("swizzle")) for v in members if v.type.attr("swizzle") is not None}
        if len(pins) > 1:
            raise PassError(f"{subject_of(head)} is pinned to two swizzles: {', '.join(sorted(pins))}",
                            where)
        if pins:
            pin = pins.pop()
            if pin not in PINNED_SWIZZLES:
                raise PassError(f"{subject_of(head)}: swizzle={pin} is not a swizzle; expected "
                                "128B, 64B, 32B or none", where)
            span = PINNED_SWIZZLES[pin]
            if span and row_bytes % span:
                raise PassError(f"{subject_of(head)}: swizzle={pin} needs rows of a multiple of "
                                f"{span} bytes, but a row of {t} is {row_bytes} bytes", where)
            why = "pinned by the kernel"
        else:
            span = swizzle_for_row_bytes(row_bytes)
            capped = min(span, self.max_swizzle) if span else 0
            why = (f"a row is {row_bytes} B ({t.cols} x {t.dtype}): the largest of 128/64/32 B "
                   f"that divides it" if span else f"a row is {row_bytes} B, which no swizzle "
                   f"span (128/64/32 B) divides")
            if capped != span:
                why += f", capped at {self.max_swizzle} B by the max-swizzle option"
            span = capped
        name = SWIZZLE_NAMES[span]
        for v in members:
            v.type = with_type_attrs(v.type, swizzle=name)
        if span:
            panels = row_bytes // span
            shape = (f"{panels} panels of {t.rows} rows x {span} B" if panels > 1
                     else f"{t.rows} rows x {span} B")
            why += f"; stored as {shape}, 1024-byte aligned"
        ctx.decide(subject_of(head), f"swizzle {name}", why, swizzle=span, row_bytes=row_bytes)

    # -- mma operands ---------------------------------------------------------------------
    def mma_operands(self, op: Mma, ctx: PassContext) -> None:
        a, b = op.operands[0].type, op.operands[1].type
        m, k = (a.cols, a.rows) if op.TA else (a.rows, a.cols)
        n = b.rows if op.TB else b.cols
        if m % 64:
            raise PassError(f"{op.NAME}: wgmma computes 64-row slabs, but M is {m}; use tiles "
                            "of a multiple of 64 rows", op.span)
        kstep = 32 if a.dtype in FP8 else 16
        if k % kstep:
            raise PassError(f"{op.NAME}: {a.dtype} wgmma steps K by {kstep}, but K is {k}", op.span)
        if b.space != "st":
            raise PassError(f"{op.NAME}: wgmma reads B from shared memory, but B is "
                            f"{subject_of(op.operands[1])} in registers; copy it into an st tile",
                            op.span)
        parts, transpose = [], ""
        if a.space == "st":
            op.attrs["a_major"] = "MN" if op.TA else "K"
            parts.append(f"A {op.attrs['a_major']}-major (tA={int(op.TA)})")
            if op.TA and a.dtype in FP8:
                transpose += "A"
        else:
            parts.append("A from registers (wgmma fragment)")
            if op.TA:
                transpose += "A"
        op.attrs["b_major"] = "K" if op.TB else "MN"
        parts.append(f"B {op.attrs['b_major']}-major (tB={int(not op.TB)})")
        if not op.TB and b.dtype in FP8:
            transpose += "B"
        span_b = swizzle_for_row_bytes(b.cols * b.dtype.nbytes)
        width = wgmma_n(n, span_b // b.dtype.nbytes if not op.TB and span_b else 8) or n // -(-n // 256)
        pieces = n // width
        shape = f"m64n{width}k{kstep}"
        reasons = [f"tiles are row-major: A is [{a.rows}, {a.cols}] and B [{b.rows}, {b.cols}], so "
                   f"{'M' if op.TA else 'K'} is A's contiguous dimension and "
                   f"{'K' if op.TB else 'N'} is B's; MN-major f16/bf16 operands are read in place "
                   "through the transpose bit"]
        if transpose:
            op.attrs["transpose"] = transpose
            reasons.append(f"{' and '.join(transpose)} must be transposed first: "
                           f"{'fp8 wgmma reads shared operands K-major only' if a.dtype in FP8 else 'wgmma reads a register A untransposed'}")
        issue = (f"each: {m // 64} slab(s) of 64 rows x {pieces * (k // kstep)} wgmma {shape}")
        ctx.decide(subject_of(op), "; ".join(parts) + f"; {issue}", "; ".join(reasons),
                   a_major=op.attrs.get("a_major", "registers"), b_major=op.attrs["b_major"],
                   transpose=transpose, instruction=shape)

    # -- register fragments ---------------------------------------------------------------
    def register_tiles(self, kernel: Kernel, ctx: PassContext) -> None:
        groups = _Groups()
        tensor_core: list[Value] = []
        for op in kernel.walk():
            regs = [v for v in (*op.operands, *op.results) if _is_fragment(v.type)]
            if isinstance(op, MAPS) and regs:
                groups.union(*regs)
            elif isinstance(op, MMA_OPS):
                mma_regs = [v for v in (op.operands[0], *op.operands[2:], op.result)
                            if _is_fragment(v.type)]
                groups.union(*mma_regs)
                tensor_core.append(op.result)
            else:
                for v in regs:
                    groups.union(v)
        for carried in carried_groups(kernel):
            fragments = [v for v in carried if _is_fragment(v.type)]
            if fragments:
                groups.union(*fragments)
        marked = {groups.find(v) for v in tensor_core}
        others: list[Value] = []
        for root, members in groups.members().items():
            if root in marked:
                self.mark_wgmma(members, ctx)
            else:
                others += members
        if others:
            ctx.decide(_names(others), "no fragment layout chosen here",
                       "no tensor-core op produces or reads these values; their layout is the "
                       "lowering's choice")

    def mark_wgmma(self, members: list[Value], ctx: PassContext) -> None:
        for v in members:
            v.type = with_type_attrs(v.type, layout="wgmma")
        tiles = [v for v in members if isinstance(v.type, TileType)]
        rows = {v.type.rows for v in tiles}
        bad = [v for v in tiles if v.type.rows % 64]
        if bad:
            raise PassError(f"{subject_of(bad[0])} ({bad[0].type}) computes with a wgmma "
                            "accumulator, so its rows must be a multiple of 64",
                            bad[0].owner.span if isinstance(bad[0].owner, Op) else None)
        ctx.decide(_names(members), "layout wgmma",
                   "connected to a wgmma accumulator: thread t = 32w + l of a consumer warpgroup "
                   "holds rows 16w + l/4 (+8) and columns 8j + 2(l%4) (+1) of each 64-row slab; "
                   "a cv holds those 2 rows per slab and reduces across the 4 lanes of a quad, an "
                   "rv those columns; packed to bf16 it is the A fragment of the next wgmma",
                   values=len(members), rows=sorted(rows))


def _is_fragment(t: Type) -> bool:
    return is_register(t) and isinstance(t, (TileType, VectorType))


def _names(values: list[Value]) -> str:
    """``%acc, %p (5 values)``: the distinct names among ``values`` and how many there are."""
    named = sorted({f"%{v.hint}" for v in values if v.hint})
    shown = ", ".join(named[:6]) + (", ..." if len(named) > 6 else "")
    count = f"{len(values)} value{'s' * (len(values) != 1)}"
    return f"{shown} ({count})" if shown else count
