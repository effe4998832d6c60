"""Issue 18's attention variants through the general sm_90a lowering, on the CPU: every variant at
the constants the GPU test and the benchmark use (head dims 64, 96, 128, 256; causal and not;
f16; base-e softmax; the mask on every trip; the backward's dK/dV and dQ kernels) takes the
general lowering (HGMMA and UTMALDG in the SASS, no local memory, no ptxas warning), and its
schedule (producer and consumers as coroutines over the checked protocol, tkjit/interpreter/roles.py)
gives the plain interpreter's result bit for bit at a ragged N and at N below one tile."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import tkjit
from tkjit import interpreter
from tkjit.errors import NotAvailableError
from tkjit.interpreter.roles import run_roles

from test_examples_interpreter import CASES

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

VARIANTS = [
    ("attention_nol", {"D": 64}), ("attention_nol", {"D": 64, "CAUSAL": True}),
    ("attention_nol", {"D": 96}), ("attention_nol", {"D": 96, "CAUSAL": True}),
    ("attention_nol", {"D": 128, "CAUSAL": True}),
    ("attention_nol", {"D": 256}), ("attention_nol", {"D": 256, "CAUSAL": True}),
    ("attention_exp", {}), ("attention_exp", {"CAUSAL": True}), ("attention_exp", {"D": 64}),
    ("attention_mask", {}), ("attention_mask", {"D": 64}),
    ("attention_f16", {}), ("attention_f16", {"CAUSAL": True}), ("attention_f16", {"D": 64}),
    ("attention_f16", {"D": 256}),
    ("attention_bwd_dkdv", {}), ("attention_bwd_dkdv", {"CAUSAL": True}), ("attention_bwd_dkdv", {"D": 64}),
    ("attention_bwd_dkdv", {"D": 64, "CAUSAL": True}),
    ("attention_bwd_dq", {}), ("attention_bwd_dq", {"CAUSAL": True}), ("attention_bwd_dq", {"D": 64}),
    ("attention_bwd_dq", {"D": 64, "CAUSAL": True}),
]


def _ids(v):
    return v[0] + "".join(f"-{k}={x}" for k, x in v[1].items())


@pytest.mark.parametrize("variant", VARIANTS, ids=_ids)
def test_variant_takes_the_general_lowering_without_spills(variant):
    name, constants = variant
    k = tkjit.load(EXAMPLES / f"{name}.tk", constants=constants or None, cache=False, require_hopper=True)
    try:
        sass = k.asm["sass"]
    except NotAvailableError as e:
        if "require_hopper" in str(e):
            raise
        pytest.skip(str(e))
    assert k.metadata.get("lowering") == "general"
    assert re.search(r"\bHGMMA", sass) and "UTMALDG" in sass
    assert not re.search(r"\b(LDL|STL)\b", sass), "spilled"
    assert not [m for m in k.metadata["ptxas"]["messages"] if m["level"] == "warning"]


@pytest.mark.parametrize("bkv", [64, 80, 128])
def test_head_dim_256_takes_the_general_lowering_without_spills(bkv):
    """At D = 256 the key blocks (80, the example's, 64 and 128) fit beside O's 128 registers (the padding masks of the row
    reductions are only on edge tiles, so nothing spills); the compile log would name a spill."""
    k = tkjit.load(EXAMPLES / "attention_nol.tk", constants={"D": 256, "BKV": bkv}, cache=False)
    try:
        k.asm["sass"]
    except NotAvailableError as e:
        pytest.skip(str(e))
    assert k.metadata.get("lowering") == "general"
    assert "spills registers" not in str(k.explain())


def test_a_spill_is_reported_in_the_compile_log():
    """A kernel ptxas must spill (a register tile far over what one thread can hold, pinned to a
    small register budget) says so in explain(): which function and how many bytes."""
    text = (EXAMPLES / "attention_nol.tk").read_text().replace("@consumers(max(BQ / 64, 2))",
                                                                 "@consumers(max(BQ / 64, 2)) @regs(24, 128)")
    k = tkjit.compile(text, constants={"D": 256, "BKV": 128}, cache=False)
    try:
        k.asm["sass"]
    except NotAvailableError as e:
        pytest.skip(str(e))
    assert "spills registers to local memory" in str(k.explain())


SCHEDULED = [
    ("attention_exp", {"D": 64, "CAUSAL": True, "BKV": 64}, (1, 2, 1, 150)),
    ("attention_mask", {"D": 64, "BQ": 128, "BKV": 64}, (1, 2, 1, 150)),
    ("attention_f16", {"D": 64, "BQ": 128, "BKV": 64}, (1, 2, 2, 40)),
    ("attention_nol", {"D": 96, "CAUSAL": True}, (1, 2, 1, 150)),
    ("attention_bwd_dkdv", {"D": 64, "CAUSAL": True}, (1, 4, 2, 300)),
    ("attention_bwd_dkdv", {"D": 64}, (1, 1, 1, 40)),
    ("attention_bwd_dq", {"D": 64, "CAUSAL": True}, (1, 4, 2, 300)),
    ("attention_bwd_dq", {"D": 64}, (1, 1, 1, 40)),
]


@pytest.mark.parametrize("name,constants,shape", SCHEDULED, ids=lambda x: str(x))
def test_the_scheduled_roles_match_the_interpreter(name, constants, shape):
    k = tkjit.load(EXAMPLES / f"{name}.tk", constants=constants, cache=False)
    torch.manual_seed(0)
    args, outputs, refs = CASES[name].make(shape, constants)
    index = [next(i for i, a in enumerate(args) if a is out) for out in outputs]
    plain = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    k(*plain)
    for i, ref in zip(index, refs):
        got = plain[i].double()
        assert not torch.isnan(got).any()
        assert ((got - ref).norm() / ref.norm()).item() < 1e-2
    # The scheduled IR's own plain run: the schedules must give it bit for bit. It equals the
    # source-level run bit for bit too, except where scale-fold changed the base of an exp
    # (attention_exp: exp(x·c − m) as 2^(x·c·log2e − m·log2e) rounds differently).
    scheduled = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    interpreter.run(k.ir, scheduled)
    rebased = "taken in base 2 there" in str(k.explain())
    for i in index:
        a, b = scheduled[i].float(), plain[i].float()
        if rebased:
            assert ((a - b).norm() / b.norm()).item() < 2e-3
        else:
            assert torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0)), f"{name}: the passes changed the result"
    for seed in (0, 1):
        mine = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        run_roles(k.ir, mine, seed=seed)
        for i in index:
            assert torch.equal(mine[i].float().nan_to_num(7.0), scheduled[i].float().nan_to_num(7.0)), \
                f"{name}: schedule {seed} differs from the interpreter"


def test_chunked_linear_attention_takes_the_general_lowering():
    """The chunked causal linear attention (a D x D state carried in registers across the
    sequence, stored to shared memory each chunk as wgmma's B operand) is lowered: the copy is
    the protocol's TileWrite step (tests/test_linear_attention.py has the rest)."""
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "examples" / "linear_attention.tk"
    k = tkjit.load(path, lowering="general", require_hopper=True, cache=False)
    assert "// step: write tile s from registers; fence.proxy.async" in k.asm["ptx"]
