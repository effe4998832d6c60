"""On a GPU: a kernel tile-split halves (passes/tile_split.py) against float32 torch with its
output poisoned, at tile multiples and ragged shapes, and against the same kernel kept whole
(tile-split{mode=off})."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tkjit

from test_tile_split import BMM_BIAS_GELU, WHOLE

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("bt, m, n, k", [(4, 2048, 2048, 2048), (3, 1000, 600, 520), (1, 72, 100, 64)])
def test_the_halved_tile_is_correct_and_matches_the_whole_one(bt, m, n, k):
    split = tkjit.compile(BMM_BIAS_GELU)
    whole = tkjit.compile(BMM_BIAS_GELU, pipeline=WHOLE)
    assert "128 columns" in split.decisions.for_pass("tile-split")[0].decision
    a = torch.randn(bt, m, k, dtype=torch.bfloat16, device="cuda") * k ** -0.25
    b = torch.randn(bt, k, n, dtype=torch.bfloat16, device="cuda") * k ** -0.25
    bias = torch.randn(bt, n, dtype=torch.bfloat16, device="cuda")
    outs = []
    for kern in (split, whole):
        c = torch.full((bt, m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        kern(a, b, bias, c)
        torch.cuda.synchronize()
        outs.append(c)
    ref = F.gelu(torch.bmm(a.float(), b.float()) + bias.float()[:, None, :])
    for c in outs:
        assert not c.isnan().any()
        assert ((c.float() - ref).norm() / ref.norm()).item() < 1e-2
    diff = (outs[0].float() - outs[1].float()).norm() / outs[1].float().norm()
    assert diff.item() < 2e-3  # the same sums in the same k order: at most bf16 rounding apart
