"""On a GPU: the GEMM + bias + activation examples at the shapes where @fill_sms launches the
half-width ping-pong tile for their epilogue (passes/epilogue_cost.py, fill_sms.PLAIN_EPILOGUE):
the variant it says it launched, correct against float32 torch with the output poisoned, and a
bias that ends inside a tile (the paired vector loads' edge; odd lengths run on the PTX simulator,
tests/test_vector_pairs.py) through the general lowering. Not yet run on a GPU (session 12)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import tkjit

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(name: str, m: int, n: int, k: int, act):
    kernel = tkjit.load(EXAMPLES / f"{name}.tk")
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    bias = torch.randn(n, dtype=torch.bfloat16, device="cuda")
    c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    kernel(a, b, bias, c)
    torch.cuda.synchronize()
    ref = act(a.float() @ b.float() + bias.float())
    return kernel, ((c.float() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("name, act", [("gemm_bias_gelu", F.gelu), ("gemm_bias_silu", F.silu)])
@pytest.mark.parametrize("size", [4096, 8192])
def test_a_costly_epilogue_launches_the_ping_pong_tile(name, act, size):
    kernel, err = _run(name, size, size, size, act)
    assert err < 1e-2
    (entry,) = [e for e in kernel.decisions.for_pass("fill-sms") if f"K={size}" in e.subject]
    assert entry.decision == "BM = 128, BN = 128" and "its epilogue (~" in entry.reason


@pytest.mark.parametrize("n", [1000, 1032])
def test_a_bias_ending_inside_a_tile_through_the_general_lowering(n):
    _, err = _run("gemm_bias_gelu", 700, n, 320, F.gelu)
    assert err < 1e-2


@pytest.mark.parametrize("shape", [(4096, 4096, 1024), (1000, 3000, 520)])
@pytest.mark.parametrize("act, fn, rcp", [("gelu", F.gelu, "fma"), ("silu", F.silu, "mufu")])
def test_the_epilogue_reciprocal_on_either_pipe(shape, act, fn, rcp):
    """The ping-pong tile's epilogue with its map's reciprocal on its own pipe (auto) and pinned to
    the other (the epilogue pass's option rcp): both correct against float32 torch, output
    poisoned, and within bf16 rounding of each other. (Session 16's GPU run passed this for gelu
    with rcp=fma and a since-dropped ex2=fma, benchmarks/results/...-s16-gelu-rcp-gpu-tests.log.)"""
    from tkjit.passes import default_pipeline
    m, n, k = shape
    src = (EXAMPLES / "gemm_bias_gelu.tk").read_text().replace("gelu(add_col", f"{act}(add_col")
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    bias = torch.randn(n, dtype=torch.bfloat16, device="cuda")
    ref = fn(a.float() @ b.float() + bias.float())
    outs = {}
    for pin in ("auto", rcp):
        pipeline = ",".join(f"epilogue{{rcp={pin}}}" if p.split("{")[0] == "epilogue" else p
                            for p in default_pipeline("sm_90a").split(","))
        kernel = tkjit.compile(src, constants={"BN": 128}, pipeline=pipeline, require_hopper=True)
        c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        kernel(a, b, bias, c)
        torch.cuda.synchronize()
        assert ((c.float() - ref).norm() / ref.norm()).item() < 1e-2, pin
        outs[pin] = c.float()
    assert ("rcp.approx" in kernel.asm["ptx"]) == (rcp == "mufu")
    torch.testing.assert_close(outs[rcp], outs["auto"], rtol=1e-2, atol=1e-2)
