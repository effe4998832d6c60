"""Differential testing on the GPU (issue 20, item 6): generated programs (tkjit/testing/gen.py)
compiled normally (default pipeline, ptxas, the disk cache) and launched on CUDA tensors, against
the CPU interpreter. Small-tile programs take the register-tile backend; Hopper-shaped ones
(``hopper=True``) the general lowering (TMA + wgmma). Long runs: benchmarks/difftest.py
--target gpu [--hopper] --count 1000."""
from __future__ import annotations

import pytest

from difftest import differential

pytestmark = pytest.mark.gpu
KNOWN: dict[int, str] = {}
KNOWN_HOPPER: dict[int, str] = {}
"""Seeds left out, with why. Empty: seeds 111 and 93 (and 428, 941 of the 1,000-program run)
mismatched on an H200 because the GPU's approximate tanh/ex2/rcp fed a select or a sqrt; the
generator now compares only exact values and keeps sqrt away from 0 (gen.py, ``exact_tile``)."""


@pytest.mark.parametrize("first", range(0, 100, 50))  # long runs: benchmarks/difftest.py
def test_generated_kernels_agree_on_the_gpu_and_the_interpreter(first):
    bad = [f"seed {s}: {o.stage}: {o.detail}" for s in range(first, first + 50) if s not in KNOWN
           if (o := differential(s, "gpu")).stage not in ("ok", "refused")]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("first", range(0, 50, 25))
def test_generated_hopper_kernels_agree_on_the_gpu_and_the_interpreter(first):
    bad = [f"seed {s}: {o.stage}: {o.detail}" for s in range(first, first + 25) if s not in KNOWN_HOPPER
           if (o := differential(s, "gpu", hopper=True)).stage not in ("ok", "refused")]
    assert not bad, "\n".join(bad)
