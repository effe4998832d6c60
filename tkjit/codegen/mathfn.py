"""f32 arithmetic and math functions as PTX, shared by scalar, vector and tile emitters.

Choices (docs/codegen.md): exp2 is ``ex2.approx.ftz``; exp and log go through ex2/lg2 with
log2(e) and ln(2); sqrt is ``sqrt.rn``, rsqrt ``rsqrt.approx``; sin and cos reduce the argument to
[-pi, pi] (Cody-Waite, two constants) before ``sin/cos.approx``; tanh is ``tanh.approx``. The
activations avoid ``1 + tanh`` (it cancels for negative x): sigmoid is 1/(1 + u) or u/(1 + u) with
u = ``ex2(-|x|·log2 e)`` and the reciprocal on the FMA pipe (one MUFU per element),
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


RCP_MAGIC = 0x7EF31000
"""bits(1/d) ~ RCP_MAGIC - bits(d) within 5.06% for any normal d (the exponent negated, the
mantissa a line): the seed of ``_rcp_fma``."""


def _rcp_fma(ctx, d: str, out: list[str]) -> str:
    """1/d for a normal d > 0 on the FMA pipe, without MUFU: the seed RCP_MAGIC - bits(d)
    (relative error 5.06e-2), one cubic step r·(1 + e + e²) (1.3e-4), one Newton step r·(1 + e)
    (1.7e-8, below f32's half ulp), with e = 1 - d·r each time: one integer and five FMA."""
    nd, seed, e, s, r1, e1, r = (ctx.new("f32") for _ in range(7))
    db, sb = ctx.new("b32"), ctx.new("b32")
    out.append(f"neg.f32 {nd}, {d};")
    out.append(f"mov.b32 {db}, {d};")
    out.append(f"sub.s32 {sb}, {RCP_MAGIC}, {db};")
    out.append(f"mov.b32 {seed}, {sb};")
    out.append(f"fma.rn.f32 {e}, {nd}, {seed}, 0f3F800000;")
    out.append(f"fma.rn.f32 {s}, {e}, {e}, {e};")
    out.append(f"fma.rn.f32 {r1}, {seed}, {s}, {seed};")
    out.append(f"fma.rn.f32 {e1}, {nd}, {r1}, 0f3F800000;")
    out.append(f"fma.rn.f32 {r}, {r1}, {e1}, {r1};")
    return r


def emit_sigmoid(ctx, x: str, out: list[str]) -> str:
    """With u = 2^(-|x|·log2 e) in (0, 1]: 1/(1 + u) for x >= 0, u/(1 + u) for x < 0 (the tail
    from u itself, so relatively accurate until u flushes to zero below 2^-126). One MUFU (the
    ex2); the reciprocal of 1 + u in (1, 2] runs on the FMA pipe (``_rcp_fma``): an epilogue of
    sigmoids over a GEMM tile was bound by MUFU's 16 lanes a clock with rcp.approx as a second
    MUFU. Where the kernel pins reciprocals to MUFU (``reciprocal_pipe``), ``rcp.approx``: one
    instruction instead of seven. 1 for +inf, 0 for -inf, NaN for NaN."""
    ax, t, u, d, ur, r = (ctx.new("f32") for _ in range(6))
    neg = ctx.new("pred")
    out.append(f"abs.f32 {ax}, {x};")
    out.append(f"mul.f32 {t}, {ax}, {f32_imm(-LOG2E)};")
    out.append(f"ex2.approx.ftz.f32 {u}, {t};")
    out.append(f"add.f32 {d}, {u}, 0f3F800000;")
    if reciprocal_pipe(ctx, RCP_OPS["sigmoid"]) == "mufu":
        rcp = ctx.new("f32")
        out.append(f"rcp.approx.ftz.f32 {rcp}, {d};")
    else:
        rcp = _rcp_fma(ctx, d, out)
    out.append(f"mul.f32 {ur}, {u}, {rcp};")
    out.append(f"setp.lt.f32 {neg}, {x}, 0f00000000;")
    out.append(f"selp.f32 {r}, {ur}, {rcp}, {neg};")
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
"""erfc(a) = t·exp(-a² + P(t)), t = 1/(1 + a/2), a >= 0; P's coefficients, constant term first
(fractional error below 1.2e-7 for every a)."""
GELU_FIT = tuple(c * LOG2E - (1.0 if i == 0 else 0.0) for i, c in enumerate(ERFC_FIT))
"""log2 e · P(t) - 1: the exponent of ½·erfc in base 2, so the ex2 takes it without a multiply
and the ½ costs nothing."""


RCP_OPS = {"gelu": "mufu", "sigmoid": "fma", "silu": "fma", "gelu_tanh": "fma"}
"""Maps whose emitter takes a reciprocal -> the pipe of their own: gelu's on MUFU
(``rcp.approx``), the sigmoid's (silu's, gelu_tanh's) on the FMA pipe (``_rcp_fma``), unless the
kernel pins the pipe (the attribute ``epilogue_rcp``, the epilogue pass's option
``rcp=fma|mufu``: ``reciprocal_pipe``)."""
RCP_CLAMP = 64.0
"""|x| above which gelu's FMA-pipe reciprocal sees 64: there h = ½·erfc(|x|/√2) is 0 in f32
(from |x| ~ 13.2) whatever t is, and 1 + 64/(2√2) keeps the seed's argument a small normal
number (+-inf and NaN included: ``min`` returns 64 for NaN, whose NaN still reaches the ex2)."""


def reciprocal_pipe(ctx, default: str) -> str:
    """"fma" or "mufu": the pipe of a RCP_OPS map's reciprocal in the kernel being emitted (its
    attribute ``epilogue_rcp``, else the map's ``default``)."""
    kernel = getattr(ctx, "kernel", None)
    pinned = getattr(kernel, "attrs", {}).get("epilogue_rcp") if kernel is not None else None
    return pinned if pinned in ("fma", "mufu") else default


def emit_gelu(ctx, x: str, out: list[str]) -> str:
    """x·Φ(x). With a = |x|/√2, h = ½·erfc(a) is Φ(x) for x <= 0 and 1 - Φ(x) for x > 0, so the
    small tail is computed directly, never as a difference: Φ(x) = |[x > 0] - h| (h <= ½).
    h = t·2^(log2 e·(P(t) - a²) - 1), t = 1/(1 + a/2): log2 e and the ½ folded into the fit's
    coefficients (GELU_FIT), a²·log2 e as one multiply of x by a constant and one FMA, so per
    element 2 MUFU (rcp, ex2) and 15 FMA-pipe instructions; where the kernel pins reciprocals to
    the FMA pipe (``reciprocal_pipe``), 1 MUFU (ex2) and 22 (the reciprocal of 1 + min(|x|, 64)/(2√2)
    by ``_rcp_fma``, relative error 1.7e-8)."""
    ax, den, t, p, k, y, e, h, step, d, phi, r = (ctx.new("f32") for _ in range(12))
    out.append(f"abs.f32 {ax}, {x};")
    if reciprocal_pipe(ctx, RCP_OPS["gelu"]) == "fma":
        c = ctx.new("f32")
        out.append(f"min.f32 {c}, {ax}, {f32_imm(RCP_CLAMP)};")
        out.append(f"fma.rn.f32 {den}, {c}, {f32_imm(0.5 / math.sqrt(2.0))}, 0f3F800000;")
        t = _rcp_fma(ctx, den, out)
    else:
        out.append(f"fma.rn.f32 {den}, {ax}, {f32_imm(0.5 / math.sqrt(2.0))}, 0f3F800000;")
        out.append(f"rcp.approx.ftz.f32 {t}, {den};")
    out.append(f"fma.rn.f32 {p}, {f32_imm(GELU_FIT[-1])}, {t}, {f32_imm(GELU_FIT[-2])};")
    for c in reversed(GELU_FIT[:-2]):
        out.append(f"fma.rn.f32 {p}, {p}, {t}, {f32_imm(c)};")
    out.append(f"mul.f32 {k}, {x}, {f32_imm(-0.5 * LOG2E)};")  # -a²·log2 e = k·x
    out.append(f"fma.rn.f32 {y}, {k}, {x}, {p};")
    out.append(f"ex2.approx.ftz.f32 {e}, {y};")
    out.append(f"mul.f32 {h}, {t}, {e};")
    out.append(f"set.gt.f32.f32 {step}, {x}, 0f00000000;")
    out.append(f"sub.f32 {d}, {step}, {h};")
    out.append(f"abs.f32 {phi}, {d};")
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
