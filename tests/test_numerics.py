"""The interpreter's float conversions agree bit for bit with torch's on random and edge values."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tkjit.interpreter.numerics import decode, encode, float_to_i32, round_to
from tkjit.ir.types import BF16, E4M3, E5M2, F16

CASES = [
    (BF16, torch.bfloat16, torch.int16, np.uint16),
    (F16, torch.float16, torch.int16, np.uint16),
    (E4M3, torch.float8_e4m3fn, torch.uint8, np.uint8),
    (E5M2, torch.float8_e5m2, torch.uint8, np.uint8),
]
IDS = [str(c[0]) for c in CASES]


def _torch_bits(x: np.ndarray, tdt, view, ndt) -> np.ndarray:
    return torch.from_numpy(x).to(tdt).view(view).numpy().view(ndt)


def _representable(tdt, view, ndt) -> np.ndarray:
    """Every finite non-negative value of the dtype, sorted (from all bit patterns)."""
    n = 1 << (8 * np.dtype(ndt).itemsize)
    codes = torch.from_numpy(np.arange(n, dtype=np.int64).astype(ndt).view(
        np.int16 if ndt == np.uint16 else np.uint8))
    values = codes.view(tdt).float().numpy()
    return np.unique(values[np.isfinite(values) & (values >= 0)])


def _probe_values(tdt, view, ndt, rng) -> np.ndarray:
    """Random float32 bit patterns, normals at many scales, every representable value and every
    midpoint between neighbours with one float32 ulp either side, and the specials."""
    bits = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    scaled = [rng.standard_normal(20_000).astype(np.float32) * np.float32(s)
              for s in (1e-7, 1e-5, 1e-3, 1.0, 1e2, 1e4, 6e4, 1e6)]
    rep = _representable(tdt, view, ndt).astype(np.float64)
    if len(rep) > 4096:
        rep = rng.choice(rep, 4096, replace=False)
        rep.sort()
    mids = ((rep[:-1] + rep[1:]) / 2).astype(np.float32)
    near = [mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(0)),
            rep.astype(np.float32)]
    top = rep[-1]
    with np.errstate(over="ignore"):  # bf16's top times 2 is past float32's range: inf
        beyond = np.array([top * f for f in (1.01, 1.0625, 1.07, 1.125, 1.2, 2)] + [3e38], np.float32)
    specials = np.array([0.0, np.inf, np.nan, 1e-45, 1.2e-38, 3.4e38], np.float32)
    pos = np.concatenate([bits.view(np.float32), *scaled, *near, beyond, specials])
    return np.concatenate([pos, -pos])


@pytest.mark.parametrize("dt,tdt,view,ndt", CASES, ids=IDS)
def test_encode_matches_torch_bit_for_bit(dt, tdt, view, ndt):
    x = _probe_values(tdt, view, ndt, np.random.default_rng(1))
    want = _torch_bits(x, tdt, view, ndt)
    got = encode(x, dt)
    got = got.view(np.uint16) if got.dtype == np.float16 else got
    want_nan = np.isnan(torch.from_numpy(x).to(tdt).float().numpy())
    assert (np.isnan(decode(encode(x, dt), dt)) == want_nan).all()
    mismatch = ~want_nan & (got != want)
    assert not mismatch.any(), (x[mismatch][:8], want[mismatch][:8], got[mismatch][:8])


@pytest.mark.parametrize("dt,tdt,view,ndt", CASES, ids=IDS)
def test_round_to_is_torchs_round_trip(dt, tdt, view, ndt):
    x = _probe_values(tdt, view, ndt, np.random.default_rng(2))
    want = torch.from_numpy(x).to(tdt).float().numpy()
    got = round_to(x, dt)
    assert got.dtype == np.float32
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    assert (got[~nan].view(np.uint32) == want[~nan].view(np.uint32)).all()  # -0.0 kept too


@pytest.mark.parametrize("dt,tdt,view,ndt", CASES, ids=IDS)
def test_decode_every_bit_pattern(dt, tdt, view, ndt):
    n = 1 << (8 * np.dtype(ndt).itemsize)
    codes = np.arange(n, dtype=np.int64).astype(ndt)
    stored = codes.view(np.float16) if dt == F16 else codes
    want = torch.from_numpy(codes.view(np.int16 if ndt == np.uint16 else np.uint8)).view(tdt)
    want = want.float().numpy()
    got = decode(stored, dt)
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    assert (got[~nan] == want[~nan]).all()


def test_fp8_special_encodings():
    assert list(encode(np.array([np.nan, -np.nan, 448, 1e9, np.inf, -np.inf], np.float32), E4M3)) \
        == [0x7F, 0xFF, 0x7E, 0x7E, 0x7E, 0xFE]  # e4m3fn saturates; NaN keeps its sign
    assert list(encode(np.array([57344, 61439, 61440, np.inf, -np.inf, np.nan], np.float32), E5M2)) \
        == [0x7B, 0x7B, 0x7C, 0x7C, 0xFC, 0x7F]
    assert list(encode(np.array([2.0**-9, 2.0**-10, 3 * 2.0**-10], np.float32), E4M3)) == [1, 0, 2]  # ties to even


def test_bf16_overflow_and_nan():
    bits = encode(np.array([3.4e38, -3.4e38, np.nan, 1.0, -0.0], np.float32), BF16)
    assert list(bits) == [0x7F80, 0xFF80, 0x7FC0, 0x3F80, 0x8000]


def test_float_to_i32_rounds_half_even_and_saturates():
    x = np.array([0.5, 1.5, 2.5, -2.5, 3e9, -3e9, np.nan, 7.49], np.float32)
    assert list(float_to_i32(x)) == [0, 2, 2, -2, 2**31 - 1, -2**31, 0, 7]
