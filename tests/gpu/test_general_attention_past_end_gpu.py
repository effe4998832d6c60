"""On a GPU: consumers whose rows of a tile all lie past N compute nothing (own-trips{past_end},
passes/past_end.py) in the general lowering. examples/attention.tk and attention_nol.tk, causal at
D = 64 (192-row blocks over three consumers: at N = 1024 the heaviest block of each head has 64
valid rows, so consumers 1 and 2 idle) and D = 96, and non-causal D = 64 under past_end=on (a loop
the default leaves alone), against the same program compiled with past_end=off (bit-identical:
the stored rows are computed by the same instructions) and against float64 torch; B = 2, H = 2,
with two and with one key/value head (GQA), N = 1024, 1000, 700, 192, 50, 8155, outputs
NaN-poisoned (an idle consumer's epilogue divides 0 by 0; its rows must be clipped at N).
tests/test_own_trips_past_end.py checks the rule, the protocol and the schedule on the CPU."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.passes import DEFAULT_PIPELINE
from tkjit.passes.own_trips import own_loops

from attention_reference import exact, run

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PIPELINES = {"auto": None, "off": DEFAULT_PIPELINE.replace("own-trips,", "own-trips{past_end=off},"),
             "on": DEFAULT_PIPELINE.replace("own-trips,", "own-trips{past_end=on},")}
_MADE: dict = {}


def _kernel(name: str, d: int, causal: bool, past_end: str):
    key = (name, d, causal, past_end)
    if key not in _MADE:
        k = tkjit.compile((EXAMPLES / f"{name}.tk").read_text(), filename=f"{name}.tk",
                          constants={"D": d, "CAUSAL": causal}, lowering="general", require_hopper=True,
                          cache=False, pipeline=PIPELINES[past_end])
        marked = [loop.attrs.get("past_end", False) for loop in own_loops(k.ir)]
        assert marked == ([True] if past_end != "off" else [] if not causal else [False])
        k.binary  # noqa: B018
        _MADE[key] = k
    return _MADE[key]


CASES = [(name, 64, True, "auto") for name in ("attention", "attention_nol")] + \
        [("attention", 96, True, "auto"), ("attention", 64, False, "on"), ("attention_nol", 64, False, "on")]


@pytest.mark.parametrize("hkv", [2, 1])
@pytest.mark.parametrize("n", [1024, 1000, 700, 192, 50, 8155])
@pytest.mark.parametrize("name,d,causal,past_end", CASES)
def test_idle_consumers_past_the_end_match_every_trip_and_float64(name, d, causal, past_end, n, hkv):
    torch.manual_seed(n + hkv)
    q = torch.randn(2, 2, n, d, dtype=torch.bfloat16, device="cuda")
    k, v = (torch.randn(2, hkv, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    scale = d ** -0.5
    o, lse = run(_kernel(name, d, causal, past_end), name, q, k, v, scale)
    o_off, lse_off = run(_kernel(name, d, causal, "off"), name, q, k, v, scale)
    assert not o.isnan().any(), "an output element was never written, or an idle consumer's NaN leaked"
    assert torch.equal(o, o_off)
    if name == "attention":
        assert not lse.isnan().any() and torch.equal(lse, lse_off)
    again, _ = run(_kernel(name, d, causal, past_end), name, q, k, v, scale)
    assert torch.equal(again, o)
    ref_o, ref_l = exact(q, k, v, scale, causal)
    err = ((o.double() - ref_o).norm() / ref_o.norm()).item()
    assert err < 1e-2, f"{name} D={d} N={n}: relative error {err:.3g}"
    if name == "attention":
        assert (lse.double() - ref_l).abs().max().item() < 1e-3


@pytest.mark.parametrize("m", [150, 1000, 4165])
def test_a_gemm_under_past_end_on_matches_off(m):
    """Not attention-specific: examples/gemm.tk (128x256 over two consumers) under past_end=on,
    where a ragged M leaves the last block row's consumer 1 past the end (M = 150, 4165), against
    past_end=off bit for bit and float64 torch."""
    src = (EXAMPLES / "gemm.tk").read_text()
    made = {}
    for mode in ("on", "off"):
        if ("gemm", mode) not in _MADE:
            _MADE[("gemm", mode)] = tkjit.compile(src, filename="gemm.tk", cache=False, require_hopper=True,
                                                  pipeline=PIPELINES[mode])
        made[mode] = _MADE[("gemm", mode)]
    assert [loop.attrs.get("past_end") for loop in own_loops(made["on"].ir)] == [True]
    torch.manual_seed(m)
    a = torch.randn(m, 512, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(512, 1000, dtype=torch.bfloat16, device="cuda")
    out = {}
    for mode, k in made.items():
        c = torch.full((m, 1000), float("nan"), dtype=torch.bfloat16, device="cuda")
        k(a, b, c)
        torch.cuda.synchronize()
        out[mode] = c
    assert not out["on"].isnan().any() and torch.equal(out["on"], out["off"])
    ref = a.double() @ b.double()
    assert ((out["on"].double() - ref).norm() / ref.norm()).item() < 1e-2
