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


# --- divisors known at launch -----------------------------------------------------------------
#
# An integer division or remainder whose divisor is computed from tensor dimensions and constants
# only (``h // (H // HKV)`` in attention.tk: its divisor ``H // HKV``) is checked before the launch
# on both backends: a divisor of 0 is refused with the same message, where the interpreter used to
# stop at the op and the GPU divided by zero silently. Divisors that depend on block or loop
# indices or on loaded data are left to a device-side checked mode (docs/reliability.md).

def divisor_checks(kernel) -> list[dict]:
    """``{"expr": <grid-style expression>, "at": "file:line:col", "op": text, "divisor": text}``
    for every integer ``/``, ``//`` and ``%`` of ``kernel`` (tile IR) whose divisor is a launch-time
    value that is not a constant; inner divisions first. JSON: kept in the kernel's metadata."""
    from ..codegen.abi import grid_expr
    from ..errors import TkError
    from ..ir.ops import CDiv, FloorDiv, Mod
    checks, seen = [], set()
    for op in kernel.walk():
        if not isinstance(op, (CDiv, FloorDiv, Mod)) or len(op.operands) != 2:
            continue
        divisor = op.operands[1]
        try:
            expr = grid_expr(divisor, op)
        except TkError:
            continue  # computed at run time: not a launch check
        key = repr(expr)
        if isinstance(expr, int) or key in seen:
            continue
        seen.add(key)
        checks.append({"expr": expr, "at": op.span.location() if op.span else kernel.name,
                       "op": _text(op.span, op.NAME), "divisor": _text(getattr(divisor.owner, "span", None),
                                                                     divisor.hint or "its divisor")})
    return checks


def _text(span, default: str) -> str:
    if span is None:
        return default
    return " ".join(span.source.text[span.start:span.end].split()) or default


def evaluate(expr, dims: dict[str, int]) -> int:
    """A grid-style expression (codegen/abi.py) in Python's arithmetic; a zero divisor inside
    evaluates to 0 (that inner division is a check of its own, reported first)."""
    if isinstance(expr, int):
        return expr
    op, *args = expr
    if op == "dim":
        return dims[args[0]]
    a, b = (evaluate(x, dims) for x in args)
    if op == "cdiv":  # as the launcher's generated source computes it (launcher.grid_expr_source)
        return (a + b - 1) // b if b else 0
    return {"add": a + b, "mul": a * b, "min": min(a, b), "max": max(a, b), "gt": int(a > b)}[op]


def _dims_of(expr) -> list[str]:
    if isinstance(expr, list):
        if expr[0] == "dim":
            return [expr[1]]
        return [d for x in expr[1:] for d in _dims_of(x)]
    return []


def divisor_error(kernel: str, checks: list[dict], dims: dict[str, int]) -> str | None:
    """The refusal of the first check whose divisor is 0 with these dims, or None."""
    for check in checks:
        if evaluate(check["expr"], dims) == 0:
            used = ", ".join(f"{d} = {dims[d]}" for d in dict.fromkeys(_dims_of(check["expr"])))
            return (f"{kernel}: at {check['at']}, `{check['op']}` divides by `{check['divisor']}`, "
                    f"which is 0 at this launch ({used})")
    return None
