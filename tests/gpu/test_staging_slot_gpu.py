"""On a GPU: the attention examples through the general lowering with ``pipeline{staging=slot}`` (O's
staging in Q's one slot, released at the end of the tile once the TMA stores have read it, so the
K/V ring keeps a stage: D = 128 causal 2 -> 3, attention_nol D = 256 1 -> 2) against float64 torch,
and bit for bit against the same kernel without the option where both take the same level of
software pipelining (only the schedule differs).

Persistent CTAs over many tiles (the next tile's Q lands in the bytes this tile's O just left),
N in {1000, 4096, 77, 129} (ragged, below one tile), B = 2, H = 4 over HKV = 2 key/value heads,
outputs NaN-poisoned. attention_nol D = 256 also with ``mbarrier{split=off}`` (level 1: the
option's 2 stages make its level 2 over split rings spill 8 bytes, tests/test_staging_slot.py)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.passes import DEFAULT_PIPELINE

from attention_reference import exact

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SLOT = DEFAULT_PIPELINE.replace("pipeline,", "pipeline{staging=slot},")
PINNED = SLOT.replace("grid,", "grid{schedule=persistent},")  # D = 256: the grid's slot bound keeps
LEVEL1 = PINNED.replace("mbarrier", "mbarrier{split=off}")    # one CTA per tile unless pinned
CASES = [("attention", 128, True, SLOT), ("attention", 128, False, SLOT),
         ("attention_nol", 128, True, SLOT), ("attention_nol", 256, False, PINNED),
         ("attention_nol", 256, False, LEVEL1), ("attention_exp", 128, False, SLOT),
         ("attention_exp", 128, True, SLOT), ("attention_mask", 128, True, SLOT)]
IDS = [f"{n}-D{d}{'-causal' if c else ''}{'-level1' if p == LEVEL1 else ''}" for n, d, c, p in CASES]
_MADE: dict = {}


def _kernel(name: str, d: int, causal: bool, pipeline):
    key = (name, d, causal, pipeline)
    if key not in _MADE:
        constants = {"D": d} | ({} if name == "attention_mask" else {"CAUSAL": causal})
        _MADE[key] = tkjit.compile((EXAMPLES / f"{name}.tk").read_text(), filename=f"{name}.tk",
                                   constants=constants, lowering="general", require_hopper=True,
                                   pipeline=pipeline)
    return _MADE[key]


def _run(kern, name, q, k, v, scale):
    b, h, n, d = q.shape
    o = torch.full_like(q, float("nan"))
    args = [q, k, v, o]
    lse = None
    if name == "attention":
        lse = torch.full((b, h, n), float("nan"), device="cuda")
        args.append(lse)
    kern(*args, scale)
    torch.cuda.synchronize()
    return o, lse


@pytest.mark.parametrize("n", [1000, 4096, 77, 129])
@pytest.mark.parametrize("name,d,causal,pipeline", CASES, ids=IDS)
def test_the_staging_in_the_slot(name, d, causal, pipeline, n):
    kern = _kernel(name, d, causal, pipeline)
    store = next(op for op in kern.ir.walk() if op.NAME == "store" and "smem" in op.attrs)
    assert store.attrs.get("staging_in") == 0, "the option did not take"
    torch.manual_seed(n + d + causal)
    b, h, hkv = 2, 4, 2
    q = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, hkv, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    scale = d ** -0.5
    o, lse = _run(kern, name, q, k, v, scale)
    assert not o.isnan().any(), "O has rows the kernel did not write"
    ref_o, ref_l = exact(q, k, v, scale, causal)
    err = ((o.double() - ref_o).norm() / ref_o.norm()).item()
    worst = (o.double() - ref_o).abs().max().item()
    assert err < 1e-2 and worst < 0.1, f"O: relative error {err:.3g}, worst element {worst:.3g}"
    if lse is not None:
        assert not lse.isnan().any(), "L has rows the kernel did not write"
        assert (lse.double() - ref_l).abs().max().item() < 2e-2
    plain = _kernel(name, d, causal, None)
    if ("level 2:" in str(plain.explain())) != ("level 2:" in str(kern.explain())):
        return  # (nol D = 256: level 2 with the option's 2 stages, level 1 with 1; not bit-compared)
    o0, lse0 = _run(plain, name, q, k, v, scale)
    assert torch.equal(o, o0), "the option changed O"
    if lse is not None:
        assert torch.equal(lse, lse0), "the option changed L"
