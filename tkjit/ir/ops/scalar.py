"""Scalar ops: constants and the runtime dimensions of the kernel's global tensors."""
from __future__ import annotations

import math

from ..core import Op
from ..types import BOOL, F32, I32, ScalarType


class Const(Op):
    """``%c = const {value = 128} : i32`` — an i32, f32 or bool constant."""

    NAME = "const"
    ATTRS = {"value": (int, float, bool)}

    def infer(self):
        if not self.results:
            raise self.error("needs a result type")
        t = self.results[0].type
        v = self.attrs["value"]
        if not isinstance(t, ScalarType) or t.dtype not in (I32, F32, BOOL):
            raise self.error(f"expected an i32, f32 or bool result, got {t}")
        if t.dtype == I32 and (isinstance(v, bool) or not isinstance(v, int)):
            raise self.error(f"an i32 constant needs an integer value, got {v!r}")
        if t.dtype == I32 and not -2**31 <= v < 2**31:
            raise self.error(f"{v} does not fit in i32")
        if t.dtype == BOOL and not isinstance(v, bool):
            raise self.error(f"a bool constant needs true or false, got {v!r}")
        if t.dtype == F32 and isinstance(v, bool):
            raise self.error(f"an f32 constant needs a number, got {v!r}")
        if t.dtype == F32 and isinstance(v, float) and math.isnan(v):
            pass
        return [t]


class Dim(Op):
    """``%M = dim {name = "M"} : i32`` — a named runtime dimension, bound at launch."""

    NAME = "dim"
    ATTRS = {"name": str}

    def infer(self):
        return [ScalarType(I32)]
