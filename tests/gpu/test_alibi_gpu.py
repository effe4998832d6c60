"""On a Hopper GPU: the ALiBi kernels of issue 17 (tests/unseen_corpus.py attn_alibi128, attn_alibi
at BQ = 192, attn_alibi_hoisted), which fuse-elementwise keeps on the wgmma path, against float64
torch at a tile multiple, a ragged N and N below one tile, outputs NaN-poisoned with a guard after
them; and each against the register-tile backend it fell to before (pipeline
"canonicalize,stream-cols") at one shape. Timing: benchmarks/probes/unseen_kernels.py --only
alibi128,alibi192,alibi_hoisted.

    python -m pytest -q tests/gpu/test_alibi_gpu.py
"""
from __future__ import annotations

import pytest
import torch

import tkjit

from unseen_corpus import ALIBI_SLOPE, BY_NAME, alibi_bias

pytestmark = pytest.mark.gpu

NAMES = ["attn_alibi128", "attn_alibi", "attn_alibi_hoisted"]
SHAPES = [(2, 4, 2048), (1, 3, 1000), (1, 2, 100)]
SENTINEL = 12345.0


def _inputs(b, h, n):
    q, k, v = (torch.randn(b, h, n, 64, device="cuda").to(torch.bfloat16) for _ in range(3))
    buf = torch.full((b * h * n * 64 + 4096,), SENTINEL, dtype=torch.bfloat16, device="cuda")
    out = buf[:b * h * n * 64].view(b, h, n, 64)
    out.fill_(float("nan"))
    return [q, k, v, out, 0.125, ALIBI_SLOPE], buf[b * h * n * 64:]


def _reference(args):
    q, k, v = (t.double() for t in args[:3])
    s = q @ k.transpose(-1, -2) * args[4] + alibi_bias(q.shape[2], args[5], q.device, torch.float64)
    return torch.softmax(s, dim=-1) @ v


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", NAMES)
def test_alibi_takes_wgmma_and_matches_float64_torch(name, shape):
    torch.manual_seed(3)
    k = tkjit.compile(BY_NAME[name].source, require_hopper=True, cache=False)
    assert k.metadata["backend"] == "wgmma" and k.metadata["lowering"] == "general"
    assert "computed inside their users" in str(k.explain())  # fuse-elementwise decided it
    args, guard = _inputs(*shape)
    want = _reference(args)
    k(*args)
    torch.cuda.synchronize()
    got = args[3].double()
    assert not got.isnan().any(), "unwritten outputs"
    err = ((got - want).norm() / want.norm()).item()
    assert err < 1e-2, f"relative error {err}"
    assert bool((guard == SENTINEL).all()), "wrote past the output"


@pytest.mark.parametrize("name", NAMES)
def test_alibi_agrees_with_the_backend_it_fell_to(name):
    """The register-tile backend's result (what ran before) and the wgmma path's are both within
    bf16 rounding of float64 torch, and of each other."""
    torch.manual_seed(4)
    k = tkjit.compile(BY_NAME[name].source, cache=False)
    before = tkjit.compile(BY_NAME[name].source, cache=False, pipeline="canonicalize,stream-cols")
    assert before.metadata["backend"] == "mma.sync"
    args, _ = _inputs(1, 3, 1000)
    other = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    k(*args)
    before(*other)
    torch.cuda.synchronize()
    want = _reference(args)
    for got in (args[3], other[3]):
        assert ((got.double() - want).norm() / want.norm()).item() < 1e-2
    assert ((args[3].double() - other[3].double()).norm() / want.norm()).item() < 1e-2
