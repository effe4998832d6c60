"""Checked mode's one op, and the run-time error messages the interpreter and a checked GPU launch
share.

``check %ok, %v0, %v1 {id = 3, message = "load: tile coordinate {0} of X ..."}`` (inserted by
passes/checks.py only in checked mode): when %ok is false at run time the op at this span failed.
The interpreter raises ``InterpreterError(render(message, values))`` at the span; a GPU records
(id, values) in the launch's error buffer and the launcher raises the same text
(runtime/device_checks.py). ``message`` is a template (the checked op's name, then one of the
templates below, which word the interpreter's own errors after the op's name): ``{i}`` is value i, ``{i|one|many}`` the
word for value i's count (``1 tile``, ``2 tiles``). So both say exactly the same thing.
"""
from __future__ import annotations

import re

from ..core import Op
from ..types import BOOL, I32, ScalarType, describe

MAX_VALUES = 3
"""Values a check reports (a coordinate, its tile count and the dimension's size)."""

_FIELD = re.compile(r"\{(\d+)(?:\|([^|}]*)\|([^}]*))?\}")


def render(template: str, values) -> str:
    """The message of a failed check: ``{i}`` → value i, ``{i|one|many}`` → one if value i is 1."""
    def field(m: re.Match) -> str:
        v = values[int(m.group(1))]
        if m.group(2) is None:
            return str(v)
        return m.group(2) if v == 1 else m.group(3)
    return _FIELD.sub(field, template)


def _escape(text: str) -> str:
    return text.replace("{", "(").replace("}", ")")


def index_template(tensor: str, axis: int, dim: str | int) -> str:
    """Values: the index, the dimension's size."""
    t = _escape(tensor)
    label = f"{dim} = {{1}}" if isinstance(dim, str) else "size {1}"
    return (f"index {{0}} of {t} is out of range: {t} has {{1}} {{1|entry|entries}} "
            f"along dimension {axis} ({label})")


def tile_coordinate_template(tensor: str, axis: int, dim: str | int, extent: int, unit: str) -> str:
    """Values: the tile coordinate, the tensor's tile count along the axis, the axis' size."""
    t = _escape(tensor)
    label = f"{dim} = {{2}}" if isinstance(dim, str) else "size {2}"
    return (f"tile coordinate {{0}} of {t} is out of range: {t} has {{1}} {{1|tile|tiles}} "
            f"of {extent} {unit} along dimension {axis} ({label})")


def division_template(symbol: str) -> str:
    """Values: the dividend."""
    return f"integer division by zero ({{0}} {symbol} 0)"


def loop_step_template() -> str:
    """Values: the step, the lower and the upper bound."""
    return "the loop step must be positive, got {0} (from {1} to {2})"


class Check(Op):
    """``check %ok, %a, %b {id = 0, message = "..."}`` — in checked mode, the run-time condition
    %ok (bool) of the op at this span; %a... (i32, at most MAX_VALUES) are what its message
    reports. ``id`` numbers the kernel's checks (the GPU's error buffer names one by it)."""

    NAME = "check"
    OPERANDS = ("ok", "values*")
    ATTRS = {"id": int, "message": str}
    NUM_RESULTS = 0

    def infer(self):
        if self.operands[0].type != ScalarType(BOOL):
            raise self.error(f"the condition expected bool, got {describe(self.operands[0].type)}")
        values = self.variadic()
        if len(values) > MAX_VALUES:
            raise self.error(f"expected at most {MAX_VALUES} reported values, got {len(values)}")
        for i, v in enumerate(values):
            if v.type != ScalarType(I32):
                raise self.error(f"reported value {i} expected i32, got {describe(v.type)}")
        used = [int(m.group(1)) for m in _FIELD.finditer(self.attrs["message"])]
        if used and max(used) >= len(values):
            raise self.error(f"the message names value {max(used)}, but the check reports {len(values)}")
        if self.attrs["id"] < 0:
            raise self.error(f"id must be non-negative, got {self.attrs['id']}")
        return []
