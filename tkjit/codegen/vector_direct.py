"""Row vectors of a 16-bit tensor in the contiguous column order, 16 bytes per lane.

In that order (``WarpGrid.contiguous_cols``) a thread's elements (chunk 4m + q, column k) of an
``rv`` lie at columns ``col_base + 32m + 2q + k``: for each group m, 8 contiguous elements, one
16-byte vector of a bf16/f16 row. When the tensor's length is a constant multiple of 8 elements
a vector is all inside or all outside it, so one predicated ``ld.global.v4`` per group replaces
eight 2-byte loads (outside elements stay zero, like the scalar loads')."""
from __future__ import annotations

from ..ir.types import BF16, F16, VectorType


def vector_loads_direct(ctx, param, t: VectorType, split) -> bool:
    """Whether ``load_vector_direct`` applies to a load of ``t`` from ``param`` (a global tensor;
    not one whose strides are run-time values, option ``strided``: its rows may be unaligned)."""
    g = param.type
    last = g.dims[-1]
    return (ctx.grid.contiguous_cols and t.kind == "rv" and g.dtype in (BF16, F16) and split.per_warp % 4 == 0
            and isinstance(last, int) and last % 8 == 0 and not ctx.strides.get(id(param)))


def load_vector_direct(ctx, view, g, split, base: str, out: list[str]) -> dict:
    """{(chunk, k): f32 register} of the thread's elements, one 16-byte load per 32-column group."""
    elems = {}
    for m in range(split.per_warp // 4):
        idx = ctx.new("b32")
        out.append(f"add.s32 {idx}, {base}, {32 * m};")
        ok = view.valid(None, idx, out)
        addr = view.element_address(None, idx, out)
        words = [ctx.new("b32") for _ in range(4)]
        out += [f"mov.b32 {w}, 0;" for w in words]
        out.append(f"@{ok} ld.global.v4.b32 {{{', '.join(words)}}}, [{addr}];")
        for q, w in enumerate(words):
            for k in (0, 1):
                elems[(4 * m + q, k)] = ctx.unpack(g.dtype, w, k, out)
    return elems
