"""wgmma on sm_90a: shared-memory matrix descriptors and the instruction strings.

A descriptor (PTX §9.7.15.5.1.2.2) is 64 bits:

    bits  0-13  start address  (addr & 0x3FFFF) >> 4
    bits 16-29  leading-dimension byte offset (LBO) >> 4
    bits 32-45  stride-dimension byte offset (SBO) >> 4
    bits 49-51  base offset (0: every tile here starts on its swizzle pattern's boundary)
    bits 62-63  swizzle: 0 none, 1 = 128B, 2 = 64B, 3 = 32B

Tiles are stored as *panels*: ``span`` bytes of every row (span = the swizzle width), the rows
one after another, then the next panel (what a TMA box of ``span`` inner bytes writes). So

* K-major (A of mma_AB, B of mma_ABt): SBO = 8 rows x span (one swizzle atom); LBO is unused
  (written as 16 B, "assumed 1"); a k16 step is +32 B inside the panel, and every span/32 steps
  the next panel (+ rows x span).
* MN-major (B of mma_AB): SBO = 8 K-rows x span; LBO = the distance between two atoms along N,
  i.e. one panel (K-rows x span); a k16 step is +16 K-rows x span.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...frozen import Frozen

SWIZZLE_CODES = {128: 1, 64: 2, 32: 3}
"""The descriptor's swizzle field (note: the reverse of the TMA enum's order)."""
ADDRESS_MASK = 0x3FFFF
K_STEP_BYTES = 32
"""One k16 step of a 16-bit type along a K-major row."""
WGMMA_TYPES = {"bf16": "bf16", "f16": "f16"}


def encode_field(nbytes: int) -> int:
    """A byte offset or address as a descriptor field (16-byte units)."""
    if nbytes % 16:
        raise ValueError(f"descriptor offsets are 16-byte aligned, got {nbytes}")
    return (nbytes & ADDRESS_MASK) >> 4


def descriptor(address: int, lbo: int, sbo: int, swizzle: int) -> int:
    """The 64-bit descriptor of a tile at shared ``address`` (bytes; swizzle span in bytes)."""
    return descriptor_constant(lbo, sbo, swizzle) | encode_field(address)


def descriptor_constant(lbo: int, sbo: int, swizzle: int) -> int:
    """Everything in a descriptor but the start address: OR the encoded address into it."""
    return (encode_field(lbo) << 16) | (encode_field(sbo) << 32) | (SWIZZLE_CODES[swizzle] << 62)


@dataclass(unsafe_hash=True)
class Operand(Frozen):
    """How one wgmma operand lies in a stage: ``rows`` x ``cols`` elements (rows along M/N for
    K-major, along K for MN-major), ``span``-byte panels, ``major`` "K" or "MN"."""

    major: str
    rows: int
    cols: int
    span: int
    elem_bytes: int = 2

    @property
    def panel_cols(self) -> int:
        return self.span // self.elem_bytes

    @property
    def panel_bytes(self) -> int:
        return self.rows * self.span

    @property
    def lbo(self) -> int:
        return 16 if self.major == "K" else self.panel_bytes

    @property
    def sbo(self) -> int:
        return 8 * self.span

    @property
    def constant(self) -> int:
        return descriptor_constant(self.lbo, self.sbo, self.span)

    def offset(self, k_step: int, mn_start: int) -> int:
        """Bytes from the tile's start to where a wgmma reads k16 step ``k_step`` of the rows (or
        columns, MN-major) from ``mn_start`` on."""
        if self.major == "K":
            steps_per_panel = self.span // K_STEP_BYTES
            panel, inside = divmod(k_step, steps_per_panel)
            return panel * self.panel_bytes + mn_start * self.span + inside * K_STEP_BYTES
        if mn_start % self.panel_cols:
            raise ValueError(f"an MN-major operand is read from whole atoms of {self.panel_cols} "
                             f"columns, not from column {mn_start}")
        return (mn_start // self.panel_cols) * self.panel_bytes + k_step * 16 * self.span


def mma_instruction(n: int, dtype: str, acc: list[str], desc_a: str, desc_b: str,
                    tb: int, scale_d: str = "1", ta: int = 0) -> str:
    """``wgmma.mma_async`` SS form, f32 accumulators, m64nNk16; A K-major (tA = 0) unless ``ta``."""
    regs = ", ".join(acc)
    t = WGMMA_TYPES[dtype]
    return (f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} {{{regs}}}, {desc_a}, {desc_b}, "
            f"{scale_d}, 1, 1, {ta}, {tb};")


FENCE = "wgmma.fence.sync.aligned;"
COMMIT = "wgmma.commit_group.sync.aligned;"


def wait(pending: int) -> str:
    return f"wgmma.wait_group.sync.aligned {pending};"


def mma_rs_instruction(n: int, dtype: str, acc: list[str], a_regs: list[str], desc_b: str,
                       tb: int, scale_d: str = "1") -> str:
    """``wgmma.mma_async`` RS form: A (4 x .b32, the accumulator fragment layout packed to 16-bit
    pairs) from registers, B through a descriptor; f32 accumulators, m64nNk16. No tA operand."""
    regs = ", ".join(acc)
    t = WGMMA_TYPES[dtype]
    return (f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} {{{regs}}}, {{{', '.join(a_regs)}}}, "
            f"{desc_b}, {scale_d}, 1, 1, {tb};")
