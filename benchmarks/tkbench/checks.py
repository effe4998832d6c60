"""Correctness helpers shared by the families: poisoned outputs, relative error, and the example
kernels compiled once per worker (a failed compile is remembered and raised again)."""
from __future__ import annotations

import time

from .context import EXAMPLES

BF16_TOL = 1e-2
"""bf16 inputs and outputs with f32 accumulation land between 1e-3 and 1e-2 relative error."""


def poisoned(shape, dtype, device):
    """An output tensor full of NaN: anything left unwritten shows."""
    import torch
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def unwritten(t) -> int:
    """How many elements are still NaN."""
    import torch
    return int(torch.isnan(t).sum().item())


def rel_err(out, ref) -> float:
    """‖out − ref‖ / ‖ref‖ in float64 (NaN when out holds NaN)."""
    ref64 = ref.double()
    return float((out.double() - ref64).norm().item() / ref64.norm().item())


def sync(ctx) -> None:
    if ctx.cuda:
        import torch
        torch.cuda.synchronize()


def check_row(row, out_and_ref: list[tuple], tol: float = BF16_TOL, outputs: tuple = ()) -> None:
    """Fill ``rel_err`` (the largest over the pairs), ``unwritten`` (NaN left in ``outputs``, by
    default the pairs' outputs) and the status: ok only when every element was written and the
    error is within ``tol``."""
    from .rows import OK, WRONG
    row.tol = tol
    row.unwritten = sum(unwritten(out) for out in (outputs or [out for out, _ in out_and_ref]))
    row.rel_err = max(rel_err(out, ref) for out, ref in out_and_ref)
    good = row.unwritten == 0 and row.rel_err == row.rel_err and row.rel_err <= tol
    row.status = OK if good else WRONG


class Kernels:
    """``tkjit.load`` of an example with constants, once per worker; ``compile_s`` is the time of
    the front end, the passes and (on a GPU) the cubin, on the first request."""

    def __init__(self, ctx):
        self._ctx = ctx
        self._done: dict[tuple, tuple] = {}

    def get(self, name: str, constants: dict | None = None):
        """(kernel, seconds it took to compile) — raises the compile's error, every time."""
        key = (name, tuple(sorted((constants or {}).items())))
        if key not in self._done:
            self._done[key] = self._compile(name, constants)
        kernel, seconds, error = self._done[key]
        if error is not None:
            raise error
        return kernel, seconds

    def _compile(self, name: str, constants: dict | None) -> tuple:
        import tkjit
        begin = time.perf_counter()
        try:
            kernel = tkjit.load(EXAMPLES / f"{name}.tk", constants=constants or None)
            if self._ctx.cuda:
                kernel.binary  # noqa: B018 - assemble now, so the first timed call is a launch
        except Exception as exc:  # noqa: BLE001 - any failure becomes the row's error
            return None, None, exc
        return kernel, time.perf_counter() - begin, None
