"""On a GPU: issue 18's attention variants through the general sm_90a lowering, against float64
torch, two query heads sharing one key/value head (GQA, H % HKV = 0) at the largest N (ragged:
not a multiple of any tile) and at N below one tile, outputs NaN-poisoned: head dims 64, 96, 128,
256, causal and not, f16, base-e softmax, the mask on every trip, and the backward (Di, dK/dV,
dQ) from the forward's O and L against float64 autograd. tests/test_attention_variants.py checks
the same variants' SASS (HGMMA, UTMALDG, no spills) on the CPU."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tkjit

from attention_reference import exact

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LARGEST_N, SMALL_N = 16384 - 37, 50

FORWARD = [
    ("attention_nol", {"D": 64}), ("attention_nol", {"D": 64, "CAUSAL": True}),
    ("attention_nol", {"D": 96}), ("attention_nol", {"D": 96, "CAUSAL": True}),
    ("attention_nol", {"D": 128}), ("attention_nol", {"D": 128, "CAUSAL": True}),
    ("attention_nol", {"D": 256}), ("attention_nol", {"D": 256, "CAUSAL": True}),
    ("attention_exp", {}), ("attention_exp", {"CAUSAL": True}), ("attention_exp", {"D": 64, "CAUSAL": True}),
    ("attention_mask", {}), ("attention_mask", {"D": 64}),
    ("attention_f16", {}), ("attention_f16", {"CAUSAL": True}), ("attention_f16", {"D": 64}),
    ("attention_f16", {"D": 256, "CAUSAL": True}),
]


def _ids(v):
    return v[0] + "".join(f"-{k}={x}" for k, x in v[1].items())


def _general(name: str, constants: dict):
    k = tkjit.load(EXAMPLES / f"{name}.tk", constants=constants or None, require_hopper=True)
    k.binary  # noqa: B018 - compile now: a refusal fails here, not in the launch
    assert k.metadata.get("lowering") == "general", k.metadata.get("lowering")
    return k


@pytest.mark.parametrize("n", [LARGEST_N, SMALL_N])
@pytest.mark.parametrize("variant", FORWARD, ids=_ids)
def test_forward_variant_against_float64(variant, n):
    name, constants = variant
    d = constants.get("D", 128)
    causal = constants.get("CAUSAL", False) or name == "attention_mask"
    dtype = torch.float16 if name == "attention_f16" else torch.bfloat16
    torch.manual_seed(0)
    q = torch.randn(1, 2, n, d, dtype=dtype, device="cuda")
    k, v = (torch.randn(1, 1, n, d, dtype=dtype, device="cuda") for _ in range(2))
    o = torch.full_like(q, float("nan"))
    kernel = _general(name, constants)
    kernel(q, k, v, o, d ** -0.5)
    torch.cuda.synchronize()
    ref = exact(q, k, v, d ** -0.5, causal)[0]
    assert not torch.isnan(o).any(), "an output element was never written"
    err = ((o.double() - ref).norm() / ref.norm()).item()
    assert err < 1e-2, f"{_ids(variant)} N={n}: relative error {err:.3g}"


@pytest.mark.parametrize("n", [LARGEST_N, SMALL_N])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
def test_backward_against_float64_autograd(d, causal, n):
    """The forward (examples/attention.tk, for O and L), then Di, dK/dV and dQ through the general
    lowering, two query heads over one key/value head, against float64 autograd of the exact
    attention (dK and dV sum over the group)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("tkjit_example_attention_bwd", EXAMPLES / "attention_bwd.py")
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    c = {"D": d, "CAUSAL": causal}
    ks = {"fwd": tkjit.load(EXAMPLES / "attention.tk", constants=c),
          "prep": tkjit.load(EXAMPLES / "attention_bwd_prep.tk", constants={"D": d}),
          "dkdv": _general("attention_bwd_dkdv", c), "dq": _general("attention_bwd_dq", c)}
    torch.manual_seed(0)
    bf = dict(dtype=torch.bfloat16, device="cuda")
    q, do = (torch.randn(1, 2, n, d, **bf) for _ in range(2))
    k, v = (torch.randn(1, 1, n, d, **bf) for _ in range(2))
    o = torch.full_like(q, float("nan"))
    lse = torch.full((1, 2, n), float("nan"), dtype=torch.float32, device="cuda")
    scale = d ** -0.5
    ks["fwd"](q, k, v, o, lse, scale)
    grads = driver.backward(ks, q, k, v, o, lse, do, scale)
    torch.cuda.synchronize()
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    exact(*leaves, scale, causal)[0].backward(do.double())
    for label, g, x in zip(("dQ", "dK", "dV"), grads[:3], leaves):
        assert not torch.isnan(g).any(), f"{label}: an element was never written"
        err = ((g.double() - x.grad).norm() / x.grad.norm()).item()
        assert err < 2e-2, f"{label} D={d} causal={causal} N={n}: relative error {err:.3g}"
