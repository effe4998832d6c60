"""On a GPU: a kernel compiled persistent by trips (causal attention under the general lowering)
launches its persistent binary where the longest key loop is short and the one compiled with one
CTA per tile past that (tkjit/trip_dispatch.py); both are right against float64 torch, outputs
NaN-poisoned, at N on every side of the bounds (8 and 16 trips of 128 keys) and not a multiple of the
tiles; the decision log names the binary each shape took. tests/test_trip_dispatch.py checks the
metadata, the variant and the choice on the CPU."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tkjit

from attention_reference import exact

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
_MADE: dict = {}


def _kernel(name: str, d: int):
    if (name, d) not in _MADE:
        _MADE[name, d] = tkjit.compile((EXAMPLES / f"{name}.tk").read_text(), filename=f"{name}.tk",
                                       constants={"D": d, "CAUSAL": True}, lowering="general",
                                       require_hopper=True)
    return _MADE[name, d]


@pytest.mark.parametrize("n,binary", [(1024, "persistent"), (700, "persistent"), (1025, "persistent"),
                                      (2048, "persistent"), (2049, "one CTA per tile"),
                                      (4096, "one CTA per tile"), (3000, "one CTA per tile")])
@pytest.mark.parametrize("name,d", [("attention_nol", 128), ("attention", 64)])
def test_the_launch_picks_the_binary_by_trips_and_both_are_right(name, d, n, binary):
    kernel = _kernel(name, d)
    assert kernel.metadata["by_trips"]["short"] == 8
    torch.manual_seed(n)
    q = torch.randn(2, 2, n, d, dtype=torch.bfloat16, device="cuda")
    k, v = (torch.randn(2, 2, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    o = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:3], float("nan"), device="cuda")
    scale = d ** -0.5
    kernel(q, k, v, o, lse, scale) if name == "attention" else kernel(q, k, v, o, scale)
    torch.cuda.synchronize()
    ref, ref_lse = exact(q, k, v, scale, True)
    assert not o.isnan().any()
    err = ((o.double() - ref).norm() / ref.norm()).item()
    assert err < 1e-2, err
    if name == "attention":
        assert not lse.isnan().any()
        assert ((lse.double() - ref_lse).norm() / ref_lse.norm()).item() < 1e-3  # the natural log
    taken = [d for d in kernel.decisions.for_pass("grid") if d.subject.startswith(f"@{name} at ")
             and f"N={n} " in d.subject + " "]
    assert taken and (binary in taken[-1].decision), [(d.subject, d.decision) for d in taken]
