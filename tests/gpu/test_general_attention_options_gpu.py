"""On a GPU: examples/attention.tk through the general lowering with its options on and off -- the
default (since session 12: the row-sums pass, branch-tail and one edge branch a region,
lower_consumer.EDGE_REGIONS), the session-11 pipeline without them ("previous"), the default
with one edge branch a reduction ("no-regions"), and pairwise reductions
(lower_consumer.TREE_REDUCTIONS) -- and with the scale-fold branch taken both ways (a negative
scale runs the program as written), against float64 torch: O and L (the log-sum-exp reads the
combined sums), N ragged (the edge copy of a region runs) and below one tile, outputs
NaN-poisoned, two query heads over one key/value head."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.codegen.hopper import lower_consumer
from tkjit.passes import DEFAULT_PIPELINE

from attention_reference import exact

pytestmark = pytest.mark.gpu
SOURCE = (Path(__file__).resolve().parents[2] / "examples" / "attention.tk").read_text()
PREVIOUS = DEFAULT_PIPELINE.replace("row-sums,", "").replace("branch-tail,", "")
OPTIONS = {"default": (None, False, True), "previous": (PREVIOUS, False, False),
           "no-regions": (None, False, False), "pairwise": (None, True, True)}
"""name -> (pass pipeline, TREE_REDUCTIONS, EDGE_REGIONS)"""


_MADE: dict = {}


def _kernel(option: str, d: int, causal: bool, monkeypatch):
    """Compiled once per option and shape (without the disk cache: its key does not see the pin)."""
    key = (option, d, causal)
    if key not in _MADE:
        pipeline, tree, regions = OPTIONS[option]
        monkeypatch.setattr(lower_consumer, "TREE_REDUCTIONS", tree)
        monkeypatch.setattr(lower_consumer, "EDGE_REGIONS", regions)
        kernel = tkjit.compile(SOURCE, filename="attention.tk", constants={"D": d, "CAUSAL": causal},
                               lowering="general", require_hopper=True, cache=False, pipeline=pipeline)
        kernel.binary  # noqa: B018 - made under the pinned option
        _MADE[key] = kernel
    return _MADE[key]


@pytest.mark.parametrize("scale_sign", [1, -1])
@pytest.mark.parametrize("n", [4096 - 37, 50])
@pytest.mark.parametrize("d,causal", [(128, False), (128, True), (64, False), (64, True)])
@pytest.mark.parametrize("option", list(OPTIONS))
def test_attention_options_against_float64(option, d, causal, n, scale_sign, monkeypatch):
    kernel = _kernel(option, d, causal, monkeypatch)
    torch.manual_seed(0)
    q = torch.randn(1, 2, n, d, dtype=torch.bfloat16, device="cuda")
    k, v = (torch.randn(1, 1, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    o = torch.full_like(q, float("nan"))
    lse = torch.full((1, 2, n), float("nan"), device="cuda")
    scale = scale_sign * d ** -0.5
    kernel(q, k, v, o, lse, scale)
    torch.cuda.synchronize()
    ref_o, ref_l = exact(q, k, v, scale, causal)
    assert not torch.isnan(o).any() and not torch.isnan(lse).any(), "an output was never written"
    err = ((o.double() - ref_o).norm() / ref_o.norm()).item()
    assert err < 1e-2, f"{option} D={d} causal={causal} N={n}: relative error {err:.3g}"
    assert (lse.double() - ref_l).abs().max().item() < 1e-3
