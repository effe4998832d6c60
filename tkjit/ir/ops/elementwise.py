"""Elementwise ops on scalars, register tiles and vectors: maps, conversions, fills, masks."""
from __future__ import annotations

from ..core import Op
from ..types import (BOOL, F32, I32, ScalarType, TileType, Type, VectorType, describe, is_register,
                     with_dtype)


def _need_register(op: Op, t: Type, what: str) -> None:
    if not is_register(t):
        hint = "; copy it into a register tile (rt) first" if isinstance(t, TileType) else ""
        raise op.error(f"{what} needs a scalar, register tile or vector, got {describe(t)}{hint}")


class Binary(Op):
    """``%r = add %a, %b``: elementwise with scalar broadcast. Subclasses name the function."""

    OPERANDS = ("lhs", "rhs")
    KIND = "arith"  # arith | int | compare | logic
    ATTRS = {"fuse": str}
    OPTIONAL_ATTRS = frozenset({"fuse"})
    """``fuse``: fuse-elementwise's decision (passes/fuse_elementwise.py), on a register tile only."""

    def infer(self):
        a, b = self.operands[0].type, self.operands[1].type
        _need_register(self, a, "the left operand")
        _need_register(self, b, "the right operand")
        if isinstance(a, ScalarType) and isinstance(b, ScalarType):
            if a.dtype != b.dtype:
                raise self.error(f"operand dtypes differ: {a} and {b}")
            if self.KIND == "int" and a.dtype != I32:
                raise self.error(f"expected i32 operands, got {a}")
            if self.KIND == "logic" and a.dtype != BOOL:
                raise self.error(f"expected bool operands, got {a}")
            if self.KIND in ("arith",) and a.dtype == BOOL:
                raise self.error("arithmetic on bool values")
            return [ScalarType(BOOL) if self.KIND == "compare" else a]
        if self.KIND == "compare":
            raise self.error(f"compares scalars; tiles and vectors compare only as the condition of "
                             f"select(a < b, x, y), which picks x or y per element (got {describe(a)} "
                             f"and {describe(b)})")
        if self.KIND != "arith":
            raise self.error(f"needs scalar operands, got {describe(a)} and {describe(b)}")
        if isinstance(b, ScalarType):
            return [self._broadcast(a, b)]
        if isinstance(a, ScalarType):
            return [self._broadcast(b, a)]
        if type(a) is not type(b):
            raise self.error(f"cannot combine {describe(a)} with {describe(b)} elementwise; "
                             "broadcast a vector over a tile with add_row/sub_col/mul_row/...")
        if a.shape != b.shape or getattr(a, "kind", None) != getattr(b, "kind", None):
            raise self.error(f"shapes differ: {describe(a)} and {describe(b)}")
        if a.dtype != b.dtype:
            raise self.error(f"dtypes differ: {a.dtype} and {b.dtype}; convert one with cvt<...>")
        return [a]

    def _broadcast(self, t: Type, s: ScalarType) -> Type:
        if s.dtype == BOOL:
            raise self.error("cannot broadcast a bool over a tile")
        return t


def _binary(name: str, kind: str = "arith") -> type[Binary]:
    return type(name.capitalize(), (Binary,), {"NAME": name, "KIND": kind,
                                               "__doc__": f"``{name}``: elementwise {kind} op."})


Add, Sub, Mul, Div = _binary("add"), _binary("sub"), _binary("mul"), _binary("div")
Max, Min = _binary("max"), _binary("min")
CDiv, FloorDiv, Mod = _binary("cdiv", "int"), _binary("floordiv", "int"), _binary("mod", "int")
Lt, Le, Gt, Ge = (_binary(n, "compare") for n in ("lt", "le", "gt", "ge"))
Eq, Ne = _binary("eq", "compare"), _binary("ne", "compare")
And, Or = _binary("and", "logic"), _binary("or", "logic")
BINARY_OPS = (Add, Sub, Mul, Div, Max, Min, CDiv, FloorDiv, Mod, Lt, Le, Gt, Ge, Eq, Ne, And, Or)


class Unary(Op):
    """``%r = exp2 %x``: an elementwise math function (float operands unless INT_OK)."""

    OPERANDS = ("x",)
    INT_OK = False
    ATTRS = {"fuse": str}
    OPTIONAL_ATTRS = frozenset({"fuse"})

    def infer(self):
        t = self.operands[0].type
        _need_register(self, t, "its operand")
        if t.dtype == BOOL and self.NAME != "not":
            raise self.error("expected a number, got bool")
        if self.NAME == "not" and t != ScalarType(BOOL):
            raise self.error(f"expected bool, got {t}")
        if not t.dtype.is_float and not self.INT_OK and self.NAME != "not":
            raise self.error(f"expected a float operand, got {t}; convert it with cvt<f32>")
        return [t]


def _unary(name: str, int_ok: bool = False) -> type[Unary]:
    return type(name.capitalize(), (Unary,), {"NAME": name, "INT_OK": int_ok,
                                              "__doc__": f"``{name}``: elementwise map."})


Neg, Abs, Relu = _unary("neg", True), _unary("abs", True), _unary("relu", True)
Not = _unary("not", True)
Exp, Exp2, Log, Log2 = _unary("exp"), _unary("exp2"), _unary("log"), _unary("log2")
Sqrt, Rsqrt, Sin, Cos, Tanh = (_unary(n) for n in ("sqrt", "rsqrt", "sin", "cos", "tanh"))


class Gelu(Unary):
    """``%r = gelu %x``: x·Φ(x), Φ the standard normal CDF (the erf form, torch's default gelu)."""

    NAME = "gelu"


class GeluTanh(Unary):
    """``%r = gelu_tanh %x``: the tanh approximation x·½(1 + tanh(√(2/π)(x + 0.044715x³)))
    (torch's ``gelu(x, approximate="tanh")``)."""

    NAME = "gelu_tanh"


class Silu(Unary):
    """``%r = silu %x``: x·sigmoid(x)."""

    NAME = "silu"


class Sigmoid(Unary):
    """``%r = sigmoid %x``: 1 / (1 + e^-x)."""

    NAME = "sigmoid"


ACTIVATION_OPS = (Gelu, GeluTanh, Silu, Sigmoid)
UNARY_OPS = (Neg, Abs, Relu, Not, Exp, Exp2, Log, Log2, Sqrt, Rsqrt, Sin, Cos, Tanh, *ACTIVATION_OPS)


class Cvt(Op):
    """``%r = cvt %x {dtype = "bf16"}`` — convert the element dtype (rounding to nearest even)."""

    NAME = "cvt"
    OPERANDS = ("x",)
    ATTRS = {"dtype": str}

    def infer(self):
        from ..types import DTYPES
        t = self.operands[0].type
        _need_register(self, t, "its operand")
        dt = DTYPES.get(self.attrs["dtype"])
        if dt is None or dt == BOOL:
            raise self.error(f"cannot convert to '{self.attrs['dtype']}'")
        if not isinstance(t, ScalarType) and not dt.is_float:
            raise self.error(f"tiles and vectors hold floats; cannot convert to {dt}")
        return [with_dtype(t, dt)]


class _Creates(Op):
    """An op whose result type is written on it (zeros, fill): a register tile or vector."""

    def infer(self):
        if not self.results:
            raise self.error("needs a result type")
        t = self.results[0].type
        if not (isinstance(t, VectorType) or (isinstance(t, TileType) and t.space == "rt")):
            raise self.error(f"creates register tiles and vectors, not {describe(t)}")
        return [t]


class Zeros(_Creates):
    """``%acc = zeros : rt<f32>[128, 256]``."""

    NAME = "zeros"


class Fill(_Creates):
    """``%mx = fill {value = -inf} : cv<f32>[128]``."""

    NAME = "fill"
    ATTRS = {"value": (int, float)}


class CausalMask(Op):
    """``%s2 = causal_mask %s, %q0, %k0`` — element (r, c) becomes ``fill`` (default -inf) where
    ``k0 + c > q0 + r``: query row q0+r may only see keys up to itself."""

    NAME = "causal_mask"
    OPERANDS = ("x", "q0", "k0")
    ATTRS = {"fill": (int, float)}
    OPTIONAL_ATTRS = frozenset({"fill"})

    def infer(self):
        t, q0, k0 = (v.type for v in self.operands)
        if not (isinstance(t, TileType) and t.space == "rt" and t.dtype.is_float):
            raise self.error(f"expected a float register tile, got {describe(t)}")
        for name, s in (("q0", q0), ("k0", k0)):
            if s != ScalarType(I32):
                raise self.error(f"{name} expected i32, got {describe(s)}")
        return [t]


class Iota(_Creates):
    """``%qi = iota {axis = "row"} %q0 : rt<f32>[64, 128]``: element (r, c) is ``q0 + r`` (axis
    row) or ``q0 + c`` (axis col); without the offset operand, ``r`` or ``c``. Index tiles are f32
    register tiles (exact up to 2^24), so they combine with scores and with each other."""

    NAME = "iota"
    OPERANDS = ("offset?",)
    ATTRS = {"axis": str, "fuse": str}
    OPTIONAL_ATTRS = frozenset({"fuse"})

    def infer(self):
        [t] = super().infer()
        if self.attrs["axis"] not in ("row", "col"):
            raise self.error(f"axis must be \"row\" or \"col\", got {self.attrs['axis']!r}")
        if not isinstance(t, TileType) or t.dtype != F32:
            raise self.error(f"makes f32 register tiles (indices are exact in f32 below 2^24), "
                             f"not {describe(t)}")
        if self.operands and self.operands[0].type != ScalarType(I32):
            raise self.error(f"the offset expected i32, got {describe(self.operands[0].type)}")
        return [t]


COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")


class CmpSelect(Op):
    """``%r = cmp_select {cmp = "lt"} %a, %b, %x, %y``: elementwise ``a cmp b ? x : y`` on register
    tiles or vectors of one shape (scalars broadcast). The language's ``select(a < b, x, y)`` with
    a tile on either side of the comparison: comparing and choosing are one op, so no tile of
    booleans ever exists (tiles hold floats; a bool tile would need a layout, loads, stores and
    conversions of its own). ``ne`` is true when either side is NaN; the others are false then."""

    NAME = "cmp_select"
    OPERANDS = ("a", "b", "x", "y")
    ATTRS = {"cmp": str, "fuse": str}
    OPTIONAL_ATTRS = frozenset({"fuse"})

    def infer(self):
        if self.attrs["cmp"] not in COMPARISONS:
            raise self.error(f"cmp must be one of {', '.join(COMPARISONS)}, got {self.attrs['cmp']!r}")
        types = [v.type for v in self.operands]
        for t, what in zip(types, ("a", "b", "x", "y")):
            _need_register(self, t, f"operand {what}")
            if t.dtype == BOOL:
                raise self.error(f"operand {what} is a bool; compare numbers")
        shaped = [t for t in types if not isinstance(t, ScalarType)]
        if not shaped:
            raise self.error("needs a tile or vector operand; on scalars use select")
        first = shaped[0]
        for t in shaped[1:]:
            if type(t) is not type(first) or t.shape != first.shape \
                    or getattr(t, "kind", None) != getattr(first, "kind", None):
                raise self.error(f"shapes differ: {describe(first)} and {describe(t)}")
        for pair, names in ((types[:2], "a and b"), (types[2:], "x and y")):
            if all(not isinstance(t, ScalarType) for t in pair) and pair[0].dtype != pair[1].dtype:
                raise self.error(f"{names} have different dtypes: {pair[0].dtype} and {pair[1].dtype}; "
                                 "convert one with cvt<...>")
        x, y = types[2:]
        if not isinstance(x, ScalarType):
            return [x]
        if not isinstance(y, ScalarType):
            return [y]
        if not x.dtype.is_float or x.dtype != y.dtype:
            raise self.error(f"with scalar x and y, both must be one float dtype, got {x} and {y}")
        return [with_dtype(first, x.dtype)]


class Select(Op):
    """``%r = select %cond, %a, %b`` on scalars."""

    NAME = "select"
    OPERANDS = ("cond", "a", "b")

    def infer(self):
        c, a, b = (v.type for v in self.operands)
        if c != ScalarType(BOOL):
            raise self.error(f"condition expected bool, got {c}")
        if a != b or not isinstance(a, ScalarType):
            raise self.error(f"expected two scalars of one type, got {a} and {b}")
        return [a]


_ = F32
