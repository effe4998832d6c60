"""The interpreter's runtime values: tiles and vectors that carry validity, globals, scalars.

A tile's elements are float32 numbers exactly representable in its dtype, plus two boolean
vectors: which rows and which columns are valid (inside the tensor they came from). An element
is valid when its row and its column are; every other element is padding. A vector carries one
validity vector. Scalars are plain Python/numpy values: ``int`` (i32, wrapped to 32 bits),
``numpy.float32`` (float dtypes, rounded to the dtype), ``bool``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.types import DType, GlobalType


@dataclass
class TileValue:
    """A 2-D tile (shared or register): ``data`` [R, C] float32, ``rows`` [R] and ``cols`` [C] valid."""

    data: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    dtype: DType

    @staticmethod
    def full(data: np.ndarray, dtype: DType) -> "TileValue":
        r, c = data.shape
        return TileValue(data, np.ones(r, bool), np.ones(c, bool), dtype)

    def mask(self) -> np.ndarray:
        """The [R, C] mask of valid elements."""
        return self.rows[:, None] & self.cols[None, :]

    def all_valid(self) -> bool:
        return bool(self.rows.all() and self.cols.all())

    def with_data(self, data: np.ndarray, dtype: DType | None = None) -> "TileValue":
        return TileValue(data, self.rows, self.cols, dtype or self.dtype)

    def intersect(self, other: "TileValue", data: np.ndarray) -> "TileValue":
        """An elementwise result of self and other: valid where both are."""
        return TileValue(data, self.rows & other.rows, self.cols & other.cols, self.dtype)


@dataclass
class VectorValue:
    """A ``cv`` (one value per tile row) or ``rv`` (one per column): ``data`` [L], ``valid`` [L]."""

    data: np.ndarray
    valid: np.ndarray
    dtype: DType

    @staticmethod
    def full(data: np.ndarray, dtype: DType) -> "VectorValue":
        return VectorValue(data, np.ones(data.shape[0], bool), dtype)

    def all_valid(self) -> bool:
        return bool(self.valid.all())

    def with_data(self, data: np.ndarray, dtype: DType | None = None) -> "VectorValue":
        return VectorValue(data, self.valid, dtype or self.dtype)

    def intersect(self, other: "VectorValue", data: np.ndarray) -> "VectorValue":
        return VectorValue(data, self.valid & other.valid, self.dtype)


@dataclass
class GlobalValue:
    """A kernel's global tensor: ``memory`` is a writable numpy view of the caller's storage
    (bf16 as uint16 bits, fp8 as uint8 bits; see ``numerics.STORAGE_DTYPES``)."""

    name: str
    type: GlobalType
    memory: np.ndarray

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.memory.shape

    def dim_label(self, axis: int) -> str:
        """``N = 170`` for a named dimension, ``size 64`` for a fixed one."""
        d = self.type.dims[axis]
        size = self.memory.shape[axis]
        return f"{d} = {size}" if isinstance(d, str) else f"size {size}"


def wrap_i32(x: int) -> int:
    """Two's-complement wrap of a Python int to 32 bits (the GPU's integer arithmetic)."""
    return ((int(x) + 2**31) % 2**32) - 2**31
