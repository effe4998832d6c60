"""Launch checks that the interpreter and the GPU launcher share, so that both refuse the same
arguments with the same message (issue 20). The rest of each backend's checks are its own
(interpreter/launch.py, runtime/launcher.py); outputs that share memory are in overlap.py."""
from __future__ import annotations

import math
import numbers
import struct

from ..errors import LaunchError


def where(kernel: str, index: int, name: str | None) -> str:
    """How a launch error names an argument: ``add: argument 2 ('O')``."""
    return f"{kernel}: argument {index} ('{name}')"


def _show(value) -> str:
    if isinstance(value, numbers.Integral) and abs(int(value)) >= 10**20:
        return f"an integer of {int(value).bit_length()} bits"
    return repr(value)


def f32_value(value, at: str) -> float:
    """An f32 scalar argument as a Python float; a finite value that f32 cannot hold (``1e40``,
    ``10**400``) is refused rather than becoming inf (infinities and NaN pass as themselves)."""
    try:
        x = float(value)
    except OverflowError:
        raise LaunchError(f"{at}: {_show(value)} does not fit in f32") from None
    if math.isfinite(x):
        try:
            struct.pack("<f", x)
        except OverflowError:
            raise LaunchError(f"{at}: {_show(value)} does not fit in f32") from None
    return x
