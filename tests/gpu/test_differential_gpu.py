"""Differential testing on the GPU (issue 20, item 6): generated programs (tkjit/testing/gen.py)
compiled normally (default pipeline, ptxas, the disk cache) and launched on CUDA tensors, against
the CPU interpreter. Small-tile programs take the register-tile backend; Hopper-shaped ones
(``hopper=True``) the general lowering (TMA + wgmma). Long runs: benchmarks/difftest.py
--target gpu [--hopper] --count 1000."""
from __future__ import annotations

import pytest

from difftest import differential

pytestmark = pytest.mark.gpu
KNOWN_HOPPER = {17: "KeyError in the Hopper lowering (tests/test_differential.py, the xfail)"}


@pytest.mark.parametrize("first", range(0, 200, 50))
def test_generated_kernels_agree_on_the_gpu_and_the_interpreter(first):
    bad = [f"seed {s}: {o.stage}: {o.detail}" for s in range(first, first + 50)
           if (o := differential(s, "gpu")).stage not in ("ok", "refused")]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("first", range(0, 100, 25))
def test_generated_hopper_kernels_agree_on_the_gpu_and_the_interpreter(first):
    bad = [f"seed {s}: {o.stage}: {o.detail}" for s in range(first, first + 25) if s not in KNOWN_HOPPER
           if (o := differential(s, "gpu", hopper=True)).stage not in ("ok", "refused")]
    assert not bad, "\n".join(bad)
