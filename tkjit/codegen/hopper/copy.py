"""The producer's fallback when TMA cannot address a tensor (rows that are not a multiple of 16
bytes, e.g. a bf16 GEMM with K = 700): the 128 producer threads copy the tile element by
element (1-, 2- or 4-byte elements) (zero outside the tensor) into the same swizzled panels a TMA box would have written,
fence the generic-proxy writes for the async proxy (wgmma reads through it), meet on a named
barrier, and one thread arrives on full[s]. Slow, but every shape runs.

Swizzling is applied to byte offsets from a pattern-aligned base (PTX §5.5.7):
``a ^ (((a >> 7) & mask) << 4)`` with mask 7 / 3 / 1 for 128 / 64 / 32-byte spans.
"""
from __future__ import annotations

from .builder import Builder
from .wgmma import Operand

SWIZZLE_MASKS = {128: 7, 64: 3, 32: 1}
ELEMENT = {1: ("u8", "b16"), 2: ("b16", "b16"), 4: ("b32", "b32")}
"""Element bytes -> (the copy's load/store type, its register's)."""
PRODUCER_BARRIER = 1
"""Named barrier of the producer warpgroup's 128 threads (0 is the CTA-wide one)."""
PRODUCER_THREADS = 128


def copy_tile(b: Builder, op: Operand, thread: str, src: str, rows: str, cols: str, row0: str, col0: str,
              dst: str) -> None:
    """Copy rows [row0, row0 + op.rows) x cols [col0, col0 + op.cols) of the row-major global
    tensor at ``src`` (``rows`` x ``cols`` elements) into the panels at shared ``dst``."""
    top = b.label("copy")
    kind, reg_kind = ELEMENT[op.elem_bytes]
    idx, r, c, gr, gc = b.reg(), b.reg(), b.reg(), b.reg(), b.reg()
    b(f"mov.u32 {idx}, {thread};")
    b.place(top)
    _split(b, idx, op.cols, r, c)
    inside, ok_c, value = b.pred(), b.pred(), b.reg(reg_kind)
    off, addr = b.reg("b64"), b.reg("b64")
    b(f"add.s32 {gr}, {row0}, {r};", f"add.s32 {gc}, {col0}, {c};",
      f"setp.lt.s32 {inside}, {gr}, {rows};", f"setp.lt.s32 {ok_c}, {gc}, {cols};",
      f"and.pred {inside}, {inside}, {ok_c};", f"mov.{reg_kind} {value}, 0;",
      f"mul.wide.s32 {off}, {gr}, {cols};", f"cvt.s64.s32 {addr}, {gc};", f"add.s64 {off}, {off}, {addr};")
    if op.elem_bytes > 1:
        b(f"shl.b64 {off}, {off}, {op.elem_bytes.bit_length() - 1};")
    b(f"add.s64 {addr}, {src}, {off};", f"@{inside} ld.global.nc.{kind} {value}, [{addr}];")
    panel, inner, a, x = b.reg(), b.reg(), b.reg(), b.reg()
    _split(b, c, op.panel_cols, panel, inner)
    b(f"mul.lo.u32 {a}, {panel}, {op.panel_bytes};", f"mad.lo.u32 {a}, {r}, {op.span}, {a};",
      f"mad.lo.u32 {a}, {inner}, {op.elem_bytes}, {a};",
      f"bfe.u32 {x}, {a}, 7, {SWIZZLE_MASKS[op.span].bit_length()};", f"shl.b32 {x}, {x}, 4;",
      f"xor.b32 {a}, {a}, {x};", f"add.u32 {a}, {a}, {dst};", f"st.shared.{kind} [{a}], {value};")
    more = b.pred()
    b(f"add.u32 {idx}, {idx}, {PRODUCER_THREADS};",
      f"setp.lt.u32 {more}, {idx}, {op.rows * op.cols};", f"@{more} bra {top};")


def publish() -> list[str]:
    """After the copies of a stage: make them visible to the async proxy, then let every
    producer thread finish its part before the one arrival."""
    return ["fence.proxy.async.shared::cta;", f"bar.sync {PRODUCER_BARRIER}, {PRODUCER_THREADS};"]


def _split(b: Builder, x: str, n: int, quotient: str, remainder: str) -> None:
    if n & (n - 1) == 0:
        b(f"shr.u32 {quotient}, {x}, {n.bit_length() - 1};", f"and.b32 {remainder}, {x}, {n - 1};")
    else:
        b(f"div.u32 {quotient}, {x}, {n};", f"rem.u32 {remainder}, {x}, {n};")
