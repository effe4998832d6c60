"""The language's functions: a table from name to a named lowering, with its arity.

Each lowering gets the lowerer, the call node and the type its binding declares (``want``; only
``zeros``/``fill`` use it) and returns a constant (when everything folds) or a value.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from ..errors import DiagnosticError, VerifyError
from ..frozen import Frozen
from ..ir import ops
from ..ir.core import Value
from ..ir.types import BOOL, DTYPES, F32, I32, TileType, Type, VectorType
from . import ast
from .fold import fold_binary, fold_math, fold_minmax, is_const, show, to_float
from .scope import did_you_mean


@dataclass(unsafe_hash=True)
class Builtin(Frozen):
    """A builtin function: how it lowers, how many arguments it takes and its signature as shown."""

    lower: Callable
    min_args: int
    max_args: int
    signature: str


def _map(lw, call: ast.Call, want) -> object:
    """exp, exp2, log, log2, abs, relu, sqrt, rsqrt, sin, cos, tanh and the activations."""
    x = lw.expr(call.args[0])
    if is_const(x):
        return fold_math(call.func, x, call.span)
    lw.reject_global(x, call.args[0])
    return lw.emit(ops.OPS[call.func], [x], span=call.span).result


def _minmax(lw, call: ast.Call, want) -> object:
    a_node, b_node = call.args
    a, b = lw.expr(a_node), lw.expr(b_node)
    if is_const(a) and is_const(b):
        return fold_minmax(call.func, a, b, call.span)
    cls = ops.Max if call.func == "max" else ops.Min
    return lw.combine(call.func, a, b, a_node, b_node, call.span, cls)


def _cvt(lw, call: ast.Call, want) -> object:
    if call.type_arg is None:
        raise DiagnosticError("cvt needs the dtype to convert to, as in cvt<bf16>(x)", call.span)
    dt = DTYPES.get(call.type_arg)
    if dt is None or dt == BOOL:
        raise DiagnosticError(f"cvt<{call.type_arg}>: unknown dtype '{call.type_arg}' (expected "
                              f"bf16, f16, f32, e4m3, e5m2 or i32)", call.type_span)
    x = lw.expr(call.args[0])
    if is_const(x):
        if isinstance(x, bool):
            raise DiagnosticError(f"cvt<{dt}> needs a number, got {show(x)}", call.args[0].span)
        if dt == I32:
            return int(round(to_float(x, call.span)))
        if dt == F32:
            return to_float(x, call.span)
        x = lw.const(x, F32, call.args[0].span)
    lw.reject_global(x, call.args[0])
    if x.type.dtype == dt:
        return x
    return lw.emit(ops.Cvt, [x], {"dtype": dt.name}, span=call.span).result


def _creation_type(call: ast.Call, want: Optional[Type]) -> Type:
    example = "x: rt<f32>[64, 64] = " + ("zeros()" if call.func == "zeros" else "fill(-inf)")
    if want is None:
        raise DiagnosticError(f"{call.func}() takes its shape from a typed binding: write "
                              f"`{example}`", call.span)
    if isinstance(want, TileType) and want.space == "st":
        raise DiagnosticError(f"{call.func}() makes register tiles and vectors, not {want}; "
                              "declare an rt<...> tile (a copy into shared memory can follow)",
                              call.span)
    if not isinstance(want, (TileType, VectorType)):
        raise DiagnosticError(f"{call.func}() makes tiles and vectors; for a {want} scalar write "
                              "the number itself", call.span)
    return want


def _zeros(lw, call: ast.Call, want) -> object:
    t = _creation_type(call, want)
    return lw.emit(ops.Zeros, [], result_types=[t], span=call.span).result


def _fill(lw, call: ast.Call, want) -> object:
    t = _creation_type(call, want)
    v = lw.expr(call.args[0])
    if not is_const(v):
        raise DiagnosticError("fill(v) needs a compile-time constant; for a runtime value start "
                              "from zeros() and add it", call.args[0].span)
    if isinstance(v, bool):
        raise DiagnosticError(f"fill(v) needs a number, got {show(v)}", call.args[0].span)
    return lw.emit(ops.Fill, [], {"value": to_float(v, call.args[0].span)}, [t], call.span).result


def _values(lw, call: ast.Call) -> list[Value]:
    return [lw.value(a, f"argument {i + 1} of {call.func}") for i, a in enumerate(call.args)]


def _op(lw, call: ast.Call, want) -> object:
    """Reductions, broadcasts and matrix products: every argument a value."""
    return lw.emit(ops.OPS[call.func], _values(lw, call), span=call.span).result


def _causal_mask(lw, call: ast.Call, want) -> object:
    t = lw.value(call.args[0], "argument 1 of causal_mask")
    q0 = lw.index(call.args[1], "causal_mask's query offset q0")
    k0 = lw.index(call.args[2], "causal_mask's key offset k0")
    return lw.emit(ops.CausalMask, [t, q0, k0], span=call.span).result


def _index_tile(lw, call: ast.Call, want) -> object:
    """row_index([offset]) / col_index([offset]): a tile of row or column indices."""
    if want is None:
        raise DiagnosticError(f"{call.func}() takes its shape from a typed binding: write "
                              f"`r: rt<f32>[64, 64] = {call.func}(q0)`", call.span)
    if not (isinstance(want, TileType) and want.space == "rt" and want.dtype == F32):
        raise DiagnosticError(f"{call.func}() makes f32 register tiles (indices are exact in f32 "
                              f"below 2^24), not {want}", call.span)
    offset = [lw.index(call.args[0], f"{call.func}'s offset")] if call.args else []
    axis = "row" if call.func == "row_index" else "col"
    return lw.emit(ops.Iota, offset, {"axis": axis}, [want], call.span).result


_COMPARE = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}


def _shaped(v) -> bool:
    return isinstance(v, Value) and isinstance(v.type, (TileType, VectorType))


def _select(lw, call: ast.Call, want) -> object:
    c_node, a_node, b_node = call.args
    if isinstance(c_node, ast.Binary) and c_node.op in _COMPARE:
        lhs, rhs = lw.expr(c_node.lhs), lw.expr(c_node.rhs)
        if _shaped(lhs) or _shaped(rhs):
            return _select_tiles(lw, call, lhs, rhs)
        c = fold_binary(c_node.op, lhs, rhs, c_node.span) if is_const(lhs) and is_const(rhs) else \
            lw.combine(c_node.op, lhs, rhs, c_node.lhs, c_node.rhs, c_node.span)
    else:
        c = lw.expr(c_node)
    return _select_scalars(lw, call, c)


def _select_tiles(lw, call: ast.Call, lhs, rhs) -> object:
    """select(a < b, x, y) with a tile or vector compared: one cmp_select op, elementwise."""
    c_node, a_node, b_node = call.args
    x, y = lw.expr(a_node), lw.expr(b_node)
    nodes = (c_node.lhs, c_node.rhs, a_node, b_node)
    vals = [lhs, rhs, x, y]
    shape_src = next(v for v in vals if _shaped(v))
    for i, (v, node) in enumerate(zip(vals, nodes)):
        lw.reject_global(v, node)
        if is_const(v):
            vals[i] = lw.adopt(v, shape_src.type, node, nodes[i ^ 1])
    try:
        return lw.emit(ops.CmpSelect, vals, {"cmp": _COMPARE[c_node.op]}, span=call.span).result
    except VerifyError as err:
        raise DiagnosticError(err.message.replace("cmp_select: ", "select: ", 1), call.span) from None


def _select_scalars(lw, call: ast.Call, c) -> object:
    c_node, a_node, b_node = call.args
    if is_const(c):
        if not isinstance(c, bool):
            raise DiagnosticError(f"select's condition must be a bool, got {show(c)}", c_node.span)
        return lw.expr(a_node if c else b_node)
    lw.reject_global(c, c_node)
    a, b = lw.expr(a_node), lw.expr(b_node)
    if is_const(a) and is_const(b):
        a = lw.materialize(a, a_node.span)
    if is_const(a):
        a = lw.adopt(a, b.type, a_node, b_node)
    if is_const(b):
        b = lw.adopt(b, a.type, b_node, a_node)
    lw.reject_global(a, a_node)
    lw.reject_global(b, b_node)
    return lw.emit(ops.Select, [c, a, b], span=call.span).result


FUNCTIONS: dict[str, Builtin] = {}


def _register(names, lower, lo: int, hi: int, signature: str) -> None:
    for name in names:
        FUNCTIONS[name] = Builtin(lower, lo, hi, signature.replace("NAME", name))


_register(("exp", "exp2", "log", "log2", "abs", "relu", "sqrt", "rsqrt", "sin", "cos", "tanh"),
          _map, 1, 1, "NAME(x)")
_register(tuple(cls.NAME for cls in ops.ACTIVATION_OPS), _map, 1, 1, "NAME(x)")
_register(("max", "min"), _minmax, 2, 2, "NAME(a, b)")
_register(("cvt",), _cvt, 1, 1, "cvt<T>(x)")
_register(("zeros",), _zeros, 0, 0, "zeros()")
_register(("fill",), _fill, 1, 1, "fill(v)")
_register(tuple(cls.NAME for cls in ops.REDUCE_OPS), _op, 1, 1, "NAME(t)")
_register(tuple(cls.NAME for cls in ops.BROADCAST_OPS), _op, 2, 2, "NAME(t, v)")
_register(tuple(cls.NAME for cls in ops.MMA_OPS), _op, 2, 3, "NAME(a, b[, acc])")
_register(("causal_mask",), _causal_mask, 3, 3, "causal_mask(t, q0, k0)")
_register(("select",), _select, 3, 3, "select(c, a, b)")
_register(("row_index", "col_index"), _index_tile, 0, 1, "NAME([offset])")


def lower_call(lw, call: ast.Call, want: Optional[Type]) -> object:
    fn = FUNCTIONS.get(call.func)
    if fn is None:
        hint = did_you_mean(call.func, FUNCTIONS)
        raise DiagnosticError(f"unknown function '{call.func}'{hint}", call.func_span)
    if call.type_arg is not None and call.func != "cvt":
        raise DiagnosticError(f"{call.func} takes no type argument: it is {fn.signature}",
                              call.type_span)
    n = len(call.args)
    if not fn.min_args <= n <= fn.max_args:
        if fn.max_args == 0:
            want_n = "no arguments"
        elif fn.min_args == fn.max_args:
            want_n = f"{fn.min_args} argument{'s' if fn.min_args != 1 else ''}"
        else:
            want_n = f"{fn.min_args} or {fn.max_args} arguments"
        raise DiagnosticError(f"{call.func} takes {want_n} ({fn.signature}), got {n}", call.span)
    return fn.lower(lw, call, want)

