"""On a GPU: examples/attention.tk through the general lowering with the cross-tile overlap of its
one-shot Q (session 13: a persistent grid over tiles loaded once per tile, two Q slots where the
ring keeps 3 stages -- D = 64 --, the launch-time grid ``by_trips`` for causal kernels) against the
same kernel one CTA per tile (``grid{schedule=grid}``, the schedule before) and against float64
torch. O and L must be bit-identical to the one-CTA-per-tile kernel (only the schedule differs):
many tiles per CTA (the slots wrap several times), ragged N, N below one tile, two query heads
over one key/value head, outputs NaN-poisoned. The default releases a one-slot Q right after
the loop where the tiles do equal work (D = 128 non-causal); also with one slot
(``pipeline{slots=1}``), with Q released at the end of the tile (``mbarrier{release=end}``), early
in the causal kernels too (``mbarrier{release=early}``) and with O stored from registers wherever
that gives the ring a stage (``pipeline{staging=drop}``, off by default)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.passes import DEFAULT_PIPELINE

from attention_reference import exact

pytestmark = pytest.mark.gpu
SOURCE = (Path(__file__).resolve().parents[2] / "examples" / "attention.tk").read_text()
GRID = DEFAULT_PIPELINE.replace("grid,", "grid{schedule=grid},")
ONE_SLOT = DEFAULT_PIPELINE.replace("pipeline,", "pipeline{slots=1},")
END = DEFAULT_PIPELINE.replace("mbarrier", "mbarrier{release=end}")
EARLY = DEFAULT_PIPELINE.replace("mbarrier", "mbarrier{release=early}")
DROP = DEFAULT_PIPELINE.replace("pipeline,", "pipeline{staging=drop},")


_MADE: dict = {}


def _kernel(pipeline, d: int, causal: bool):
    key = (pipeline, d, causal)
    if key not in _MADE:
        _MADE[key] = tkjit.compile(SOURCE, filename="attention.tk", constants={"D": d, "CAUSAL": causal},
                                   lowering="general", require_hopper=True, pipeline=pipeline)
    return _MADE[key]


def _run(kernel, q, k, v, scale):
    b, h, n, d = q.shape
    o = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, n), float("nan"), device="cuda")
    kernel(q, k, v, o, lse, scale)
    torch.cuda.synchronize()
    return o, lse


@pytest.mark.parametrize("pipeline", [None, ONE_SLOT, END, EARLY, DROP],
                         ids=["default", "one-slot", "release-end", "release-early", "staging-drop"])
@pytest.mark.parametrize("b,n", [(8, 1024), (2, 8155), (3, 1000), (2, 50), (4, 2 * 192 + 7)])
@pytest.mark.parametrize("d,causal", [(128, False), (128, True), (64, False), (64, True)])
def test_overlapped_tiles_equal_one_tile_per_cta(pipeline, b, n, d, causal):
    kern = _kernel(pipeline, d, causal)
    assert "num_sms" in str(kern.metadata["grid"])  # persistent (causal: chosen at launch)
    torch.manual_seed(n + d)
    h, hkv = 8, 4
    q = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, hkv, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    scale = d ** -0.5
    o, lse = _run(kern, q, k, v, scale)
    o0, lse0 = _run(_kernel(GRID, d, causal), q, k, v, scale)
    assert not o.isnan().any() and not lse.isnan().any()
    assert torch.equal(o, o0) and torch.equal(lse, lse0), "the overlapped schedule changed the result"
    for i, j in ((0, 0), (b - 1, h - 1)):
        ref_o, ref_l = exact(q[i:i + 1, j:j + 1], k[i:i + 1, j // 2:j // 2 + 1], v[i:i + 1, j // 2:j // 2 + 1],
                              scale, causal)
        err = ((o[i, j].double() - ref_o[0, 0]).norm() / ref_o.norm()).item()
        assert err < 1e-2, err
        assert (lse[i, j].double() - ref_l[0, 0]).abs().max().item() < 1e-3
