"""Global memory in the language: ``G.tile(i, j)`` loads (typed by their binding) and
``G.tile(i, j) = x`` stores."""
from __future__ import annotations

from typing import Optional

from ..errors import DiagnosticError, VerifyError
from ..ir import ops
from ..ir.core import Value
from ..ir.types import GlobalType, ScalarType, TileType, Type, VectorType, describe
from . import ast
from .fold import is_const, show


def _global(lw, obj: ast.Expr, method: str, method_span) -> Value:
    if method != "tile":
        raise DiagnosticError(f"unknown method '.{method}': a global tensor has .tile(...) only",
                              method_span)
    if not isinstance(obj, ast.Name):
        raise DiagnosticError(".tile(...) applies to a global tensor parameter by name, as in "
                              "A.tile(m, k)", obj.span)
    var = lw.lookup(obj)
    value = lw.var_value(var, obj.span)
    if not (isinstance(value, Value) and isinstance(value.type, GlobalType)):
        what = describe(value.type) if isinstance(value, Value) else f"the constant {show(value)}"
        raise DiagnosticError(f"'{obj.name}' is {what}, not a global tensor: only global tensor "
                              "parameters have .tile(...)", obj.span)
    return value


def _coords(lw, args) -> list[Value]:
    coords = [lw.index(a, f"tile coordinate {i}") for i, a in enumerate(args)]
    for i, (a, c) in enumerate(zip(args, coords)):
        value = c.owner.attrs.get("value") if getattr(c.owner, "NAME", None) == "const" else None
        if isinstance(value, int) and value < 0:  # out of range at every launch
            raise DiagnosticError(f"tile coordinate {i} is {value}: tile coordinates start at 0", a.span)
    return coords


def lower_load(lw, node: ast.Method, want: Optional[Type]) -> Value:
    """``A.tile(m, k)`` as the whole value of a binding whose type says what tile to make."""
    g = _global(lw, node.obj, node.method, node.method_span)
    name = node.obj.name  # type: ignore[union-attr]
    if want is None:
        raise DiagnosticError(
            f"{name}.tile(...) takes its tile type from a typed binding: write "
            f"`a: st<{g.type.dtype}>[BM, BK] = {name}.tile(...)`", node.span)
    if not isinstance(want, (TileType, VectorType)):
        raise DiagnosticError(f"{name}.tile(...) loads a tile or a vector, but the binding is "
                              f"declared {want}", node.span)
    coords = _coords(lw, node.args)
    return _emit(lw, f"{name}.tile(...)", ops.Load, [g, *coords], [want], node.span).result


def lower_store(lw, stmt: ast.Store) -> None:
    """``G.tile(i, j) = x``: a register value of another dtype is converted by the store."""
    target = ast.Name(stmt.target_span, stmt.target)
    g = _global(lw, target, stmt.method, stmt.method_span)
    value = lw.expr(stmt.value)
    if is_const(value):
        raise DiagnosticError(f"cannot store the constant {show(value)}: a store writes a tile or "
                              "a vector", stmt.value.span)
    lw.reject_global(value, stmt.value)
    if isinstance(value.type, ScalarType):
        raise DiagnosticError(f"cannot store {describe(value.type)}: a store writes a tile or a "
                              "vector", stmt.value.span)
    coords = _coords(lw, stmt.coords)
    _emit(lw, f"{stmt.target}.tile(...) = ...", ops.Store, [g, value, *coords], None, stmt.span)


def _emit(lw, what: str, cls, operands, result_types, span):
    """Build a load or store, reporting its errors in the source's terms (A.tile(...))."""
    try:
        return lw.emit(cls, operands, result_types=result_types, span=span)
    except VerifyError as err:
        prefix = f"{cls.NAME}: "
        message = err.message[len(prefix):] if err.message.startswith(prefix) else err.message
        raise DiagnosticError(f"{what}: {message}", span) from None
