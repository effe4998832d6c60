"""On a GPU: a row block split over a cluster (stream-cols' ``cluster``: the norms and softmax at
D = 4096 and 8192, and k = 2 / 8 pinned) through the general sm_90a lowering
(codegen/hopper/lower_cluster.py: the cluster launch, the push exchanges through distributed
shared memory as protocol steps; the row block filled by the consumers' cp.async (auto) or, pinned,
by the producer's TMA), at row counts that are and are not multiples of the block rows,
outputs poisoned with NaN and surrounded by poison (nothing written outside them), against
float64 torch, and at few rows against the register-tile backend running the same IR."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_general_no_product_gpu import _args, _check

import tkjit

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _tma_fill():
    from tkjit.passes import DEFAULT_PIPELINE
    return DEFAULT_PIPELINE.replace("warp-spec", "warp-spec{fill=tma}", 1)


def _load(name, d, lowering, pipeline=None):
    return tkjit.load(EXAMPLES / f"{name}.tk", constants={"C" if name == "softmax" else "D": d},
                      lowering=lowering, pipeline=pipeline, **({"require_hopper": True} if lowering == "general" else {}))


@pytest.mark.parametrize("fill", ["tma", "auto"])  # the row block by the producer's TMA, or (auto) the consumers
@pytest.mark.parametrize("name", ["rmsnorm", "residual_layernorm", "layernorm", "softmax"])
@pytest.mark.parametrize("d", [4096, 8192])
def test_the_cluster_split_through_the_general_lowering(name, d, fill):
    k = _load(name, d, "general", _tma_fill() if fill == "tma" else None)
    assert ("cp.async.bulk.tensor" in k.asm["ptx"]) == (fill == "tma")
    assert k.metadata.get("lowering") == "general" and k.metadata["cluster"] == [d // 1024, 1, 1]
    for r in (1000, 33, 7):
        g = torch.Generator(device="cuda").manual_seed(r + d)
        args, truth, fulls = _args(name, r, d, g)
        _check(k, args, truth, fulls)
        if r == 33:  # the same IR on the register-tile backend: the same emitters, the same order
            mine = [f.clone() for f in fulls]
            for f in fulls:
                f.fill_(float("nan"))
            _check(_load(name, d, "auto"), args, truth, fulls)
            for a, b in zip(mine, fulls):
                torch.testing.assert_close(a.float(), b.float(), rtol=1e-2, atol=1e-2, equal_nan=True)


@pytest.mark.parametrize("name, cluster", [("rmsnorm", "2"), ("rmsnorm", "8"), ("residual_layernorm", "8")])
def test_pinned_cluster_sizes_through_the_general_lowering(name, cluster):
    """(residual + LayerNorm over 2 CTAs keeps 2048 columns each: its slice streams through a ring
    loop with no product, which the general lowering refuses, test_general_no_product.py.)"""
    from tkjit.passes import DEFAULT_PIPELINE
    pipe = DEFAULT_PIPELINE.replace("stream-cols", f"stream-cols{{cluster={cluster}}}", 1)
    k = _load(name, 4096, "general", pipe)
    assert "tile program" in k.asm["ptx"].splitlines()[0]
    assert k.metadata.get("lowering") == "general" and k.metadata["cluster"] == [int(cluster), 1, 1]
    for r in (1000, 33):
        g = torch.Generator(device="cuda").manual_seed(r)
        args, truth, fulls = _args(name, r, 4096, g)
        _check(k, args, truth, fulls)
