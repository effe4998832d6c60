"""Cache hints on the register-tile backend's streamed global accesses, asked for by kernel
attributes that stream-cols sets from its options (``store_hint``, ``load_hint``, ``l2_prefetch``;
off by default, logged there):

* ``store_hint = "cs"``: register tiles stored straight from registers (direct.py) use
  ``st.global.cs`` (cache streaming: evict-first in L1 and L2); ``"evict_first"``:
  ``st.global.L1::no_allocate.L2::cache_hint`` with an L2 evict-first policy (``createpolicy``);
* ``load_hint = "evict_first"``: tile copies into shared memory (globalmem.copy_in) take
  ``cp.async...L2::cache_hint`` with that policy;
* ``l2_prefetch = 64 | 128 | 256``: those copies carry ``.L2::<n>B``, the L2 prefetch size.
"""
from __future__ import annotations

STORE_HINTS = ("none", "cs", "evict_first")
LOAD_HINTS = ("none", "evict_first")
L2_PREFETCH = (0, 64, 128, 256)


def _attr(ctx, name: str, default):
    kernel = getattr(ctx, "kernel", None)
    return getattr(kernel, "attrs", {}).get(name, default)


def _policy(ctx, kind: str) -> str:
    def build(out: list[str]) -> str:
        r = ctx.new("b64")
        out.append(f"createpolicy.fractional.L2::{kind}.b64 {r}, 1.0;")
        return r
    return ctx.cached(("l2_policy", kind), build)


def global_store(ctx) -> tuple[str, str]:
    """(the store's opcode up to its vector width, the operand suffix) for a streamed store."""
    hint = _attr(ctx, "store_hint", "none")
    if hint == "cs":
        return "st.global.cs", ""
    if hint == "evict_first":
        return "st.global.L1::no_allocate.L2::cache_hint", f", {_policy(ctx, 'evict_first')}"
    return "st.global", ""


def cp_async(ctx) -> tuple[str, str]:
    """(the 16-byte cp.async's opcode, the operand suffix) for a tile copy into shared memory."""
    op, suffix = "cp.async.cg.shared.global", ""
    if _attr(ctx, "load_hint", "none") == "evict_first":
        op += ".L2::cache_hint"
        suffix = f", {_policy(ctx, 'evict_first')}"
    size = _attr(ctx, "l2_prefetch", 0)
    if size:
        op += f".L2::{size}B"
    return op, suffix
