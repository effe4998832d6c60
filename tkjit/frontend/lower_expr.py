"""Expressions → tile IR: names, constants, operators, and binding a value to a declared type.

A lowered expression is either a compile-time constant (a Python ``bool``/``int``/``float``; all
constant arithmetic folds) or an SSA ``Value``. A constant meets IR only when combined with a
value: it then takes the other operand's dtype (an integer next to an f32 becomes an f32 ``const``).
"""
from __future__ import annotations

import math
from typing import Optional, Union

from ..errors import DiagnosticError, VerifyError
from ..ir import ops
from ..ir.core import Block, Op, Value
from ..ir.types import (BOOL, F32, I32, GlobalType, ScalarType, TileType, Type, VectorType,
                        describe)
from ..source import Span
from . import ast
from .fold import Const, fold_binary, fold_unary, is_const, show, to_float
from .scope import Scopes, Var, did_you_mean

Val = Union[Value, Const]

BUILTIN_CONSTANTS: dict[str, float] = {
    "LOG2E": 1.0 / math.log(2.0), "LN2": math.log(2.0), "PI": math.pi,
    "inf": math.inf, "nan": math.nan,
}

_ARITH = {"+": ops.Add, "-": ops.Sub, "*": ops.Mul, "//": ops.FloorDiv, "%": ops.Mod,
          "==": ops.Eq, "!=": ops.Ne, "<": ops.Lt, "<=": ops.Le, ">": ops.Gt, ">=": ops.Ge,
          "&&": ops.And, "||": ops.Or}
FOLDABLE_FUNCTIONS = frozenset({"exp", "exp2", "log", "log2", "abs", "relu", "sqrt", "rsqrt",
                                "sin", "cos", "tanh", "max", "min", "cvt", "select", "gelu",
                                "gelu_tanh", "silu", "sigmoid"})
I32_T, F32_T, BOOL_T = ScalarType(I32), ScalarType(F32), ScalarType(BOOL)


class ExprLowering:
    """The expression half of the lowering; ``lower.Lowerer`` adds statements and the kernel."""

    def __init__(self) -> None:
        self.scopes = Scopes()
        self.blocks: list[Block] = []
        self.const_cache: list[dict[tuple, Value]] = []
        self.dim_ops: dict[str, Op] = {}

    # -- emitting ops ----------------------------------------------------------------------
    def emit(self, cls: type[Op], operands=(), attrs=None, result_types=None, span=None,
             hints=None) -> Op:
        op = cls(list(operands), attrs or {}, result_types, (), span, hints)
        self.blocks[-1].append(op)
        return op

    def emit_as(self, symbol: str, cls: type[Op], operands, span: Span) -> Value:
        """Build an op written as an operator (``+``) and report its errors in those terms."""
        try:
            return self.emit(cls, operands, span=span).result
        except VerifyError as err:
            prefix = f"{cls.NAME}: "
            message = err.message[len(prefix):] if err.message.startswith(prefix) else err.message
            raise DiagnosticError(f"'{symbol}': {message}", span) from None

    def const(self, value: Const, dtype, span: Span, hint: Optional[str] = None) -> Value:
        """An IR ``const`` of ``dtype`` (i32, f32 or bool); unnamed ones are shared per region."""
        if dtype == I32:
            if isinstance(value, bool) or not isinstance(value, int):
                raise DiagnosticError(f"expected an integer, got {show(value)}", span)
            if not -2**31 <= value < 2**31:
                raise DiagnosticError(f"{value} does not fit in i32", span)
        elif dtype == F32:
            value = to_float(value, span)
        key = (dtype.name, type(value).__name__, repr(value))
        if hint is None:
            for cache in reversed(self.const_cache):
                if key in cache:
                    return cache[key]
        default_hint = f"c{value}" if dtype == I32 and value >= 0 else \
            (show(value) if dtype == BOOL else None)
        v = self.emit(ops.Const, (), {"value": value}, [ScalarType(dtype)], span,
                      [hint or default_hint]).result
        if hint is None:
            self.const_cache[-1][key] = v
        return v

    def materialize(self, value: Const, span: Span, hint: Optional[str] = None) -> Value:
        """A constant as a value of its natural type: int → i32, float → f32, bool → bool."""
        if isinstance(value, bool):
            return self.const(value, BOOL, span, hint)
        return self.const(value, I32 if isinstance(value, int) else F32, span, hint)

    # -- names -------------------------------------------------------------------------------
    def lookup(self, node: ast.Name) -> Var:
        var = self.scopes.lookup(node.name)
        if var is not None:
            return var
        if node.name in BUILTIN_CONSTANTS:
            return Var(node.name, "const", node.span, None, BUILTIN_CONSTANTS[node.name])
        notes = []
        expired = self.scopes.expired.get(node.name)
        if expired is not None:
            var, where = expired
            notes.append(f"'{node.name}' was bound at {var.span.location()} inside {where}, and "
                         f"is local to it; bind it before {where} to use it after")
            return self._fail_unknown(node, "", notes)
        hint = did_you_mean(node.name, list(self.scopes.visible()) + list(BUILTIN_CONSTANTS))
        return self._fail_unknown(node, hint, notes)

    def _fail_unknown(self, node: ast.Name, hint: str, notes: list[str]):
        raise DiagnosticError(f"unknown name '{node.name}'{hint}", node.span, notes)

    def var_value(self, var: Var, span: Span) -> Val:
        if var.kind == "dim" and var.value is None:
            op = ops.Dim([], {"name": var.name}, None, (), var.span, [var.name])
            self.dim_ops[var.name] = op
            var.value = op.result
        return var.value  # type: ignore[return-value]

    # -- compile-time constants -------------------------------------------------------------
    def constant(self, node: ast.Expr, what: str) -> Const:
        """An expression that must fold at compile time (tile shapes, annotation arguments)."""
        culprit = self._runtime_part(node)
        if culprit is not None:
            part, var = culprit
            if var is not None:
                raise DiagnosticError(f"{what} must be a compile-time constant, but '{var.name}' "
                                      f"is {var.describe()}", part.span)
            raise DiagnosticError(f"{what} must be a compile-time constant, but "
                                  f"`{_text(part)}` is computed at run time", part.span)
        v = self.expr(node)
        if not is_const(v):  # pragma: no cover - _runtime_part finds every runtime part
            raise DiagnosticError(f"{what} must be a compile-time constant", node.span)
        return v

    def _runtime_part(self, node: ast.Expr):
        if isinstance(node, ast.Name):
            var = self.scopes.lookup(node.name)
            return (node, var) if var is not None and not var.is_constant else None
        if isinstance(node, ast.Unary):
            return self._runtime_part(node.operand)
        if isinstance(node, ast.Binary):
            return self._runtime_part(node.lhs) or self._runtime_part(node.rhs)
        if isinstance(node, ast.Method):
            return (node, None)
        if isinstance(node, ast.Call):
            if node.func not in FOLDABLE_FUNCTIONS:
                return (node, None)
            for arg in node.args:
                found = self._runtime_part(arg)
                if found:
                    return found
        return None

    def constant_int(self, node: ast.Expr, what: str) -> int:
        v = self.constant(node, what)
        if isinstance(v, bool) or not isinstance(v, int):
            raise DiagnosticError(f"{what} must be an integer, got {show(v)}", node.span)
        return v

    # -- expressions ---------------------------------------------------------------------------
    def expr(self, node: ast.Expr, want: Optional[Type] = None) -> Val:
        """Lower an expression. ``want`` is the declared type of the binding it is the whole
        value of (tile loads, zeros() and fill() take their type from it)."""
        if isinstance(node, (ast.Num, ast.Bool)):
            return node.value
        if isinstance(node, ast.Name):
            return self.var_value(self.lookup(node), node.span)
        if isinstance(node, ast.Unary):
            return self.unary(node)
        if isinstance(node, ast.Binary):
            return self.binary(node)
        if isinstance(node, ast.Call):
            from .builtins import lower_call
            return lower_call(self, node, want)
        if isinstance(node, ast.Method):
            from .memory import lower_load
            return lower_load(self, node, want)
        raise AssertionError(f"unknown expression node {type(node).__name__}")

    def value(self, node: ast.Expr, what: str = "this") -> Value:
        """An expression that must be a runtime value (not a constant, not a global tensor)."""
        v = self.expr(node)
        if is_const(v):
            raise DiagnosticError(f"{what} needs a tile, vector or scalar value, got the constant "
                                  f"{show(v)}", node.span)
        self.reject_global(v, node)
        return v

    def reject_global(self, v: Val, node: ast.Expr) -> None:
        if isinstance(v, Value) and isinstance(v.type, GlobalType):
            name = node.name if isinstance(node, ast.Name) else "this"
            raise DiagnosticError(f"'{name}' is a global tensor, not a value: load a tile from it "
                                  f"with {name}.tile(...) into a typed binding", node.span)

    def index(self, node: ast.Expr, what: str) -> Value:
        """An i32 scalar: a coordinate, a loop bound, a mask offset."""
        v = self.expr(node)
        if is_const(v):
            if isinstance(v, bool) or not isinstance(v, int):
                raise DiagnosticError(f"{what} must be an integer, got {show(v)}", node.span)
            return self.const(v, I32, node.span)
        self.reject_global(v, node)
        if v.type != I32_T:
            raise DiagnosticError(f"{what} must be an i32 scalar, got {describe(v.type)}",
                                  node.span)
        return v

    def unary(self, node: ast.Unary) -> Val:
        x = self.expr(node.operand)
        if is_const(x):
            return fold_unary(node.op, x, node.span)
        self.reject_global(x, node.operand)
        cls = ops.Neg if node.op == "-" else ops.Not
        return self.emit_as(node.op, cls, [x], node.span)

    def binary(self, node: ast.Binary) -> Val:
        a = self.expr(node.lhs)
        if node.op in ("&&", "||") and isinstance(a, bool):
            return self._decided_by_lhs(node, a)
        b = self.expr(node.rhs)
        if is_const(a) and is_const(b):
            return fold_binary(node.op, a, b, node.span)
        if node.op in ("/", "//", "%") and is_const(b) and not isinstance(b, bool) and b == 0:
            raise DiagnosticError(f"division by zero: the divisor of '{node.op}' is the constant "
                                  f"{show(b)}", node.span)
        if node.op in ("&&", "||"):
            short = self._short_circuit(node.op, a, b, node)
            if short is not None:
                return short
        return self.combine(node.op, a, b, node.lhs, node.rhs, node.span)

    def _decided_by_lhs(self, node: ast.Binary, a: bool) -> Val:
        """``false && x``, ``true || x``: x is still checked, but its ops are dropped."""
        scratch = Block()
        self.blocks.append(scratch)
        self.const_cache.append({})
        try:
            b = self.expr(node.rhs)
        finally:
            self.blocks.pop()
            consts = self.const_cache.pop()
        if is_const(b):
            return fold_binary(node.op, a, b, node.span)
        result = self._short_circuit(node.op, a, b, node)
        if result is b:  # true && x, false || x: x it is, with the ops that compute it
            for op in scratch.ops:
                self.blocks[-1].append(op)
            self.const_cache[-1].update(consts)
        return result

    def _short_circuit(self, op: str, a: Val, b: Val, node: ast.Binary) -> Optional[Val]:
        """``true && x`` is x, ``false && x`` is false; and the same for ``||``."""
        for c, other, other_node in ((a, b, node.rhs), (b, a, node.lhs)):
            if is_const(c):
                if not isinstance(c, bool):
                    raise DiagnosticError(f"'{op}' needs bools, got {show(c)}", node.span)
                if isinstance(other, Value) and other.type != BOOL_T:
                    raise DiagnosticError(f"'{op}' needs bools, got {describe(other.type)}",
                                          other_node.span)
                decided = (op == "&&" and not c) or (op == "||" and c)
                return c if decided else other
        return None

    def combine(self, op: str, a: Val, b: Val, a_node: ast.Node, b_node: ast.Node,
                span: Span, cls: Optional[type[Op]] = None) -> Value:
        """``a op b`` where at least one side is a value; constants adopt the other's dtype."""
        self.reject_global(a, a_node)
        self.reject_global(b, b_node)
        if is_const(a):
            a = self.adopt(a, b.type, a_node, b_node)
        if is_const(b):
            b = self.adopt(b, a.type, b_node, a_node)
        ta, tb = a.type, b.type
        if isinstance(ta, ScalarType) and isinstance(tb, ScalarType) and ta != tb \
                and {ta.dtype, tb.dtype} == {I32, F32}:
            int_node = a_node if ta.dtype == I32 else b_node
            raise DiagnosticError(f"'{op}' mixes i32 and f32: convert the i32 operand with "
                                  f"cvt<f32>({_text(int_node)})", span)
        if cls is None:
            cls = self._operator_class(op, ta, tb, span)
        return self.emit_as(op, cls, [a, b], span)

    def _operator_class(self, op: str, ta: Type, tb: Type, span: Span) -> type[Op]:
        ints = ta == I32_T and tb == I32_T
        if op == "/":
            return ops.CDiv if ints else ops.Div
        if op in ("//", "%") and not ints:
            hint = " (use '/' to divide floats)" if op == "//" else ""
            raise DiagnosticError(f"'{op}' needs i32 operands, got {describe(ta)} and "
                                  f"{describe(tb)}{hint}", span)
        return _ARITH[op]

    def adopt(self, c: Const, other: Type, node: ast.Node, other_node: ast.Node) -> Value:
        """A constant combined with a value of type ``other`` becomes a ``const`` of its dtype."""
        if isinstance(other, ScalarType) and other.dtype == BOOL:
            if not isinstance(c, bool):
                raise DiagnosticError(f"cannot combine the number {show(c)} with a bool",
                                      node.span)
            return self.const(c, BOOL, node.span)
        if isinstance(c, bool):
            raise DiagnosticError(f"cannot combine the bool {show(c)} with {describe(other)}",
                                  node.span)
        if other == I32_T:
            if isinstance(c, float):
                raise DiagnosticError(
                    f"{show(c)} is a float but {_text(other_node)} is i32: convert it with "
                    f"cvt<f32>({_text(other_node)})", node.span)
            return self.const(c, I32, node.span)
        if isinstance(other, (ScalarType, TileType, VectorType)):
            return self.const(c, F32, node.span)  # broadcast over a tile converts to its dtype
        raise DiagnosticError(f"cannot combine {show(c)} with {describe(other)}", node.span)


def _text(node: ast.Node) -> str:
    """The source text of a node (for suggestions such as cvt<f32>(k))."""
    return node.span.source.text[node.span.start:node.span.end]
