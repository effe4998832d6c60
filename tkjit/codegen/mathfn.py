"""f32 arithmetic and math functions as PTX, shared by scalar, vector and tile emitters.

Choices (docs/codegen.md): exp2 is ``ex2.approx.ftz``; exp and log go through ex2/lg2 with
log2(e) and ln(2); sqrt is ``sqrt.rn``, rsqrt ``rsqrt.approx``; sin and cos reduce the argument to
[-pi, pi] (Cody-Waite, two constants) before ``sin/cos.approx``; tanh is ``tanh.approx``. max and
min return the other operand when one is NaN (``max.f32``, IEEE maxNum — what the CPU interpreter
does, so both backends agree); relu(x) = max(x, 0) likewise. Division is IEEE ``div.rn``.
"""
from __future__ import annotations

from ..errors import NotAvailableError
from .ptx import LN2, LOG2E, TWO_PI_HI, TWO_PI_INV, TWO_PI_LO, f32_imm


def _simple(instr: str):
    def emit(ctx, x: str, out: list[str]) -> str:
        r = ctx.new("f32")
        out.append(f"{instr} {r}, {x};")
        return r
    emit.__name__ = f"emit_{instr.split('.')[0]}"
    return emit


def emit_exp(ctx, x: str, out: list[str]) -> str:
    t, r = ctx.new("f32"), ctx.new("f32")
    out.append(f"mul.f32 {t}, {x}, {f32_imm(LOG2E)};")
    out.append(f"ex2.approx.ftz.f32 {r}, {t};")
    return r


def emit_log(ctx, x: str, out: list[str]) -> str:
    t, r = ctx.new("f32"), ctx.new("f32")
    out.append(f"lg2.approx.ftz.f32 {t}, {x};")
    out.append(f"mul.f32 {r}, {t}, {f32_imm(LN2)};")
    return r


def _reduce_angle(ctx, x: str, out: list[str]) -> str:
    k, y = ctx.new("f32"), ctx.new("f32")
    out.append(f"mul.f32 {k}, {x}, {f32_imm(TWO_PI_INV)};")
    out.append(f"cvt.rni.f32.f32 {k}, {k};")
    out.append(f"fma.rn.f32 {y}, {k}, {f32_imm(-TWO_PI_HI)}, {x};")
    out.append(f"fma.rn.f32 {y}, {k}, {f32_imm(-TWO_PI_LO)}, {y};")
    return y


def emit_sin(ctx, x: str, out: list[str]) -> str:
    r = ctx.new("f32")
    out.append(f"sin.approx.ftz.f32 {r}, {_reduce_angle(ctx, x, out)};")
    return r


def emit_cos(ctx, x: str, out: list[str]) -> str:
    r = ctx.new("f32")
    out.append(f"cos.approx.ftz.f32 {r}, {_reduce_angle(ctx, x, out)};")
    return r


def emit_relu(ctx, x: str, out: list[str]) -> str:
    r = ctx.new("f32")
    out.append(f"max.f32 {r}, {x}, 0f00000000;")
    return r


UNARY_F32 = {
    "exp2": _simple("ex2.approx.ftz.f32"),
    "exp": emit_exp,
    "log2": _simple("lg2.approx.ftz.f32"),
    "log": emit_log,
    "sqrt": _simple("sqrt.rn.f32"),
    "rsqrt": _simple("rsqrt.approx.ftz.f32"),
    "sin": emit_sin,
    "cos": emit_cos,
    "tanh": _simple("tanh.approx.f32"),
    "abs": _simple("abs.f32"),
    "neg": _simple("neg.f32"),
    "relu": emit_relu,
}

BINARY_F32 = {
    "add": "add.f32", "sub": "sub.f32", "mul": "mul.f32", "div": "div.rn.f32",
    "max": "max.f32", "min": "min.f32",
}


def unary_f32(ctx, name: str, x: str, out: list[str]) -> str:
    try:
        emit = UNARY_F32[name]
    except KeyError:
        raise NotAvailableError(f"no f32 emitter for the map '{name}'") from None
    return emit(ctx, x, out)


def binary_f32(ctx, name: str, a: str, b: str, out: list[str]) -> str:
    try:
        instr = BINARY_F32[name]
    except KeyError:
        raise NotAvailableError(f"no f32 emitter for '{name}'") from None
    r = ctx.new("f32")
    out.append(f"{instr} {r}, {a}, {b};")
    return r
