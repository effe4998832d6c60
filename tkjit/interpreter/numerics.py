"""Exact round-to-nearest-even conversions between float32 and the narrow float dtypes.

Every narrow value is held as a float32 that is exactly representable in its dtype; these
functions are where the rounding happens (loads into narrow tiles, ``cvt``, stores into narrow
globals) and where bits are read from / written to tensor memory.

    round_to(x, dt)   float32 array -> float32 array of values representable in dt
    encode(x, dt)     float32 array -> the dt's bit patterns (uint16 / uint8)
    decode(b, dt)     bit patterns  -> float32 array

Rules (checked against torch's own conversions in tests/test_numerics.py):

- bf16: RNE on the float32 bits; overflow rounds to ±inf; NaN stays NaN (0x7FC0 with the sign).
- f16: numpy's float32 -> float16 cast (IEEE RNE, overflow to ±inf, subnormals kept).
- e4m3 (the ``fn`` variant: no infinities, max 448, NaN = 0x7F/0xFF): RNE; every magnitude
  beyond 448, infinities included, saturates to ±448 (what torch does); NaN -> 0x7F | sign.
- e5m2 (IEEE-like: max 57344, ±inf = 0x7C/0xFC, NaN = 0x7F): RNE; magnitudes that round
  past 57344 (from 61440 up) become ±inf; NaN -> 0x7F | sign.
- i32 (a float tile stored into an i32 global, a float scalar cvt to i32): round to nearest
  even, saturate to the i32 range, NaN -> 0 (``cvt.rni.s32.f32``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.types import BF16, E4M3, E5M2, F16, F32, I32, DType


@dataclass(frozen=True)
class Fp8Format:
    """An 8-bit float layout: 1 sign bit, ``exp_bits`` exponent bits, ``man_bits`` mantissa bits."""

    exp_bits: int
    man_bits: int
    bias: int
    max_finite: float
    has_inf: bool  # e5m2 overflows to inf; e4m3fn has no inf and saturates

    @property
    def min_normal_exp(self) -> int:
        return 1 - self.bias


E4M3_FORMAT = Fp8Format(exp_bits=4, man_bits=3, bias=7, max_finite=448.0, has_inf=False)
E5M2_FORMAT = Fp8Format(exp_bits=5, man_bits=2, bias=15, max_finite=57344.0, has_inf=True)
FP8_FORMATS = {E4M3: E4M3_FORMAT, E5M2: E5M2_FORMAT}
FP8_NAN_BITS = 0x7F


# -- bf16 ----------------------------------------------------------------------------------
def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits (uint16), round to nearest even."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    lsb = (bits >> 16) & 1
    rounded = ((bits + 0x7FFF + lsb) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        quiet = ((bits >> 16) | 0x0040).astype(np.uint16)
        rounded = np.where(nan, quiet, rounded)
    return rounded


def _bf16_decode(b: np.ndarray) -> np.ndarray:
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


# -- fp8 -----------------------------------------------------------------------------------
def _fp8_round(x: np.ndarray, fmt: Fp8Format) -> np.ndarray:
    """float32 -> float64 values representable in ``fmt`` (RNE; overflow per the format)."""
    x64 = np.asarray(x, dtype=np.float64)
    mag = np.abs(x64)
    finite = np.isfinite(mag) & (mag > 0)
    _, e2 = np.frexp(np.where(finite, mag, 1.0))
    exp = np.maximum(e2 - 1, fmt.min_normal_exp)  # floor(log2|x|), clamped to the subnormal range
    quantum = np.ldexp(1.0, exp - fmt.man_bits)
    rounded = np.where(finite, np.rint(mag / quantum) * quantum, mag)
    over = rounded > fmt.max_finite
    rounded = np.where(over, np.inf if fmt.has_inf else fmt.max_finite, rounded)
    return np.copysign(rounded, x64)


def _fp8_encode(x: np.ndarray, fmt: Fp8Format) -> np.ndarray:
    r = _fp8_round(x, fmt)
    sign = np.signbit(r).astype(np.uint8) << 7
    mag = np.abs(r)
    normal = mag >= np.ldexp(1.0, fmt.min_normal_exp)
    safe = np.where(np.isfinite(mag) & (mag > 0), mag, 1.0)
    _, e2 = np.frexp(safe)
    exp = e2 - 1
    man_normal = safe / np.ldexp(1.0, exp - fmt.man_bits) - (1 << fmt.man_bits)
    man_sub = safe / np.ldexp(1.0, fmt.min_normal_exp - fmt.man_bits)
    exp_field = np.where(normal, exp + fmt.bias, 0)
    man_field = np.where(normal, man_normal, man_sub)
    code = (exp_field.astype(np.int64) << fmt.man_bits) | man_field.astype(np.int64)
    code = np.where(mag == 0, 0, code)
    if fmt.has_inf:
        code = np.where(np.isinf(mag), ((1 << fmt.exp_bits) - 1) << fmt.man_bits, code)
    code = np.where(np.isnan(r), FP8_NAN_BITS, code)
    return code.astype(np.uint8) | sign


def _fp8_table(fmt: Fp8Format) -> np.ndarray:
    """The float32 value of each of the 256 codes."""
    codes = np.arange(256)
    sign = np.where(codes >> 7, -1.0, 1.0)
    exp_field = (codes >> fmt.man_bits) & ((1 << fmt.exp_bits) - 1)
    man = codes & ((1 << fmt.man_bits) - 1)
    normal = exp_field > 0
    frac = np.where(normal, 1.0 + man / (1 << fmt.man_bits), man / (1 << fmt.man_bits))
    exp = np.where(normal, exp_field - fmt.bias, fmt.min_normal_exp)
    value = sign * np.ldexp(frac, exp)
    top = exp_field == (1 << fmt.exp_bits) - 1
    if fmt.has_inf:
        value = np.where(top & (man == 0), sign * np.inf, value)
        value = np.where(top & (man != 0), np.nan, value)
    else:
        value = np.where(top & (man == (1 << fmt.man_bits) - 1), np.nan, value)
    return value.astype(np.float32)


_FP8_TABLES = {dt: _fp8_table(fmt) for dt, fmt in FP8_FORMATS.items()}


# -- the public conversions ----------------------------------------------------------------
@np.errstate(all="ignore")
def round_to(x: np.ndarray, dt: DType) -> np.ndarray:
    """``x`` (any float array) rounded to ``dt`` and returned as float32."""
    x = np.asarray(x, dtype=np.float32)
    if dt == F32 or not dt.is_float:
        return x
    if dt == BF16:
        return _bf16_decode(_bf16_bits(x))
    if dt == F16:
        return x.astype(np.float16).astype(np.float32)
    return _fp8_round(x, FP8_FORMATS[dt]).astype(np.float32)


def round_scalar(value: float, dt: DType) -> np.float32:
    """One float rounded to ``dt`` (a float dtype), as a numpy float32."""
    return np.float32(round_to(np.array([value], dtype=np.float32), dt)[0])


@np.errstate(all="ignore")
def encode(x: np.ndarray, dt: DType) -> np.ndarray:
    """float32 values -> the bit patterns (or numpy values) stored in a ``dt`` tensor."""
    x = np.asarray(x, dtype=np.float32)
    if dt == F32:
        return x
    if dt == BF16:
        return _bf16_bits(x)
    if dt == F16:
        return x.astype(np.float16)
    if dt in FP8_FORMATS:
        return _fp8_encode(x, FP8_FORMATS[dt])
    if dt == I32:
        return float_to_i32(x)
    raise ValueError(f"no encoding for {dt}")


@np.errstate(all="ignore")
def float_to_i32(x: np.ndarray) -> np.ndarray:
    """float -> i32 like ``cvt.rni.s32.f32``: round to nearest even, saturate, NaN -> 0."""
    r = np.rint(np.asarray(x, dtype=np.float64))
    r = np.clip(np.nan_to_num(r, nan=0.0), -2.0**31, 2.0**31 - 1)
    return r.astype(np.int32)


def decode(stored: np.ndarray, dt: DType) -> np.ndarray:
    """What a ``dt`` tensor holds (bits, or numpy float16/float32/int32 values) -> float32."""
    if dt == BF16:
        return _bf16_decode(stored)
    if dt in FP8_FORMATS:
        return _FP8_TABLES[dt][np.asarray(stored, dtype=np.uint8)]
    return np.asarray(stored).astype(np.float32)


STORAGE_DTYPES: dict[DType, np.dtype] = {
    F32: np.dtype(np.float32), F16: np.dtype(np.float16), BF16: np.dtype(np.uint16),
    E4M3: np.dtype(np.uint8), E5M2: np.dtype(np.uint8), I32: np.dtype(np.int32),
}
"""The numpy dtype of the memory view a tensor of each dtype is read and written through."""
