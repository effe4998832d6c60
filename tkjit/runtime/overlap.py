"""Outputs that share memory with another argument: refused at launch by both backends.

A kernel's tiles are read and written by blocks that run in any order on the GPU (and one after
another on the interpreter), so an output that overlaps an input or another output, by part or
wholly, gives an answer that depends on that order -- as torch refuses ``out=`` tensors that
overlap an input ("unsupported operation: some elements of the input tensor and the written-to
tensor refer to a single memory location"). Exact aliasing (the same tensor passed as an input and
as an output) is refused too: tkjit does not prove that every block reads a tile only before it
writes that same tile and that no other block reads it (a GEMM whose C is its A is wrong, a
kernel reading neighbouring rows is order-dependent), so it cannot stay sound in general. Two
read-only inputs may share memory freely (``attention(q, kv, kv, ...)``).

Both backends call ``overlap_error`` with every tensor's byte range, so the message is the same on
both. Both take strided views, whose range is the span from their lowest to their highest element
(runtime/strides.span_bytes; a bound: views that interleave without sharing an element are
refused as well); the GPU launcher checks the views themselves, before any copy of them.
"""
from __future__ import annotations

from typing import NamedTuple

ITEMSIZE = {"bf16": 2, "f16": 2, "f32": 4, "e4m3": 1, "e5m2": 1, "i32": 4}
"""Bytes per element of each tensor dtype (by its tkjit name)."""


class Extent(NamedTuple):
    """A tensor argument's bytes: [start, start + size)."""

    index: int
    name: str
    start: int
    size: int
    writes: bool


def overlap_pairs(writes: list[bool | None]) -> list[tuple[int, int]]:
    """(output, other) index pairs to compare, for tensor parameters (None: not a tensor): every
    written tensor against every other tensor, each pair once."""
    tensors = [i for i, w in enumerate(writes) if w is not None]
    return [(o, t) for o in tensors if writes[o] for t in tensors
            if t != o and not (writes[t] and t < o)]


def overlap_error(kernel: str, extents: list[Extent]) -> str | None:
    """The refusal's message for the first output that shares memory with another tensor, or None."""
    by_index = {e.index: e for e in extents}
    for o, t in overlap_pairs([by_index[i].writes if i in by_index else None
                               for i in range(max(by_index, default=-1) + 1)]):
        out, other = by_index[o], by_index[t]
        if out.start < other.start + other.size and other.start < out.start + out.size:
            how = ("is the same memory as" if (out.start, out.size) == (other.start, other.size)
                   else "overlaps")
            return (f"{kernel}: argument {o} ('{out.name}') is written by the kernel and {how} "
                    f"argument {t} ('{other.name}'): an output must not share memory with another "
                    f"argument (blocks run in any order); pass a separate tensor, or .clone() the "
                    f"input")
    return None
