"""On a Hopper GPU: the kernels of tests/unseen_corpus.py that take the general sm_90a lowering,
at a tile multiple and a ragged shape, against float32 torch. Outputs are poisoned (NaN) and sit
at the start of a larger buffer whose tail must stay untouched.

    python -m pytest -q tests/gpu/test_unseen_corpus_gpu.py
"""
from __future__ import annotations

import pytest
import torch

import tkjit

from test_unseen_corpus import REFUSED
from unseen_corpus import CASES

pytestmark = pytest.mark.gpu

SENTINEL = 12345.0
WGMMA = [c for c in CASES if c.name not in REFUSED]


def _guarded(out: torch.Tensor, guard: int = 8192) -> tuple[torch.Tensor, torch.Tensor]:
    buf = torch.full((out.numel() + guard,), SENTINEL, dtype=out.dtype, device=out.device)
    view = buf[:out.numel()].view(out.shape)
    view.copy_(out)
    return view, buf[out.numel():]


def _shape_id(x):
    return x.name if hasattr(x, "name") else "x".join(map(str, x.values()))


@pytest.mark.parametrize("case,shape", [(c, s) for c in WGMMA for s in c.shapes], ids=_shape_id)
def test_unseen_kernel_matches_torch_on_the_gpu(case, shape):
    torch.manual_seed(1)
    k = tkjit.compile(case.source, constants=case.constants or None, require_hopper=True)
    args = case.make(shape, "cuda")
    want = case.reference(args)
    guards = {}
    for i in case.outputs:
        args[i], guards[i] = _guarded(args[i])
    k(*args)
    torch.cuda.synchronize()
    assert k.metadata["backend"] == "wgmma" and k.metadata["lowering"] == "general"
    for i, ref in zip(case.outputs, want):
        got = args[i].float()
        assert not torch.isnan(got).any(), f"{case.name} {shape}: unwritten outputs"
        err = ((got - ref).norm() / ref.norm()).item()
        assert err < 1e-2, f"{case.name} {shape}: relative error {err}"
        assert bool((guards[i] == SENTINEL).all()), f"{case.name} {shape}: wrote past its output"
