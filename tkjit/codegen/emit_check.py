"""Checked mode's emitter (both GPU backends: the general sm_90a lowering's consumers emit
through this table too): a ``check`` op records its first failure in the launch's error buffer.

No branch and no early exit: the failing threads race for word 0 with ``atom.cas`` (0 → 1), the
winner writes the check's id and values (runtime/device_checks.py has the layout), and every
thread goes on. What follows a failed check is safe to run (passes/checks.py: divisions and loop
steps continue on defined values, stores are clipped to their tensors), so no role of a
warp-specialized kernel leaves its barrier protocol early and nothing waits forever.
"""
from __future__ import annotations

from ..errors import NotAvailableError
from ..ir.ops.check import Check


def emit_check(ctx, op: Check) -> list[str]:
    buf = getattr(ctx, "check_buffer", None)
    if buf is None:
        raise NotAvailableError("a check op needs the error buffer parameter of checked mode", op.span)
    ok = ctx.get(op.operands[0]).reg
    old, won, ident = ctx.new("b32"), ctx.new("pred"), ctx.new("b32")
    out = [f"mov.u32 {old}, 1;",
           f"@!{ok} atom.global.cas.b32 {old}, [{buf}], 0, 1;",
           f"setp.eq.u32 {won}, {old}, 0;",
           f"mov.u32 {ident}, {op.attrs['id']};",
           f"@{won} st.global.b32 [{buf}+4], {ident};"]
    for i, v in enumerate(op.variadic()):
        out.append(f"@{won} st.global.b32 [{buf}+{8 + 4 * i}], {ctx.get(v).reg};")
    return out


CHECK_EMITTERS = {Check: emit_check}
