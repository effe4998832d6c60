"""Scalar IR values (i32, f32, bool) computed in PTX registers, for the Hopper kernels whose
index arithmetic lives in the IR (the attention kernel's key/value head ``h // (H // HKV)``,
its causal trip count and mask offsets, the softmax scale).

    ev = ScalarEmitter(builder, env)    # env: IR Value -> register (block indices, params, j)
    reg = ev.value(v)                   # emits what v needs, once per emitter

Each op kind has one small emitter in a table; ``supported(v)`` says beforehand whether a value
can be computed (the matcher refuses the kernel otherwise, naming the op). Integer ``//`` and
``%`` round toward minus infinity, like the interpreter; ``/`` on i32 rounds up.
"""
from __future__ import annotations

from ...ir.core import Value
from ...ir.ops import Const, Dim
from ...ir.ops.elementwise import (Add, And, CDiv, Div, Eq, FloorDiv, Ge, Gt, Le, Lt, Max, Min, Mod,
                                   Mul, Ne, Not, Or, Select, Sub)
from ...ir.types import BOOL, F32, I32, ScalarType
from ..ptx import f32_imm
from .builder import Builder

ARITH = {Add: "add", Sub: "sub", Mul: "mul", Max: "max", Min: "min"}
COMPARE = {Lt: "lt", Le: "le", Gt: "gt", Ge: "ge", Eq: "eq", Ne: "ne"}
LOGIC = {And: "and", Or: "or"}


class UnsupportedScalar(Exception):
    """A scalar the Hopper kernels cannot compute in registers (the message names the op)."""


def supported(v: Value, env: set[Value]) -> None:
    """Raise UnsupportedScalar unless ``v`` can be computed from ``env`` and constants."""
    if v in env:
        return
    op = v.owner
    if not isinstance(v.type, ScalarType) or v.type.dtype not in (I32, F32, BOOL):
        raise UnsupportedScalar(f"%{v.hint} is {v.type}, not an i32/f32/bool scalar")
    if op is None or not hasattr(op, "NAME"):
        raise UnsupportedScalar(f"%{v.hint} is a block argument the kernel does not know")
    if type(op) not in TABLE:
        raise UnsupportedScalar(f"'{op.NAME}' (%{v.hint}) has no scalar PTX here")
    for x in op.operands:
        supported(x, env)


class ScalarEmitter:
    def __init__(self, b: Builder, env: dict[Value, str]):
        self.b = b
        self.env = dict(env)

    def value(self, v: Value) -> str:
        hit = self.env.get(v)
        if hit is not None:
            return hit
        op = v.owner
        emit = TABLE.get(type(op))
        if emit is None:
            raise UnsupportedScalar(f"'{getattr(op, 'NAME', '?')}' (%{v.hint}) has no scalar PTX here")
        reg = emit(self, op, v.type.dtype)
        self.env[v] = reg
        return reg

    def operands(self, op) -> list[str]:
        return [self.value(x) for x in op.operands]


def _kind(dtype) -> tuple[str, str]:
    """(register kind, PTX type suffix)."""
    return ("f32", "f32") if dtype == F32 else ("b32", "s32")


def _const(ev: ScalarEmitter, op, dtype) -> str:
    value = op.attrs["value"]
    if dtype == BOOL:
        p = ev.b.pred()
        ev.b(f"setp.ne.u32 {p}, {int(value)}, 0;")
        return p
    if dtype == F32:
        r = ev.b.reg("f32")
        ev.b(f"mov.f32 {r}, {f32_imm(float(value))};")
        return r
    return ev.b.mov(int(value))


def _dim(ev: ScalarEmitter, op, dtype) -> str:
    return ev.b.dims[op.attrs["name"]]


def _arith(ev: ScalarEmitter, op, dtype) -> str:
    a, c = ev.operands(op)
    kind, t = _kind(dtype)
    name = ARITH[type(op)]
    if name == "mul" and t == "s32":
        name = "mul.lo"
    r = ev.b.reg(kind)
    ev.b(f"{name}.{t} {r}, {a}, {c};")
    return r


def _div(ev: ScalarEmitter, op, dtype) -> str:
    a, c = ev.operands(op)
    if dtype == F32:
        r = ev.b.reg("f32")
        ev.b(f"div.rn.f32 {r}, {a}, {c};")
        return r
    return _cdiv(ev, op, dtype)


def _floor_parts(ev: ScalarEmitter, a: str, c: str) -> tuple[str, str]:
    """(floor(a / c), a - c * floor(a / c)) for i32, c != 0."""
    b = ev.b
    q, r, fix, sign = b.reg(), b.reg(), b.pred(), b.pred()
    b(f"div.s32 {q}, {a}, {c};", f"rem.s32 {r}, {a}, {c};")
    x = b.reg()
    b(f"xor.b32 {x}, {r}, {c};", f"setp.lt.s32 {sign}, {x}, 0;",
      f"setp.ne.s32 {fix}, {r}, 0;", f"and.pred {fix}, {fix}, {sign};",
      f"@{fix} add.s32 {q}, {q}, -1;", f"@{fix} add.s32 {r}, {r}, {c};")
    return q, r


def _floordiv(ev: ScalarEmitter, op, dtype) -> str:
    return _floor_parts(ev, *ev.operands(op))[0]


def _mod(ev: ScalarEmitter, op, dtype) -> str:
    return _floor_parts(ev, *ev.operands(op))[1]


def _cdiv(ev: ScalarEmitter, op, dtype) -> str:
    """ceil(a / c) = -floor(-a / c)."""
    a, c = ev.operands(op)
    b = ev.b
    neg = b.reg()
    b(f"neg.s32 {neg}, {a};")
    q, _ = _floor_parts(ev, neg, c)
    out = b.reg()
    b(f"neg.s32 {out}, {q};")
    return out


def _compare(ev: ScalarEmitter, op, dtype) -> str:
    a, c = ev.operands(op)
    p = ev.b.pred()
    t = "f32" if op.operands[0].type.dtype == F32 else "s32"
    ev.b(f"setp.{COMPARE[type(op)]}.{t} {p}, {a}, {c};")
    return p


def _logic(ev: ScalarEmitter, op, dtype) -> str:
    a, c = ev.operands(op)
    p = ev.b.pred()
    ev.b(f"{LOGIC[type(op)]}.pred {p}, {a}, {c};")
    return p


def _not(ev: ScalarEmitter, op, dtype) -> str:
    (a,) = ev.operands(op)
    p = ev.b.pred()
    ev.b(f"not.pred {p}, {a};")
    return p


def _select(ev: ScalarEmitter, op, dtype) -> str:
    cond, a, c = ev.operands(op)
    kind, t = _kind(dtype)
    if dtype == BOOL:
        p, q = ev.b.pred(), ev.b.pred()
        ev.b(f"and.pred {p}, {cond}, {a};", f"not.pred {q}, {cond};", f"and.pred {q}, {q}, {c};",
             f"or.pred {p}, {p}, {q};")
        return p
    r = ev.b.reg(kind)
    ev.b(f"selp.{'f32' if kind == 'f32' else 'b32'} {r}, {a}, {c}, {cond};")
    return r


TABLE = {Const: _const, Dim: _dim, Add: _arith, Sub: _arith, Mul: _arith, Max: _arith, Min: _arith,
         Div: _div, CDiv: _cdiv, FloorDiv: _floordiv, Mod: _mod, Not: _not, Select: _select,
         **{cls: _compare for cls in COMPARE}, **{cls: _logic for cls in LOGIC}}
