"""Compile-time arithmetic on constants (Python ints, floats and bools), by the language's rules:
integer ``/`` rounds up, ``//`` rounds down, ``%`` is the remainder of ``//``; a float operand
makes the result a float; math functions follow IEEE (``log(0)`` is ``-inf``) in double precision.
"""
from __future__ import annotations

import functools

import math
import operator
from typing import Callable, Union


from ..errors import DiagnosticError
from ..source import Span

Const = Union[bool, int, float]


def is_const(v) -> bool:
    return isinstance(v, (bool, int, float))


def kind_of(v: Const) -> str:
    if isinstance(v, bool):
        return "bool"
    return "int" if isinstance(v, int) else "float"


def show(v: Const) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) and math.isfinite(v) else str(v)


def _numbers(op: str, a: Const, b: Const, span: Span) -> None:
    for v in (a, b):
        if isinstance(v, bool):
            raise DiagnosticError(f"'{op}' needs numbers, got the bool {show(v)}", span)


def _ints(op: str, a: Const, b: Const, span: Span) -> None:
    _numbers(op, a, b, span)
    for v in (a, b):
        if isinstance(v, float):
            hint = " (use '/' to divide floats)" if op == "//" else ""
            raise DiagnosticError(f"'{op}' needs integers, got {show(v)}{hint}", span)


def _nonzero(op: str, b: Const, span: Span) -> None:
    if b == 0:
        raise DiagnosticError(f"division by zero: the divisor of '{op}' is the constant 0", span)


def _add(a, b, span):
    _numbers("+", a, b, span)
    return a + b


def _sub(a, b, span):
    _numbers("-", a, b, span)
    return a - b


def _mul(a, b, span):
    _numbers("*", a, b, span)
    return a * b


def _div(a, b, span):
    _numbers("/", a, b, span)
    _nonzero("/", b, span)
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)  # integer division rounds up: M / BM tiles cover M
    return a / b


def _floordiv(a, b, span):
    _ints("//", a, b, span)
    _nonzero("//", b, span)
    return a // b


def _mod(a, b, span):
    _ints("%", a, b, span)
    _nonzero("%", b, span)
    return a % b


def _compare(op: str, fn: Callable[[Const, Const], bool]):
    def fold(a, b, span):
        if isinstance(a, bool) != isinstance(b, bool):
            raise DiagnosticError(f"'{op}' compares a bool with a number: {show(a)} and {show(b)}",
                                  span)
        if isinstance(a, bool) and op not in ("==", "!="):
            raise DiagnosticError(f"'{op}' needs numbers, got bools", span)
        return bool(fn(a, b))
    return fold


def _logic(op: str, fn: Callable[[bool, bool], bool]):
    def fold(a, b, span):
        for v in (a, b):
            if not isinstance(v, bool):
                raise DiagnosticError(f"'{op}' needs bools, got {show(v)}", span)
        return fn(a, b)
    return fold


BINARY: dict[str, Callable[[Const, Const, Span], Const]] = {
    "+": _add, "-": _sub, "*": _mul, "/": _div, "//": _floordiv, "%": _mod,
    "==": _compare("==", operator.eq), "!=": _compare("!=", operator.ne),
    "<": _compare("<", operator.lt), "<=": _compare("<=", operator.le),
    ">": _compare(">", operator.gt), ">=": _compare(">=", operator.ge),
    "&&": _logic("&&", operator.and_), "||": _logic("||", operator.or_),
}


def fold_binary(op: str, a: Const, b: Const, span: Span) -> Const:
    try:
        return BINARY[op](a, b, span)
    except OverflowError:
        raise DiagnosticError(f"'{op}' on {show(a)} and {show(b)} overflows", span) from None


def fold_unary(op: str, a: Const, span: Span) -> Const:
    if op == "!":
        if not isinstance(a, bool):
            raise DiagnosticError(f"'!' needs a bool, got {show(a)}", span)
        return not a
    if isinstance(a, bool):
        raise DiagnosticError(f"'-' needs a number, got the bool {show(a)}", span)
    return -a


@functools.lru_cache(maxsize=1)
def _math() -> dict[str, Callable]:
    """numpy's functions (IEEE results: inf, nan, no exceptions), imported only when a constant
    is folded through one: most kernels never do, and numpy's import is a third of a cold compile."""
    import numpy as np
    return {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "abs": np.abs,
            "relu": lambda x: np.maximum(x, 0.0), "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
            "sin": np.sin, "cos": np.cos, "tanh": np.tanh, "sigmoid": _fold_sigmoid,
            "silu": lambda x: x * _fold_sigmoid(x), "gelu": lambda x: x * 0.5 * math.erfc(-x / math.sqrt(2.0)),
            "gelu_tanh": lambda x: x * _fold_sigmoid(2.0 * math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3))}


def _fold_sigmoid(x: float) -> float:
    return 0.0 if x < -700.0 else 1.0 / (1.0 + math.exp(-x))


def fold_math(fn: str, x: Const, span: Span) -> Const:
    """``exp(1.0)`` and friends on a constant. ``abs``/``relu`` keep integers integers."""
    if isinstance(x, bool):
        raise DiagnosticError(f"{fn} needs a number, got the bool {show(x)}", span)
    if isinstance(x, int) and fn in ("abs", "relu"):
        return abs(x) if fn == "abs" else max(x, 0)
    import numpy as np
    with np.errstate(all="ignore"):
        return float(_math()[fn](np.float64(to_float(x, span))))


def fold_minmax(fn: str, a: Const, b: Const, span: Span) -> Const:
    _numbers(fn, a, b, span)
    return max(a, b) if fn == "max" else min(a, b)


def to_float(v: Const, span: Span) -> float:
    try:
        return float(v)
    except OverflowError:
        raise DiagnosticError(f"{v} is too large for a float", span) from None
