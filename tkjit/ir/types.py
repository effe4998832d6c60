"""The tile IR's element dtypes and value types: immutable, hashable, and printing themselves.

    f32  i32  bool                      scalars
    gl<bf16>[M, K]                      a global tensor (named dims bind at launch, ints are fixed)
    st<bf16>[128, 64]                   a shared-memory tile
    st<bf16, swizzle=128B>[128, 64]     ... with layout attributes chosen by passes (or pinned)
    rt<f32>[128, 256]                   a register tile (block-level: spread over warps by the compiler)
    cv<f32>[128]                        a column vector: one value per tile row (row_max's result)
    rv<f32>[256]                        a row vector: one value per tile column (col_sum's result)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from ..frozen import Frozen


@dataclass(unsafe_hash=True)
class DType(Frozen):
    """An element type: its name as printed, its width in bits and whether it is a float."""

    name: str
    bits: int
    is_float: bool

    def __str__(self) -> str:
        return self.name

    @property
    def nbytes(self) -> int:
        return max(1, self.bits // 8)


BF16 = DType("bf16", 16, True)
F16 = DType("f16", 16, True)
F32 = DType("f32", 32, True)
E4M3 = DType("e4m3", 8, True)
E5M2 = DType("e5m2", 8, True)
I32 = DType("i32", 32, False)
BOOL = DType("bool", 1, False)

DTYPES: dict[str, DType] = {d.name: d for d in (BF16, F16, F32, E4M3, E5M2, I32, BOOL)}
TILE_DTYPES = (BF16, F16, F32, E4M3, E5M2)
MMA_INPUT_DTYPES = (BF16, F16, E4M3, E5M2)
FP8 = (E4M3, E5M2)


def dtype(name: str) -> DType:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype '{name}' (expected one of {', '.join(DTYPES)})") from None


AttrValue = Union[int, float, str, bool]


def _attrs_text(attrs: tuple[tuple[str, AttrValue], ...]) -> str:
    return "".join(f", {k}={v}" for k, v in attrs)


class Type:
    """Base of all IR types."""

    def __str__(self) -> str:  # pragma: no cover - every subclass overrides
        raise NotImplementedError


@dataclass(unsafe_hash=True)
class ScalarType(Type, Frozen):
    """A scalar value of one dtype (``f32``, ``i32``, ``bool``)."""

    dtype: DType

    def __str__(self) -> str:
        return self.dtype.name


@dataclass(unsafe_hash=True)
class GlobalType(Type, Frozen):
    """A global tensor, ``gl<dtype>[dims]``: ints are fixed, names bind at launch."""

    dtype: DType
    dims: tuple[Union[int, str], ...]

    def __str__(self) -> str:
        return f"gl<{self.dtype}>[{', '.join(str(d) for d in self.dims)}]"

    @property
    def rank(self) -> int:
        return len(self.dims)


@dataclass(unsafe_hash=True)
class TileType(Type, Frozen):
    """A 2-D tile in shared memory (``space='st'``) or registers (``space='rt'``)."""

    space: str
    dtype: DType
    rows: int
    cols: int
    attrs: tuple[tuple[str, AttrValue], ...] = ()

    def __str__(self) -> str:
        return f"{self.space}<{self.dtype}{_attrs_text(self.attrs)}>[{self.rows}, {self.cols}]"

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    @property
    def nbytes(self) -> int:
        return self.rows * self.cols * self.dtype.nbytes

    @property
    def is_shared(self) -> bool:
        return self.space == "st"

    def attr(self, key: str, default: AttrValue | None = None) -> AttrValue | None:
        return dict(self.attrs).get(key, default)

    def with_attrs(self, **updates: AttrValue) -> "TileType":
        merged = dict(self.attrs)
        merged.update(updates)
        return TileType(self.space, self.dtype, self.rows, self.cols, tuple(sorted(merged.items())))

    def with_dtype(self, dt: DType) -> "TileType":
        return TileType(self.space, dt, self.rows, self.cols, self.attrs)

    def with_space(self, space: str) -> "TileType":
        return TileType(space, self.dtype, self.rows, self.cols, ())


@dataclass(unsafe_hash=True)
class VectorType(Type, Frozen):
    """``cv``: one value per tile row (length = rows); ``rv``: one value per tile column."""

    kind: str
    dtype: DType
    length: int
    attrs: tuple[tuple[str, AttrValue], ...] = ()

    def __str__(self) -> str:
        return f"{self.kind}<{self.dtype}{_attrs_text(self.attrs)}>[{self.length}]"

    @property
    def shape(self) -> tuple[int]:
        return (self.length,)

    @property
    def nbytes(self) -> int:
        return self.length * self.dtype.nbytes

    def with_dtype(self, dt: DType) -> "VectorType":
        return VectorType(self.kind, dt, self.length, self.attrs)


def is_scalar(t: Type) -> bool:
    return isinstance(t, ScalarType)


def is_tile(t: Type) -> bool:
    return isinstance(t, TileType)


def is_vector(t: Type) -> bool:
    return isinstance(t, VectorType)


def is_register(t: Type) -> bool:
    """Values elementwise maps, reductions and broadcasts work on (registers or scalars)."""
    return isinstance(t, (ScalarType, VectorType)) or (isinstance(t, TileType) and t.space == "rt")


def with_dtype(t: Type, dt: DType) -> Type:
    if isinstance(t, ScalarType):
        return ScalarType(dt)
    if isinstance(t, (TileType, VectorType)):
        return t.with_dtype(dt)
    raise TypeError(f"{t} has no element dtype to change")


def element_dtype(t: Type) -> DType:
    return t.dtype  # every type has one


def _a(dt: DType) -> str:
    """The article a dtype name takes when read aloud: 'an f32', 'an i32', 'a bf16'."""
    return "an" if dt.name[0] in "efi" else "a"


def describe(t: Type) -> str:
    """A phrase for diagnostics: 'a bf16 shared tile 128x64', 'an f32 column vector of 128'."""
    if isinstance(t, TileType):
        where = "shared" if t.space == "st" else "register"
        return f"{_a(t.dtype)} {t.dtype} {where} tile {t.rows}x{t.cols}"
    if isinstance(t, VectorType):
        kind = "column vector" if t.kind == "cv" else "row vector"
        return f"{_a(t.dtype)} {t.dtype} {kind} of {t.length}"
    if isinstance(t, GlobalType):
        return f"a global {t.dtype} tensor [{', '.join(map(str, t.dims))}]"
    return f"{_a(t.dtype)} {t} scalar"


# Hardware facts the type checker enforces (Hopper, sm_90a).
TILE_QUANTUM = 16            # tile rows/cols and vector lengths are multiples of 16
MAX_SHARED_BYTES = 232_448   # opt-in shared memory per block on H100/H200
MAX_REGISTER_TILE_BYTES = 128 * 1024  # one register tile: half the 256 KB register file


def register_tile_problem(t: Type) -> str | None:
    """Why a register tile is too large for the register file, or None. Not a type error: the
    ``stream-cols`` pass runs a row-wise program over column chunks, so the front end reports it
    only for a tile that pass cannot stream (``passes.stream_cols.oversized_tile_problem``)."""
    if isinstance(t, TileType) and t.space == "rt" and t.nbytes > MAX_REGISTER_TILE_BYTES:
        return (f"{t} needs {t.nbytes} bytes of registers; one register tile may use at most "
                f"{MAX_REGISTER_TILE_BYTES}")
    return None


def type_problem(t: Type) -> str | None:
    """Why a tile or vector type cannot exist on the hardware, or None when it can (a register
    tile's size is checked apart: ``register_tile_problem``)."""
    if isinstance(t, TileType):
        for what, n in (("rows", t.rows), ("columns", t.cols)):
            if n <= 0 or n % TILE_QUANTUM:
                return f"{t}: tile {what} must be a positive multiple of {TILE_QUANTUM}, got {n}"
        if t.space == "st" and t.nbytes > MAX_SHARED_BYTES:
            return f"{t} needs {t.nbytes} bytes of shared memory; the limit is {MAX_SHARED_BYTES}"
    if isinstance(t, VectorType):
        if t.length <= 0 or t.length % TILE_QUANTUM:
            return f"{t}: vector length must be a positive multiple of {TILE_QUANTUM}, got {t.length}"
        if t.nbytes > MAX_REGISTER_TILE_BYTES:
            return f"{t} is too large for registers"
    return None


I32_T = ScalarType(I32)
F32_T = ScalarType(F32)
BOOL_T = ScalarType(BOOL)
