"""PTX text helpers: the virtual-register namer, immediates, and the tiny instruction formatters
every emitter shares.

Registers are virtual (ptxas allocates the physical ones); each kind has its own prefix:

    %p  .pred      %h  .b16      %r  .b32 (s32/u32/packed bf16x2)      %f  .f32      %rd  .b64
"""
from __future__ import annotations

import math
import struct

KINDS = {"pred": ("%p", ".pred"), "b16": ("%h", ".b16"), "b32": ("%r", ".b32"),
         "f32": ("%f", ".f32"), "b64": ("%rd", ".b64")}


class Namer:
    """Hands out fresh virtual registers and declares them at the top of the kernel body."""

    def __init__(self) -> None:
        self.counts = {kind: 0 for kind in KINDS}

    def new(self, kind: str) -> str:
        prefix, _ = KINDS[kind]
        self.counts[kind] += 1
        return f"{prefix}{self.counts[kind]}"

    def pred(self) -> str:
        return self.new("pred")

    def b32(self) -> str:
        return self.new("b32")

    def f32(self) -> str:
        return self.new("f32")

    def b64(self) -> str:
        return self.new("b64")

    def b16(self) -> str:
        return self.new("b16")

    def declarations(self) -> list[str]:
        out = []
        for kind, (prefix, ptx_type) in KINDS.items():
            if self.counts[kind]:
                out.append(f"  .reg {ptx_type} {prefix}<{self.counts[kind] + 1}>;")
        return out


def f32_imm(value: float) -> str:
    """An f32 immediate in PTX's exact hexadecimal form (``0f3F800000`` is 1.0)."""
    if math.isnan(value):
        return "0f7FC00000"
    try:
        packed = struct.pack("<f", float(value))
    except OverflowError:  # rounds (to nearest) past f32's range: infinity, as numpy's f32 in the interpreter
        packed = struct.pack("<f", math.copysign(math.inf, value))
    bits = struct.unpack("<I", packed)[0]
    return f"0f{bits:08X}"


def f32_round(value: float) -> float:
    """The f32 nearest to ``value`` (what an f32 register will hold)."""
    if math.isnan(value) or math.isinf(value):
        return value
    return struct.unpack("<f", struct.pack("<f", float(value)))[0]


LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
TWO_PI_INV = 0.15915494309189535
TWO_PI_HI = 6.28318548202514648   # f32(2*pi)
TWO_PI_LO = -1.7484556e-07         # 2*pi - f32(2*pi)
