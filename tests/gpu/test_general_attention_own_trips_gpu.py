"""On a GPU: per-consumer causal trip counts (the own-trips pass) in the general lowering.
examples/attention.tk and attention_nol.tk at D = 64, causal (192-row blocks over three
consumers, 128-key blocks), against the same program compiled without the pass (every consumer
runs the tile's trips) -- bit-identical, since a wholly masked trip adds exactly nothing (max with
-inf, ex2 to 0 and 1, a product of zeros) -- and against float64 torch: ragged N, N below one
tile, two query heads over one key/value head, both signs of the scale, outputs NaN-poisoned,
repeated launches identical. tests/test_own_trips.py checks the protocol and the schedule on the
CPU."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.passes import DEFAULT_PIPELINE
from tkjit.passes.mbarrier import protocol_of

from attention_reference import exact, run

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WITHOUT = DEFAULT_PIPELINE.replace("own-trips,", "")
"""The default pipeline without own-trips."""
_MADE: dict = {}


def _kernel(name: str, own: bool):
    if (name, own) not in _MADE:
        k = tkjit.compile((EXAMPLES / f"{name}.tk").read_text(), filename=f"{name}.tk",
                          constants={"D": 64, "CAUSAL": True}, lowering="general", require_hopper=True,
                          cache=False, pipeline=None if own else WITHOUT)
        assert protocol_of(k.ir).own_trips == own
        k.binary  # noqa: B018
        _MADE[(name, own)] = k
    return _MADE[(name, own)]


@pytest.mark.parametrize("sign", [1, -1])
@pytest.mark.parametrize("n", [8192 - 37, 1000, 192, 50])
@pytest.mark.parametrize("name", ["attention", "attention_nol"])
def test_own_trips_match_every_trip_bit_for_bit_and_float64(name, n, sign):
    torch.manual_seed(n)
    q = torch.randn(2, 2, n, 64, dtype=torch.bfloat16, device="cuda")
    k, v = (torch.randn(2, 1, n, 64, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    scale = sign * 64 ** -0.5
    o, lse = run(_kernel(name, True), name, q, k, v, scale)
    o_all, lse_all = run(_kernel(name, False), name, q, k, v, scale)
    assert not o.isnan().any(), "an output element was never written"
    assert torch.equal(o, o_all)
    if name == "attention":
        assert not lse.isnan().any() and torch.equal(lse, lse_all)
    again, _ = run(_kernel(name, True), name, q, k, v, scale)
    assert torch.equal(again, o)
    ref_o, ref_l = exact(q, k, v, scale, True)
    err = ((o.double() - ref_o).norm() / ref_o.norm()).item()
    assert err < 1e-2, f"{name} N={n}: relative error {err:.3g}"
    if name == "attention":
        assert (lse.double() - ref_l).abs().max().item() < 1e-3
