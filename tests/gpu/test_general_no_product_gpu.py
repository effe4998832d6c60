"""On a GPU: the kernels with no matrix product (RMSNorm, residual + LayerNorm, LayerNorm, softmax,
rotary) through the general sm_90a lowering (``lowering='general'``: a TMA producer for the row
block stream-cols keeps in shared memory, copy_cols of its swizzled panels, cross-warp row
reductions through the consumers' scratch; rotary with no producer), at row counts that are and
are not multiples of the tiles, outputs poisoned with NaN and surrounded by poison (nothing
written outside them), against float64 torch and, for the smaller shapes, bit for bit against
the register-tile backend (``lowering='auto'``) running the same IR."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tkjit

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _args(name, r, d, g):
    x = (torch.randn(r, d, device="cuda", generator=g) * 2 + 0.5).bfloat16()
    w = torch.randn(d, device="cuda", generator=g).bfloat16()
    b = torch.randn(d, device="cuda", generator=g).bfloat16()
    res = torch.randn(r, d, device="cuda", generator=g).bfloat16()
    outs = [torch.full((r + 2, d), float("nan"), dtype=torch.bfloat16, device="cuda") for _ in range(2)]
    if name == "rmsnorm":
        xd = x.double()
        return [x, w, outs[0][1:-1], 1e-6], [xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()], outs[:1]
    if name == "layernorm":
        return ([x, w, b, outs[0][1:-1], 1e-5],
                [torch.nn.functional.layer_norm(x.double(), (d,), w.double(), b.double(), eps=1e-5)], outs[:1])
    if name == "softmax":
        return [x, outs[0][1:-1]], [torch.softmax(x.double(), -1)], outs[:1]
    h = x.double() + res.double()
    return ([x, res, w, b, outs[0][1:-1], outs[1][1:-1], 1e-5],
            [h, torch.nn.functional.layer_norm(h, (d,), w.double(), b.double(), eps=1e-5)], outs)


def _check(kernel, args, truth, fulls):
    kernel(*args)
    torch.cuda.synchronize()
    for full, t in zip(fulls, truth):
        assert torch.isnan(full[0]).all() and torch.isnan(full[-1]).all(), "written outside the output"
        view = full[1:-1]
        assert not torch.isnan(view).any(), "an output element was not written"
        err = ((view.double() - t).norm() / t.norm()).item()
        assert err < 1e-2, f"relative error {err:.3g}"


@pytest.mark.parametrize("name", ["rmsnorm", "residual_layernorm", "layernorm", "softmax"])
@pytest.mark.parametrize("d", [1024, 2048])  # (wider rows, split over a cluster: test_general_cluster_gpu.py)
@pytest.mark.parametrize("r", [1000, 33, 7])
def test_row_wise_example_through_the_general_lowering(name, d, r):
    constants = {"C" if name == "softmax" else "D": d}
    general = tkjit.load(EXAMPLES / f"{name}.tk", constants=constants, lowering="general", require_hopper=True)
    assert general.metadata.get("lowering") == "general"
    g = torch.Generator(device="cuda").manual_seed(r + d)
    args, truth, fulls = _args(name, r, d, g)
    _check(general, args, truth, fulls)
    if r <= 40:  # the same IR on the register-tile backend: the same f32 arithmetic in the same order
        auto = tkjit.load(EXAMPLES / f"{name}.tk", constants=constants)
        mine = [f.clone() for f in fulls]
        for f in fulls:
            f.fill_(float("nan"))
        _check(auto, args, truth, fulls)
        for a, b in zip(mine, fulls):
            torch.testing.assert_close(a.float(), b.float(), rtol=1e-2, atol=1e-2, equal_nan=True)  # NaN guards


@pytest.mark.parametrize("lowering", ["general", "auto"])  # (auto takes the general lowering for it)
@pytest.mark.parametrize("n", [4096, 1000, 37])
def test_rotary_through_the_general_lowering(n, lowering):
    k = tkjit.load(EXAMPLES / "rotary.tk", lowering=lowering, require_hopper=True)
    assert k.metadata.get("lowering") == "general"
    g = torch.Generator(device="cuda").manual_seed(n)
    x = torch.randn(2, 3, n, 128, device="cuda", generator=g).bfloat16()
    cos = torch.randn(n, 64, device="cuda", generator=g).bfloat16()
    sin = torch.randn(n, 64, device="cuda", generator=g).bfloat16()
    full = torch.full((2 * 3 * n * 128 + 2 * 64,), float("nan"), dtype=torch.bfloat16, device="cuda")
    y = full[64:-64].view(2, 3, n, 128)
    k(x, cos, sin, y)
    torch.cuda.synchronize()
    assert torch.isnan(full[:64]).all() and torch.isnan(full[-64:]).all(), "written outside the output"
    xd, c, s = x.double(), cos.double(), sin.double()
    want = torch.cat([xd[..., :64] * c - xd[..., 64:] * s, xd[..., 64:] * c + xd[..., :64] * s], -1)
    assert not torch.isnan(y).any()
    assert ((y.double() - want).norm() / want.norm()).item() < 1e-2


FORMS = ["direct=true", "loads=registers", "cache=none", "loads=shared stages=4", "resident=2 stages=4",
         "force=true cache=shared cols=128 direct=true"]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", ["rmsnorm", "residual_layernorm"])
def test_stream_forms_through_the_general_lowering(name, form):
    from tkjit.passes import DEFAULT_PIPELINE
    pipe = DEFAULT_PIPELINE.replace("stream-cols", f"stream-cols{{{form}}}", 1)
    k = tkjit.load(EXAMPLES / f"{name}.tk", lowering="general", require_hopper=True, pipeline=pipe)
    for r in (1000, 33):
        g = torch.Generator(device="cuda").manual_seed(r)
        args, truth, fulls = _args(name, r, 1024, g)
        _check(k, args, truth, fulls)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("n", [4096, 1000, 37])
def test_attention_backward_row_sums_through_the_general_lowering(n, d):
    """examples/attention_bwd_prep.tk through the general lowering (consumers only, the contiguous
    order; auto keeps it on the register-tile backend, measured faster): Di against float64,
    nothing written past the output, at ragged N."""
    k = tkjit.load(EXAMPLES / "attention_bwd_prep.tk", constants={"D": d}, lowering="general", require_hopper=True)
    assert k.metadata.get("lowering") == "general"
    g = torch.Generator(device="cuda").manual_seed(n + d)
    o, do = (torch.randn(2, 3, n, d, device="cuda", generator=g).bfloat16() for _ in range(2))
    full = torch.full((2 * 3 * n + 64,), float("nan"), device="cuda")
    di = full[32:-32].view(2, 3, n)
    k(o, do, di)
    torch.cuda.synchronize()
    assert torch.isnan(full[:32]).all() and torch.isnan(full[-32:]).all(), "written outside the output"
    want = (o.double() * do.double()).sum(-1)
    assert not torch.isnan(di).any()
    assert ((di.double() - want).norm() / want.norm()).item() < 1e-4
