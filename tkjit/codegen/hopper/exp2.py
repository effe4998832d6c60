"""2^x on the FMA pipe, for the softmax's share of exponentials that the MUFU cannot take.

An SM computes 16 ``ex2.approx`` results per cycle (MUFU) against 128 FFMAs, so at head dim 64
one consumer's 64 x BKV exponentials take as long as the other consumer's two wgmmas (SASS: a
stall of 8 cycles after each MUFU.EX2 pair). Part of them go to the FMA pipe instead (the
FlashAttention-4 trick): x = n + f with n = round(x) (the 1.5·2^23 add puts it in the low
mantissa bits), 2^f for f in [-0.5, 0.5] by a cubic (relative error 1.5e-4 in float32, far below the
2^-9 rounding P gets as bf16), and n added to the exponent field with an integer add. x is clamped at -126
first so that the result stays a normal float (a masked -inf score gives 2^-126, not 0: 1e-38,
invisible beside a row sum >= 1).

``emit`` returns the PTX lines; ``reference`` computes the same steps in float32 with numpy
(the CPU tests check its error over the whole range the softmax feeds it).
"""
from __future__ import annotations

CLAMP = "0fC2FC0000"          # -126.0
ROUND = "0f4B400000"          # 1.5 * 2^23: adding it rounds to an integer held in the mantissa
COEFFS = ("0f3F7FFB4A", "0f3F31798D", "0f3E786EC7", "0f3D61FB20")
"""c0..c3 of 2^f ~ c0 + c1 f + c2 f^2 + c3 f^3 on [-0.5, 0.5] (relative minimax fit, f32)."""
ISSUE_SLOTS = 8
"""Instructions per exponential: max, 3 adds (round, unround, split), 3 FFMAs, 1 shift-add."""


def emit(b, reg: str) -> list[str]:
    """Lines that replace ``reg`` (f32, <= 0 or -inf) by 2^reg, using builder ``b`` for temporaries."""
    t, j, f, p = (b.reg("f32") for _ in range(4))
    pb, tb = b.reg(), b.reg()
    c0, c1, c2, c3 = COEFFS
    return [f"max.f32 {reg}, {reg}, {CLAMP};",
            f"add.rn.f32 {t}, {reg}, {ROUND};", f"sub.rn.f32 {j}, {t}, {ROUND};",
            f"sub.rn.f32 {f}, {reg}, {j};",
            f"fma.rn.f32 {p}, {f}, {c3}, {c2};", f"fma.rn.f32 {p}, {p}, {f}, {c1};",
            f"fma.rn.f32 {p}, {p}, {f}, {c0};",
            f"mov.b32 {pb}, {p};", f"mov.b32 {tb}, {t};", f"shl.b32 {tb}, {tb}, 23;",
            f"add.s32 {pb}, {pb}, {tb};", f"mov.b32 {reg}, {pb};"]


def _f32(hex_imm: str):
    import numpy as np
    return np.array([int(hex_imm[2:], 16)], dtype=np.uint32).view(np.float32)[0]


def reference(x):
    """The emitted steps in float32 (numpy array in, array out)."""
    import numpy as np
    x = np.maximum(np.asarray(x, dtype=np.float32), _f32(CLAMP))
    t = (x + _f32(ROUND)).astype(np.float32)
    f = (x - (t - _f32(ROUND)).astype(np.float32)).astype(np.float32)
    c0, c1, c2, c3 = (_f32(c) for c in COEFFS)
    p = (f * c3 + c2).astype(np.float32)
    p = (p * f + c1).astype(np.float32)
    p = (p * f + c0).astype(np.float32)
    bits = p.view(np.uint32) + (t.view(np.uint32) << np.uint32(23))
    return bits.astype(np.uint32).view(np.float32)
