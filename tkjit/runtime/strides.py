"""Strided global tensors: what a launch accepts, on both backends, with one set of words.

A ``gl`` argument may be any view whose last dimension is contiguous (stride 1); the other strides
are free (``qkv.view(B, N, 3, H, D)[:, :, 0].transpose(1, 2)``, a row slice, a transpose of
leading dimensions). How each backend reads through them (docs/api.md, "Strided tensors"):

* the interpreter reads numpy views of the caller's storage;
* a TMA tensor map is encoded with the view's own byte strides (tensormap.py), which TMA takes
  when each is a multiple of 16 bytes (and the base is 16-byte aligned);
* the register-tile backend and the general sm_90a lowering compiled with the ``strided`` option
  take each tensor's strides as ``.s64`` kernel parameters (codegen/abi.py, globalmem.py);
* whatever a kernel cannot address that way is copied to a contiguous tensor around the launch
  (outputs copied back into the caller's view), by the kernel object (kernel.py).

Refused everywhere, naming the argument and the stride: a last dimension that is not contiguous
(a transpose of the last two dimensions: its rows are columns) and an output whose elements
overlap one another (a broadcast); outputs that share memory with another argument are refused
by overlap.py, over each view's byte span.
"""
from __future__ import annotations

from ..errors import LaunchError
from . import launch_checks as shared


def effective(shape: tuple, strides: tuple) -> tuple:
    """The strides a kernel is given: a dimension of one element (or an empty tensor) takes the
    row-major stride, since its own is arbitrary and never multiplies a nonzero index (torch calls
    such views contiguous); others keep theirs."""
    shape, strides = tuple(shape), tuple(strides)
    out, want = list(strides), 1
    for axis in reversed(range(len(shape))):
        if shape[axis] <= 1:
            out[axis] = want
        want *= max(shape[axis], 1)
    return tuple(out)


def check(where: str, shape: tuple, strides: tuple, writes: bool) -> None:
    """Strides in elements: the last dimension's must be 1 (any other strides are read through);
    a tensor the kernel writes must not overlap itself."""
    if shape and shape[-1] > 1 and strides[-1] != 1:
        shared.not_contiguous(where, strides, shape)
    if writes and overlaps_itself(shape, strides):
        raise LaunchError(f"{where}: the kernel stores into it, but its elements overlap (shape {tuple(shape)}, "
                          f"strides {tuple(strides)}: a broadcast or expanded view); pass a tensor of its own")


def overlaps_itself(shape: tuple, strides: tuple) -> bool:
    """Whether two indices reach one element: dims of more than one element, by stride, each
    stride at least the span of the dims inside it (a sufficient test; torch's own is the same)."""
    if any(n == 0 for n in shape):
        return False
    dims = sorted((abs(st), n) for st, n in zip(strides, shape) if n > 1)
    span = 1
    for st, n in dims:
        if st < span:
            return True
        span = st * (n - 1) + span
    return False


def span_bytes(shape: tuple, strides: tuple, itemsize: int) -> int:
    """Bytes from a view's first element to the end of its last (strides >= 0, as torch's are):
    the range overlap.py compares (a bound for interleaved views)."""
    if any(n == 0 for n in shape):
        return 0
    return (1 + sum((n - 1) * st for n, st in zip(shape, strides))) * itemsize


def tma_refusal(where: str, shape: tuple, strides: tuple, itemsize: int) -> str | None:
    """Why a TMA tensor map cannot take this view's strides (each of dims 0..n-2 a multiple of 16
    bytes, below 2^40), naming the dimension and the stride; None when it can."""
    for axis, st in enumerate(strides[:-1]):
        if (st * itemsize) % 16:
            return (f"{where}: TMA needs every stride but the last to be a multiple of 16 bytes, but dim "
                    f"{axis} has stride {st} ({st * itemsize} bytes; strides {tuple(strides)} for shape "
                    f"{tuple(shape)})")
        if st * itemsize >= 2**40:
            return f"{where}: dim {axis} has stride {st}, too large for a TMA tensor map"
    return None


ROW_MAJOR_ONLY = "this kernel addresses the tensor row-major (it has no stride parameters for it)"


def refusal(where: str, how: str | None, shape: tuple, eff: tuple, raw: tuple, ptr: int, itemsize: int,
            mapped: bool) -> str | None:
    """Why a compiled kernel cannot launch a view (last dimension contiguous, checked already) as
    it is, or None: ``how`` is the tensor's ``strides`` capability (launcher.Param), ``mapped``
    whether a TMA map of the kernel describes it; ``eff`` its strides.effective, ``raw`` torch's."""
    if how is None:
        return f"{where}: {ROW_MAJOR_ONLY}: {shared.first_strided(shape, raw)}; got strides {raw} for shape {shape}"
    if ptr % 16:
        return (f"{where}: the view's data pointer {ptr:#x} is not 16-byte aligned (an offset of "
                f"{ptr % 16} bytes); the kernel's copies need aligned rows")
    return tma_refusal(where, shape, eff, itemsize) if mapped else None


def acceptor(itemsize: int, writes: bool, mapped: bool):
    """``view_strides(tensor)`` for a launcher's generated strided path: the strides the kernel is
    given (``effective``), or None where the view cannot go as it is (the launcher's checker then
    says why). The base's alignment is checked there for every tensor. Answers are remembered per
    (shape, strides), ``MEMO`` of them: a launch then costs one lookup per view."""
    memo: dict = {}

    def judge(shape, raw):
        if shape and shape[-1] > 1 and raw[-1] != 1:
            return None
        eff = effective(shape, raw)
        if writes and overlaps_itself(shape, eff):
            return None
        if mapped and tma_refusal("", shape, eff, itemsize) is not None:
            return None
        return eff

    def view_strides(a):
        key = (a.shape, a.stride())
        try:
            return memo[key]
        except KeyError:
            if len(memo) >= MEMO:
                memo.clear()
            out = memo[key] = judge(*key)
            return out
    return view_strides


MEMO = 256
"""(shape, strides) pairs an acceptor remembers before it starts again."""


__all__ = ["effective", "check", "overlaps_itself", "span_bytes", "tma_refusal", "refusal", "acceptor",
           "ROW_MAJOR_ONLY"]
