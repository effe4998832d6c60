"""f32 arithmetic and math functions as PTX, shared by scalar, vector and tile emitters.

Choices (docs/codegen.md): exp2 is ``ex2.approx.ftz``; exp and log go through ex2/lg2 with
log2(e) and ln(2); sqrt is ``sqrt.rn``, rsqrt ``rsqrt.approx``; sin and cos reduce the argument to
[-pi, pi] (Cody-Waite, two constants) before ``sin/cos.approx``; tanh is ``tanh.approx``. The
activations avoid ``1 + tanh`` (it cancels for negative x): sigmoid is ``rcp.approx(1 + ex2(-x·log2 e))``,
silu x·sigmoid(x), gelu_tanh x·sigmoid(2u) (the same function as x·½(1 + tanh u)), and gelu (erf form)
x·Φ(x) with Φ from a Chebyshev fit of erfc whose fractional error is below 1.2e-7 everywhere
(Numerical Recipes, 2nd ed., §6.2): relative error against float64 below 2e-5 on the whole f32
range (tests/test_activations.py). max and
min return the other operand when one is NaN (``max.f32``, IEEE maxNum — what the CPU interpreter
does, so both backends agree); relu(x) = max(x, 0) likewise. Division is IEEE ``div.rn``.
"""
from __future__ import annotations

import math

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


def emit_sigmoid(ctx, x: str, out: list[str]) -> str:
    """1 / (1 + 2^(-x·log2 e)): 0 for x -> -inf (the ex2 overflows to inf), 1 for x -> +inf."""
    t, e, d, r = (ctx.new("f32") for _ in range(4))
    out.append(f"mul.f32 {t}, {x}, {f32_imm(-LOG2E)};")
    out.append(f"ex2.approx.ftz.f32 {e}, {t};")
    out.append(f"add.f32 {d}, {e}, 0f3F800000;")
    out.append(f"rcp.approx.ftz.f32 {r}, {d};")
    return r


def emit_silu(ctx, x: str, out: list[str]) -> str:
    r = ctx.new("f32")
    out.append(f"mul.f32 {r}, {x}, {emit_sigmoid(ctx, x, out)};")
    return r


GELU_TANH_C1 = 2.0 * math.sqrt(2.0 / math.pi)
GELU_TANH_C3 = GELU_TANH_C1 * 0.044715


def emit_gelu_tanh(ctx, x: str, out: list[str]) -> str:
    """x·sigmoid(2u), 2u = x·(c1 + c3·x²): equal to x·½(1 + tanh u) without its cancellation."""
    x2, k, z, r = (ctx.new("f32") for _ in range(4))
    out.append(f"mul.f32 {x2}, {x}, {x};")
    out.append(f"fma.rn.f32 {k}, {x2}, {f32_imm(GELU_TANH_C3)}, {f32_imm(GELU_TANH_C1)};")
    out.append(f"mul.f32 {z}, {x}, {k};")
    out.append(f"mul.f32 {r}, {x}, {emit_sigmoid(ctx, z, out)};")
    return r


ERFC_FIT = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807,
            -1.13520398, 1.48851587, -0.82215223, 0.17087277)
"""erfc(a) = t·exp(-a² + P(t)), t = 1/(1 + a/2), a >= 0; P's coefficients, constant term first."""


def emit_gelu(ctx, x: str, out: list[str]) -> str:
    """x·Φ(x). With a = |x|/√2, h = ½·erfc(a) is Φ(x) for x <= 0 and 1 - Φ(x) for x > 0, so the
    small tail is computed directly, never as a difference."""
    ax, den, t, p, nx, y, y2, e, te, h, one_h, phi, r = (ctx.new("f32") for _ in range(13))
    pos = ctx.new("pred")
    out.append(f"abs.f32 {ax}, {x};")
    out.append(f"fma.rn.f32 {den}, {ax}, {f32_imm(0.5 / math.sqrt(2.0))}, 0f3F800000;")
    out.append(f"rcp.approx.ftz.f32 {t}, {den};")
    out.append(f"mov.f32 {p}, {f32_imm(ERFC_FIT[-1])};")
    for c in reversed(ERFC_FIT[:-1]):
        out.append(f"fma.rn.f32 {p}, {p}, {t}, {f32_imm(c)};")
    out.append(f"mul.f32 {nx}, {x}, 0fBF000000;")  # -x/2: -a² = (-x/2)·x
    out.append(f"fma.rn.f32 {y}, {nx}, {x}, {p};")
    out.append(f"mul.f32 {y2}, {y}, {f32_imm(LOG2E)};")
    out.append(f"ex2.approx.ftz.f32 {e}, {y2};")
    out.append(f"mul.f32 {te}, {t}, {e};")
    out.append(f"mul.f32 {h}, {te}, 0f3F000000;")
    out.append(f"sub.f32 {one_h}, 0f3F800000, {h};")
    out.append(f"setp.gt.f32 {pos}, {x}, 0f00000000;")
    out.append(f"selp.f32 {phi}, {one_h}, {h}, {pos};")
    out.append(f"mul.f32 {r}, {x}, {phi};")
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
    "sigmoid": emit_sigmoid,
    "silu": emit_silu,
    "gelu_tanh": emit_gelu_tanh,
    "gelu": emit_gelu,
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
