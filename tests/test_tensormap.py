"""TMA tensor maps for launches, on the CPU: metadata entries, the encoder's arguments (innermost
dim first, byte strides), 64-byte-aligned copies, the per-(pointer, shape) cache, refusals that
name the argument, and the fallback's zero maps. The driver's encoder is replaced by a recording
fake (it needs a GPU driver). tests/test_tensormap_launcher.py has the launcher's side."""
from __future__ import annotations

import ctypes

import pytest

from tkjit.errors import LaunchError, TkError
from tkjit.runtime.tensormap import MAP_BYTES, TensorMapEncoder, parse_entry


def entry(param=0, box=(64, 128), swizzle=128, dtype="bf16", **more):
    return {"kind": "tensormap", "name": "A.tmap", "param": param, "tensor": "A", "dtype": dtype,
            "box": list(box), "swizzle": swizzle, **more}


class FakeEncode:
    """Records (pointer, dims, strides) and returns 128 bytes that say which call made them."""

    def __init__(self):
        self.calls = []

    def __call__(self, spec, ptr, dims, strides):
        self.calls.append((ptr, dims, strides))
        return bytes([len(self.calls)]) + bytes(MAP_BYTES - 1)


def read(addr: int) -> bytes:
    return ctypes.string_at(addr, MAP_BYTES)


def test_entries_are_checked():
    assert parse_entry(entry(), 3).box == (64, 128)
    for bad, match in ((entry(param=3), "tensor maps describe one of the 3"), (entry(dtype="f64"), "dtype"),
                       (entry(swizzle=16), "swizzle"), (entry(box=(64, 300)), "bad box"),
                       (entry(box=(128, 64)), "at most the 128-byte swizzle span"),
                       (entry(box=(4, 64), swizzle=0), "multiple of 16"), (entry(fallback=1), "fallback")):
        with pytest.raises(TkError, match=match):
            parse_entry(bad, 3)


def test_maps_are_encoded_innermost_first_copied_aligned_and_cached():
    fake = FakeEncode()
    enc = TensorMapEncoder(parse_entry(entry(), 1), "k: argument 0 ('A')", fake)
    addr = enc(0x10000, 256, 1024)  # A is [M=256, K=1024]
    assert addr % 64 == 0 and read(addr)[0] == 1
    assert fake.calls == [(0x10000, (1024, 256), (2048,))]
    assert enc(0x10000, 256, 1024) == addr and len(fake.calls) == 1  # a hit: no encode
    other = enc(0x20000, 256, 1024)
    assert other != addr and read(other)[0] == 2 and read(addr)[0] == 1


def test_the_cache_forgets_the_oldest_map():
    fake = FakeEncode()
    enc = TensorMapEncoder(parse_entry(entry(), 1), "k", fake, capacity=2)
    for ptr in (0x100, 0x200, 0x300):
        enc(ptr, 64, 64)
    assert list(enc.cache) == [(0x200, (64, 64)), (0x300, (64, 64))]


def test_refusals_name_the_argument():
    enc = TensorMapEncoder(parse_entry(entry(), 1), "k: argument 0 ('A')", FakeEncode())
    with pytest.raises(LaunchError, match=r"argument 0 \('A'\): TMA needs a 16-byte-aligned base"):
        enc(0x108, 64, 64)
    with pytest.raises(LaunchError, match=r"argument 0 \('A'\): TMA needs rows of a multiple of 16 bytes.*"
                                          r"700 x bf16 = 1400 bytes.*multiple of 8"):
        enc(0x100, 64, 700)
    with pytest.raises(LaunchError, match="2-D tensor map"):
        enc(0x100, 64)


def test_tensors_the_kernel_copies_itself_and_empty_ones_get_zero_maps():
    fake = FakeEncode()
    enc = TensorMapEncoder(parse_entry(entry(fallback=True), 1), "k", fake)
    assert read(enc(0x100, 64, 700)) == bytes(MAP_BYTES)  # rows of 1400 B: the kernel copies A
    assert read(enc(0x100, 0, 64)) == bytes(MAP_BYTES)    # empty: never read
    assert fake.calls == []
