"""Handlers for scalar ops (const, dim, select, check) and the scalar cases of binary, unary and cvt.

Scalars are ``int`` (i32, wrapped to 32 bits like the GPU's integer arithmetic), ``numpy.float32``
(float dtypes, rounded to the dtype) and ``bool``. Integer division rounds per op: ``cdiv`` up,
``floordiv`` down, ``div`` toward zero (C), ``mod`` is ``a - b * floordiv(a, b)`` (the sign of
``b``). Integer division by zero is an ``InterpreterError`` at the op; float division follows
IEEE (±inf, NaN). ``max``/``min`` ignore a NaN operand (``fmax``/``fmin``, as the GPU's max.f32).
"""
from __future__ import annotations

import math
import operator

import numpy as np

from ...errors import InterpreterError
from ...ir.ops.check import division_template, render
from ...ir.types import BOOL, I32, DType
from ..numerics import float_to_i32, round_scalar
from ..values import wrap_i32

FLOAT_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
                "max": np.fmax, "min": np.fmin}
"""Arithmetic on float scalars, tiles and vectors (numpy ufuncs, float32 in -> float32 out)."""

COMPARE = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
           "eq": operator.eq, "ne": operator.ne}


def _cdiv(a: int, b: int) -> int:
    return -((-a) // b)


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


INT_DIVISION = {"cdiv": (_cdiv, "/"), "floordiv": (operator.floordiv, "//"),
                "mod": (operator.mod, "%"), "div": (_trunc_div, "/")}
INT_ARITH = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "max": max, "min": min}


def _relu(x):
    return np.fmax(x, np.float32(0))


def _rsqrt(x):
    return np.float32(1) / np.sqrt(x)


_ERFC = np.frompyfunc(math.erfc, 1, 1)


def _in_f64(fn):
    """An activation computed in float64 and rounded once to float32 (the reference for the GPU's)."""
    def run(x):
        with np.errstate(all="ignore"):
            return np.asarray(fn(np.asarray(x, np.float64)), np.float64).astype(np.float32)[()]
    run.__name__ = fn.__name__
    return run


@_in_f64
def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))  # exp's overflow to inf gives 0, as it should


@_in_f64
def _silu(x):
    return x / (1.0 + np.exp(-x))


@_in_f64
def _gelu(x):
    """x·Φ(x) = x·½·erfc(-x/√2): erfc keeps the negative tail's relative accuracy."""
    return x * 0.5 * np.asarray(_ERFC(-x / math.sqrt(2.0)), np.float64)


@_in_f64
def _gelu_tanh(x):
    """x·½(1 + tanh u) = x·sigmoid(2u), u = √(2/π)(x + 0.044715x³)."""
    u = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
    return x / (1.0 + np.exp(-2.0 * u))  # no cancellation in 1 + tanh u for negative u


FLOAT_UNARY = {"neg": np.negative, "abs": np.abs, "relu": _relu, "exp": np.exp, "exp2": np.exp2,
               "log": np.log, "log2": np.log2, "sqrt": np.sqrt, "rsqrt": _rsqrt, "sin": np.sin,
               "cos": np.cos, "tanh": np.tanh, "sigmoid": _sigmoid, "silu": _silu, "gelu": _gelu,
               "gelu_tanh": _gelu_tanh}
"""Elementwise maps on float scalars, tiles and vectors (computed in float32)."""

def _int_relu(a: int) -> int:
    return max(a, 0)


INT_UNARY = {"neg": operator.neg, "abs": abs, "relu": _int_relu}


def scalar_binary(it, op, a, b):
    """``a <op> b`` on two scalars of the op's operand dtype."""
    dt: DType = op.operands[0].type.dtype
    name = op.NAME
    if name in COMPARE:
        return bool(COMPARE[name](a, b))
    if name == "and":
        return bool(a and b)
    if name == "or":
        return bool(a or b)
    if dt == I32:
        return _int_binary(it, op, name, a, b)
    return round_scalar(FLOAT_BINARY[name](np.float32(a), np.float32(b)), dt)


def _int_binary(it, op, name: str, a: int, b: int) -> int:
    if name in INT_DIVISION:
        fn, symbol = INT_DIVISION[name]
        if b == 0:
            raise it.error(op, render(division_template(symbol), [a]))
        return wrap_i32(fn(a, b))
    return wrap_i32(INT_ARITH[name](a, b))


def scalar_unary(op, x):
    dt: DType = op.operands[0].type.dtype
    if op.NAME == "not":
        return not x
    if dt == I32:
        return wrap_i32(INT_UNARY[op.NAME](x))
    return round_scalar(FLOAT_UNARY[op.NAME](np.float32(x)), dt)


def scalar_cvt(x, src: DType, dst: DType):
    """Convert one scalar: float -> i32 rounds to nearest even and saturates (NaN -> 0)."""
    if dst == I32:
        if src.is_float:
            return int(float_to_i32(np.array([x]))[0])
        return int(x)
    if dst == BOOL:
        return bool(x)
    return round_scalar(float(x), dst)


def run_const(it, op, args):
    dt = op.results[0].type.dtype
    value = op.attrs["value"]
    if dt == I32:
        return [int(value)]
    if dt == BOOL:
        return [bool(value)]
    return [round_scalar(float(value), dt)]


def run_dim(it, op, args):
    name = op.attrs["name"]
    if name not in it.env.dims:
        raise it.error(op, f"dimension '{name}' is not bound: no parameter has it and it is not "
                           "a constant")
    return [it.env.dims[name]]


def run_select(it, op, args):
    cond, a, b = args
    return [a if cond else b]


def run_check(it, op, args):
    """Checked mode's ``check``: the op at its span failed when the condition is false."""
    ok, *values = args
    if not ok:
        raise InterpreterError(render(op.attrs["message"], values), op.span)
    return []
