"""Emitters for scalar ops: constants, runtime dims, integer/float/bool arithmetic, compares,
conversions and select. Every thread computes scalars redundantly (they are block-uniform).

Integer semantics (as the CPU interpreter): ``cdiv`` rounds up, ``floordiv`` rounds down and
``mod`` takes the divisor's sign (Python's ``//`` and ``%``), for any signs; ``div`` on i32
truncates toward zero (C). Division by zero is not checked.
Float compares are IEEE (``ne`` is true when either side is NaN).
"""
from __future__ import annotations

from ..ir.ops import (Abs, And, CDiv, Const, Cvt, Dim, Div, Eq, FloorDiv, Ge, Gt, Le, Lt, Max, Min,
                      Mod, Mul, Ne, Neg, Not, Or, Relu, Select, Sub, Add, UNARY_OPS)
from ..ir.types import BOOL, DTYPES, I32
from .mathfn import binary_f32, unary_f32
from .ptx import f32_imm
from .values import Scalar


def _reg_kind(dtype) -> str:
    return "b32" if dtype == I32 else "pred" if dtype == BOOL else "f32"


def emit_const(ctx, op) -> list[str]:
    dt = op.result.type.dtype
    value = op.attrs["value"]
    r = ctx.new(_reg_kind(dt))
    if dt == I32:
        line = f"mov.s32 {r}, {value};"
    elif dt == BOOL:
        line = f"mov.pred {r}, {1 if value else 0};"
    else:
        line = f"mov.f32 {r}, {f32_imm(float(value))};"
    ctx.bind(op.result, Scalar(r, dt))
    return [line]


def emit_dim(ctx, op) -> list[str]:
    ctx.bind(op.result, Scalar(ctx.dims[op.attrs["name"]], I32))
    return []


def _floordiv(ctx, a: str, b: str, out: list[str]) -> str:
    q, r, x, p, s = ctx.new("b32"), ctx.new("b32"), ctx.new("b32"), ctx.new("pred"), ctx.new("pred")
    out += [f"div.s32 {q}, {a}, {b};", f"rem.s32 {r}, {a}, {b};", f"xor.b32 {x}, {r}, {b};",
            f"setp.ne.s32 {p}, {r}, 0;", f"setp.lt.and.s32 {s}, {x}, 0, {p};", f"@{s} sub.s32 {q}, {q}, 1;"]
    return q


def _mod(ctx, a: str, b: str, out: list[str]) -> str:
    r, x, p, s = ctx.new("b32"), ctx.new("b32"), ctx.new("pred"), ctx.new("pred")
    out += [f"rem.s32 {r}, {a}, {b};", f"xor.b32 {x}, {r}, {b};", f"setp.ne.s32 {p}, {r}, 0;",
            f"setp.lt.and.s32 {s}, {x}, 0, {p};", f"@{s} add.s32 {r}, {r}, {b};"]
    return r


def _cdiv(ctx, a: str, b: str, out: list[str]) -> str:
    na = ctx.new("b32")
    out.append(f"neg.s32 {na}, {a};")
    q = _floordiv(ctx, na, b, out)
    r = ctx.new("b32")
    out.append(f"neg.s32 {r}, {q};")
    return r


_INT_SIMPLE = {Add: "add.s32", Sub: "sub.s32", Mul: "mul.lo.s32", Max: "max.s32", Min: "min.s32",
               Div: "div.s32"}
_INT_DIVISION = {CDiv: _cdiv, FloorDiv: _floordiv, Mod: _mod}
_COMPARE = {Lt: "lt", Le: "le", Gt: "gt", Ge: "ge", Eq: "eq", Ne: "ne"}
_FLOAT_COMPARE = {"ne": "neu"}
_FLOAT_BINARY = {Add: "add", Sub: "sub", Mul: "mul", Div: "div", Max: "max", Min: "min"}


def emit_scalar_binary(ctx, op) -> list[str]:
    a, b = (ctx.get(v) for v in op.operands)
    dt = a.dtype
    out: list[str] = []
    cls = type(op)
    if cls in _COMPARE:
        p = ctx.new("pred")
        cmp = _COMPARE[cls]
        if dt == BOOL:
            out.append(f"xor.pred {p}, {a.reg}, {b.reg};")
            if cmp == "eq":
                out.append(f"not.pred {p}, {p};")
        else:
            kind = "s32" if dt == I32 else "f32"
            cmp = _FLOAT_COMPARE.get(cmp, cmp) if kind == "f32" else cmp
            out.append(f"setp.{cmp}.{kind} {p}, {a.reg}, {b.reg};")
        ctx.bind(op.result, Scalar(p, BOOL))
        return out
    if cls in (And, Or):
        p = ctx.new("pred")
        out.append(f"{'and' if cls is And else 'or'}.pred {p}, {a.reg}, {b.reg};")
        ctx.bind(op.result, Scalar(p, BOOL))
        return out
    if dt == I32:
        if cls in _INT_DIVISION:
            r = _INT_DIVISION[cls](ctx, a.reg, b.reg, out)
        else:
            r = ctx.new("b32")
            out.append(f"{_INT_SIMPLE[cls]} {r}, {a.reg}, {b.reg};")
        ctx.bind(op.result, Scalar(r, I32))
        return out
    r = binary_f32(ctx, _FLOAT_BINARY[cls], a.reg, b.reg, out)
    ctx.bind(op.result, Scalar(ctx.round_f32(dt, r, out), dt))
    return out


def emit_scalar_unary(ctx, op) -> list[str]:
    a = ctx.get(op.operands[0])
    out: list[str] = []
    if isinstance(op, Not):
        p = ctx.new("pred")
        out.append(f"not.pred {p}, {a.reg};")
        ctx.bind(op.result, Scalar(p, BOOL))
        return out
    if a.dtype == I32:
        r = ctx.new("b32")
        instr = {Neg: f"neg.s32 {r}, {a.reg};", Abs: f"abs.s32 {r}, {a.reg};",
                 Relu: f"max.s32 {r}, {a.reg}, 0;"}[type(op)]
        out.append(instr)
        ctx.bind(op.result, Scalar(r, I32))
        return out
    r = unary_f32(ctx, op.NAME, a.reg, out)
    ctx.bind(op.result, Scalar(ctx.round_f32(a.dtype, r, out), a.dtype))
    return out


def emit_scalar_cvt(ctx, op) -> list[str]:
    a = ctx.get(op.operands[0])
    to = DTYPES[op.attrs["dtype"]]
    out: list[str] = []
    if to == a.dtype:
        ctx.bind(op.result, a)
        return out
    if to == BOOL:
        p = ctx.new("pred")
        out.append(f"setp.ne.s32 {p}, {a.reg}, 0;" if a.dtype == I32 else f"setp.neu.f32 {p}, {a.reg}, 0f00000000;")
        ctx.bind(op.result, Scalar(p, BOOL))
        return out
    if to == I32:
        r = ctx.new("b32")
        out.append(f"selp.s32 {r}, 1, 0, {a.reg};" if a.dtype == BOOL else f"cvt.rni.s32.f32 {r}, {a.reg};")
        ctx.bind(op.result, Scalar(r, I32))
        return out
    f = ctx.scalar_f32(op.operands[0], out)
    ctx.bind(op.result, Scalar(ctx.round_f32(to, f, out), to))
    return out


def emit_select(ctx, op) -> list[str]:
    c, a, b = (ctx.get(v) for v in op.operands)
    out: list[str] = []
    if a.dtype == BOOL:
        x, y, nc, r = ctx.new("pred"), ctx.new("pred"), ctx.new("pred"), ctx.new("pred")
        out += [f"and.pred {x}, {c.reg}, {a.reg};", f"not.pred {nc}, {c.reg};",
                f"and.pred {y}, {nc}, {b.reg};", f"or.pred {r}, {x}, {y};"]
    else:
        r = ctx.new(_reg_kind(a.dtype))
        out.append(f"selp.{'s32' if a.dtype == I32 else 'f32'} {r}, {a.reg}, {b.reg}, {c.reg};")
    ctx.bind(op.result, Scalar(r, a.dtype))
    return out


SCALAR_EMITTERS = {Const: emit_const, Dim: emit_dim, Cvt: emit_scalar_cvt, Select: emit_select}
for _cls in (Add, Sub, Mul, Div, Max, Min, CDiv, FloorDiv, Mod, Lt, Le, Gt, Ge, Eq, Ne, And, Or):
    SCALAR_EMITTERS[_cls] = emit_scalar_binary
for _cls in UNARY_OPS:
    SCALAR_EMITTERS[_cls] = emit_scalar_unary
