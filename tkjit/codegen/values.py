"""What an IR value is during emission: registers (scalars, register tiles, vectors) or a place
in shared memory (shared tiles).

* ``Scalar``: one register: ``%r`` for i32, ``%p`` for bool, ``%f`` for every float dtype (a
  bf16/f16 scalar is an f32 register holding a value rounded to that dtype).
* ``RegTile``: the thread's part of a register tile in the fragment layout (layout.py). f32
  tiles hold one ``%f`` per element, ``regs[band][chunk][i]`` with i = 2*half + column-in-pair;
  bf16/f16 tiles hold packed pairs, ``regs[band][chunk][half]`` (low half = even column).
* ``RegVec``: a cv (``regs[band][half]``) or rv (``regs[chunk][column-in-pair]``) as f32 registers.
* ``SharedTile``: a byte offset into the kernel's dynamic shared memory and the tile's Geometry
  (plus a run-time offset register for the stage buffers of a pipelined load).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.types import DType, TileType, VectorType
from .layout import AxisSplit, TileLayout
from .smem import Geometry, Region


@dataclass
class Scalar:
    reg: str
    dtype: DType


@dataclass
class RegTile:
    type: TileType
    layout: TileLayout
    regs: list

    @property
    def packed(self) -> bool:
        return self.type.dtype.bits == 16


@dataclass
class RegVec:
    type: VectorType
    split: AxisSplit
    regs: list

    @property
    def is_cv(self) -> bool:
        return self.type.kind == "cv"


@dataclass
class SharedTile:
    type: TileType
    geometry: Geometry
    offset: int
    dyn: str | None = None
    """A register added to ``offset`` at run time (the current stage of a pipelined load)."""
    span: int = 0
    """Bytes the tile may occupy from ``offset`` (all stages); 0: the tile's own size."""

    @property
    def region(self) -> Region:
        return Region(self.offset, self.span or self.geometry.nbytes)
