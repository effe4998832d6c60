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

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _args(name, r, d, g):
    x = (torch.randn(r, d, device="cuda", generator=g) * 2 + 0.5).bfloat16()
    w = torch.randn(d, device="cuda", generator=g).bfloat16()
    b = torch.randn(d, device="cuda", generator=g).bfloat16()
    res = torch.randn(r, d, device="cuda", generator=g).bfloat16()
    outs = [torch.full((r + 2, d), float("nan"), dtype=torch.bfloat16, device="cuda") for _ in range(2)]
    xd = x.double()
    if name == "rmsnorm":
        return [x, w, outs[0][1:-1], 1e-6], [xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()], outs[:1]
    if name == "layernorm":
        return ([x, w, b, outs[0][1:-1], 1e-5],
                [torch.nn.functional.layer_norm(xd, (d,), w.double(), b.double(), eps=1e-5)], outs[:1])
    if name == "softmax":
        return [x, outs[0][1:-1]], [torch.softmax(xd, -1)], outs[:1]
    h = xd + res.double()
    return ([x, res, w, b, outs[0][1:-1], outs[1][1:-1], 1e-5],
            [h, torch.nn.functional.layer_norm(h, (d,), w.double(), b.double(), eps=1e-5)], outs)


@pytest.mark.parametrize("fill", ["cp.async", "tma"])
@pytest.mark.parametrize("name", ["rmsnorm", "residual_layernorm", "layernorm", "softmax"])
@pytest.mark.parametrize("d", [1024, 2048])
@pytest.mark.parametrize("r", [4096, 1000, 33, 7])
def test_norms_with_either_fill_against_float64(name, d, r, fill):
    if (name, d) == ("residual_layernorm", 2048):
        pytest.skip("stream-cols splits it over a cluster, which the general lowering refuses")
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
    args, truth, fulls = _args(name, r, d, g)
    k(*args)
    torch.cuda.synchronize()
    for full, t in zip(fulls, truth):
        assert torch.isnan(full[0]).all() and torch.isnan(full[-1]).all(), "written outside the output"
        view = full[1:-1]
        assert not torch.isnan(view).any(), "an output element was not written"
        err = ((view.double() - t).norm() / t.norm()).item()
        assert err < 1e-2, f"relative error {err:.3g}"
