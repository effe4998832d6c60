"""The activation emitters' instruction sequences (codegen/mathfn.py) over the whole f32 range,
on the PTX simulator: each sequence runs alone, one input per simulated thread, about 600,000
inputs (a dense sweep of [-20, 20], every binade from 1e-38 to 1e38 of both signs, and the
special values), with the MUFU results (``ex2.approx``, ``rcp.approx``) moved by the PTX ISA's
stated maximum error (``ptxsim.GPU_APPROX_ERROR``), against float64.

The bound a user relies on: relative error below 1e-5 on the whole range and below 4e-6 for
|x| < 8 wherever the result is a normal f32, and below |x|·2^-126 absolute where the factor the
activation multiplies x by (Φ(x), sigmoid(x)) is not: the GPU's ex2.approx.ftz flushes it to zero
there (the simulator does not flush, so this bound holds for both). The error comes from the ex2's
argument, rounded to f32 before the exponential (|y| up to 126 in the tails), and from the MUFU
results; 4e-6 is 500x below the half ulp of a bf16 result (2^-9), so the bf16 an epilogue stores
is the correctly rounded one but for inputs within that much of a rounding boundary: the test
counts them (under 0.01%).
"""
from __future__ import annotations

import math

import numpy as np
import ptxsim
import pytest
import torch
import torch.nn.functional as F

from tkjit.codegen.mathfn import UNARY_F32

TINY = 2.0 ** -126
BOUND, CORE_BOUND = 1e-5, 4e-6
LOOSER = {"gelu_tanh": (2e-5, 1e-5)}
"""gelu_tanh's argument 2u = x·(c1 + c3·x²) grows as x³: its rounding weighs twice as much."""


class _Ctx:
    """The emitters' register namer."""

    def __init__(self):
        self.n = 0

    def new(self, kind: str) -> str:
        self.n += 1
        return f"%{'p' if kind == 'pred' else 'f' if kind == 'f32' else 'r'}{self.n}"


def sequence(name: str) -> tuple[list[str], str]:
    out: list[str] = []
    result = UNARY_F32[name](_Ctx(), "%x", out)
    return out, result


def run(name: str, x: np.ndarray) -> np.ndarray:
    """``name``'s emitted sequence on the simulator, x[i] in thread i."""
    body, result = sequence(name)
    kernel = ptxsim.Kernel(".visible .entry k() {\n" + "\n".join(body) + "\n}")
    cta = ptxsim.CTA(kernel, ptxsim.Memory(16), {}, 0, 1, len(x), 0)
    cta.regs["%x"] = x.astype(np.float32).view(np.uint32)
    saved = dict(ptxsim.APPROX_ERROR)
    ptxsim.APPROX_ERROR.update(ptxsim.GPU_APPROX_ERROR)
    try:
        cta.run()
    finally:
        ptxsim.APPROX_ERROR.clear()
        ptxsim.APPROX_ERROR.update(saved)
    return cta.regs[result].view(np.float32)


def inputs() -> np.ndarray:
    dense = np.linspace(-20.0, 20.0, 400_001)
    mags = np.logspace(-38, 38, 100_001)
    special = np.array([0.0, -0.0, 1e-45, -1e-45, 88.0, -88.0, 87.3, -87.3, 100.0, -100.0, 1e30, -1e30])
    return np.concatenate([dense, mags, -mags, special]).astype(np.float32)


def _sigmoid64(x):
    return torch.sigmoid(x)


def _gelu64(x):
    return x * 0.5 * torch.special.erfc(-x / math.sqrt(2))


REFS = {"gelu": _gelu64, "silu": F.silu, "sigmoid": _sigmoid64,
        "gelu_tanh": lambda x: x * torch.sigmoid(2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))}


def errors(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = inputs()
    got = run(name, x).astype(np.float64)
    ref = REFS[name](torch.from_numpy(x.astype(np.float64))).numpy()
    return x, got, ref


@pytest.mark.parametrize("name", ["gelu", "silu", "sigmoid", "gelu_tanh"])
def test_relative_error_over_the_whole_range(name):
    x, got, ref = errors(name)
    assert not np.isnan(got).any()
    factor = np.abs(ref) >= TINY * np.maximum(np.abs(x.astype(np.float64)), 1.0)
    rel = np.abs(got[factor] - ref[factor]) / np.abs(ref[factor])
    worst = int(np.argmax(rel))
    bound, core_bound = LOOSER.get(name, (BOUND, CORE_BOUND))
    assert rel.max() < bound, f"{name}: relative error {rel.max():.3g} at x = {x[factor][worst]!r}"
    core = np.abs(x[factor]) < 8
    assert rel[core].max() < core_bound, f"{name}: relative error {rel[core].max():.3g} for |x| < 8"
    tail = np.abs(got[~factor] - ref[~factor])
    assert (tail <= TINY * np.maximum(np.abs(x[~factor].astype(np.float64)), 1.0)).all()


@pytest.mark.parametrize("name", ["gelu", "silu"])
def test_bf16_outputs_are_the_correctly_rounded_ones_but_at_boundaries(name):
    _, got, ref = errors(name)
    mine = torch.from_numpy(got.astype(np.float32)).bfloat16()
    exact = torch.from_numpy(ref).bfloat16()  # float64 rounded once
    differ = (mine.float() != exact.float()).double().mean().item()
    assert differ < 1e-4, f"{name}: {differ:.2%} of bf16 outputs differ from the correctly rounded"


def test_infinities_and_nan():
    x = np.array([np.inf, -np.inf, np.nan], dtype=np.float32)
    assert run("gelu", x)[0] == np.inf
    assert run("silu", x)[0] == np.inf and run("sigmoid", x)[0] == 1.0 and run("sigmoid", x)[1] == 0.0
    for name in ("gelu", "silu", "sigmoid"):
        assert np.isnan(run(name, x)[2]), name


@pytest.mark.parametrize("name, mufu", [("sigmoid", 1), ("silu", 1), ("gelu", 2)])
def test_mufu_per_element(name, mufu):
    """The MUFU (16 lanes a clock) count per element: sigmoid/silu take the ex2 only (their
    reciprocal runs on the FMA pipe), gelu the rcp of its t and one ex2."""
    body, _ = sequence(name)
    assert sum(line.split()[0].split(".")[0] in ("ex2", "rcp", "lg2", "tanh", "sin", "cos", "rsqrt")
               and ".approx" in line.split()[0] for line in body) == mufu
