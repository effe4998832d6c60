"""On a GPU: LayerNorm and residual + LayerNorm split over a cluster with the mean and the variance
in one exchange (``cluster_moments``, stream-cols{moments=true}) and in two (moments=false
variance=two; variance=auto, the default, takes one pass for residual + LayerNorm), and in one pass about a shift (onepass=true), k = 2, 4, 8 and auto, D = 4096 and 8192, at row counts that are and are not
multiples of BR, outputs poisoned with NaN and surrounded by poison, against float64 torch and
(R <= 40, D = 4096) the interpreter; and at rows whose mean is far above their spread, where
Chan's combination must keep the variance (a sum of squares minus the squared sum would not)."""
from __future__ import annotations

import pytest
import torch
from test_norms_gpu import EXAMPLES, PORTABLE, _run

import tkjit

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("moments", ["true", "false variance=two", "true onepass=true"])
@pytest.mark.parametrize("cluster", ["2", "4", "8", "auto"])
@pytest.mark.parametrize("name", ["residual_layernorm", "layernorm"])
@pytest.mark.parametrize("d", [4096, 8192])
def test_mean_and_variance_over_a_cluster_on_the_gpu(name, d, cluster, moments):
    for r in (1000, 33):
        kernel = _run(name, d, r, f"{PORTABLE}{{cluster={cluster} moments={moments}}}")
        ir = kernel.asm["after:stream-cols"]
        two = moments.startswith("false")  # variance=two: auto would take one pass for residual + LN
        assert ("cluster_moments" in ir) == (not two)
        assert ir.count("cluster_sum") == (2 if two else 0)
        assert ("%shift" in ir) == ("onepass" in moments and d // kernel.metadata["cluster"][0] > 256)


@pytest.mark.parametrize("options", ["moments=true", "moments=true onepass=true"])
@pytest.mark.parametrize("name", ["residual_layernorm", "layernorm"])
@pytest.mark.parametrize("d", [4096, 8192])
def test_a_large_mean_keeps_its_variance_on_the_gpu(name, d, options):
    kernel = tkjit.load(EXAMPLES / f"{name}.tk", constants={"D": d}, pipeline=f"{PORTABLE}{{{options}}}")
    assert "cluster_moments" in kernel.asm["after:stream-cols"]
    r = 777
    g = torch.Generator(device="cuda").manual_seed(d)
    x = (300 + torch.randn(r, d, device="cuda", generator=g)).bfloat16()
    res = torch.randn(r, d, device="cuda", generator=g).bfloat16()
    w, b = (torch.randn(d, device="cuda", generator=g).bfloat16() for _ in range(2))
    y, hh = (torch.full((r, d), float("nan"), dtype=torch.bfloat16, device="cuda") for _ in range(2))
    if name == "layernorm":
        kernel(x, w, b, y, 1e-5)
        h = x.double()
    else:
        kernel(x, res, w, b, hh, y, 1e-5)
        h = x.double() + res.double()
    torch.cuda.synchronize()
    ref = torch.nn.functional.layer_norm(h, (d,), w.double(), b.double(), eps=1e-5)
    err = ((y.double() - ref).norm() / ref.norm()).item()
    assert err < 1e-2, f"{name} D={d}: relative error {err:.3g}"
