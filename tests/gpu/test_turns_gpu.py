"""On a GPU: level-2 loops with ping-pong turns (mbarrier{turns=on}) run to the end (no hang: the
chain of named barriers opens and closes once per CTA) and are right against float64 torch, with
outputs NaN-poisoned: examples/attention.tk and attention_nol.tk at D = 64 / 128, causal and not,
one CTA per tile and persistent (lowering='general'), N a multiple of the tiles and not, N < one
tile. tests/test_turns.py checks the protocol, the checker and the roles interpreter on the CPU."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.passes import DEFAULT_PIPELINE

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TURNS = DEFAULT_PIPELINE.replace("mbarrier,", "mbarrier{turns=on},")
_MADE: dict = {}


def _kernel(name, d, causal, lowering):
    key = (name, d, causal, lowering)
    if key not in _MADE:
        _MADE[key] = tkjit.compile((EXAMPLES / f"{name}.tk").read_text(), filename=f"{name}.tk",
                                   constants={"D": d, "CAUSAL": causal}, lowering=lowering, pipeline=TURNS,
                                   require_hopper=True)
    return _MADE[key]


@pytest.mark.parametrize("n", [4096, 1000, 257, 50])
@pytest.mark.parametrize("lowering", ["auto", "general"])
@pytest.mark.parametrize("name,d,causal", [("attention_nol", 128, False), ("attention_nol", 128, True),
                                           ("attention", 128, True), ("attention", 64, False),
                                           ("attention_nol", 96, False)])
def test_turns_run_and_are_right(name, d, causal, lowering, n):
    torch.manual_seed(n)
    q, k, v = (torch.randn(2, 3, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    o = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:3], float("nan"), device="cuda")
    scale = d ** -0.5
    kern = _kernel(name, d, causal, lowering)
    kern(q, k, v, o, lse, scale) if name == "attention" else kern(q, k, v, o, scale)
    torch.cuda.synchronize()
    s = scale * q.double() @ k.double().transpose(-1, -2)
    if causal:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
    ref = torch.softmax(s, -1) @ v.double()
    assert not o.isnan().any()
    assert ((o.double() - ref).norm() / ref.norm()).item() < 1e-2
    if name == "attention":
        assert ((lse.double() - torch.logsumexp(s, -1)).abs().max()).item() < 1e-3
