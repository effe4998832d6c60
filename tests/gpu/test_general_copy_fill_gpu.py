"""On a GPU: the norms and softmax through the general lowering with their row block filled by the
consumers themselves (warp-spec's ``fill``: cp.async, the protocol's ``copy_fill`` step, no
producer) and, pinned, by the producer's TMA -- at row counts that are and are not multiples of
the 16-row blocks, outputs poisoned with NaN and framed by poison rows (nothing written outside
them), against float64 torch."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.passes import DEFAULT_PIPELINE

from test_general_no_product_gpu import _args, _check

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("fill", ["cp.async", "tma"])
@pytest.mark.parametrize("name", ["rmsnorm", "residual_layernorm", "layernorm", "softmax"])
@pytest.mark.parametrize("d", [1024, 2048])
@pytest.mark.parametrize("r", [4096, 1000, 33, 7])
def test_norms_with_either_fill_against_float64(name, d, r, fill):
    if (name, d) == ("residual_layernorm", 2048):
        pytest.skip("stream-cols splits it over a cluster: tests/gpu/test_general_cluster_gpu.py")
    constants = {"C" if name == "softmax" else "D": d}
    pipe = DEFAULT_PIPELINE.replace("warp-spec", f"warp-spec{{fill={fill}}}", 1)
    k = tkjit.load(EXAMPLES / f"{name}.tk", constants=constants, lowering="general", require_hopper=True,
                   pipeline=pipe)
    assert k.metadata.get("lowering") == "general"
    ptx = k.asm["ptx"]
    if fill == "cp.async":
        assert "cp.async.cg.shared.global" in ptx and "cp.async.bulk.tensor" not in ptx and "mbarrier" not in ptx
    else:
        assert "cp.async.bulk.tensor" in ptx and "cp.async.cg" not in ptx
    g = torch.Generator(device="cuda").manual_seed(r + d)
    _check(k, *_args(name, r, d, g))
