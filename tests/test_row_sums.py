"""row-sums (tkjit/passes/row_sums.py, in the default pipeline since session 12) on the attention
example through the general lowering: the decision, the quad shuffles it takes out of the loop,
and that the scheduled IR still runs to the interpreter's answer. IR in/out: tests/ir/row-sums/."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import tkjit
from tkjit.passes import DEFAULT_PIPELINE

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SOURCE = (EXAMPLES / "attention.tk").read_text()
ROW_SUMS = DEFAULT_PIPELINE
PLAIN = DEFAULT_PIPELINE.replace("row-sums,", "")


def general(d: int, causal: bool, **extra):
    return tkjit.compile(SOURCE, filename="attention.tk", constants={"D": d, "CAUSAL": causal},
                         lowering="general", cache=False, **extra)


def test_in_the_default_pipeline_after_layout_and_before_branch_tail():
    passes = DEFAULT_PIPELINE.split(",")
    assert passes.index("layout") < passes.index("row-sums") < passes.index("branch-tail")


@pytest.mark.parametrize("d,causal,copies", [(128, False, 12), (64, True, 4)])
def test_the_running_sum_keeps_its_shares_through_the_loop(d, causal, copies):
    k, plain = general(d, causal, pipeline=ROW_SUMS), general(d, causal, pipeline=PLAIN)
    assert "for at attention.tk:33:5: row sums of %l" in k.explain()
    loop = next(op for op in k.ir.walk() if op.NAME == "for")
    assert loop.attrs["partial_sums"] == (0,)
    shfl = len(re.findall(r"shfl\.sync\.bfly", k.asm["ptx"]))
    base = len(re.findall(r"shfl\.sync\.bfly", plain.asm["ptx"]))
    # per row_sum emitted, 4 shuffles fewer; 4 more after the loop. Non-causal: copies of the trip
    # (peeled, loop) x scale-fold's branch (then, else; branch-tail moved the sum in) x 3 (the
    # edge-versioned branch: whole tile; the edge copy's unmasked and masked sums). Causal (the
    # sum stays after the branch, which holds the causal if): (peeled, loop) x (unmasked, masked).
    assert shfl == base - 4 * copies + 4
    keep = ("setmaxnreg", "level 2", "stage(s)")
    assert [l for l in k.explain().splitlines() if any(w in l for w in keep) and "because" not in l] == \
        [l for l in plain.explain().splitlines() if any(w in l for w in keep) and "because" not in l]


def test_the_scheduled_ir_matches_the_interpreter():
    import torch
    from tkjit.interpreter.roles import run_roles
    k = general(64, True, pipeline=ROW_SUMS)
    torch.manual_seed(0)
    b, h, n, d = 1, 2, 150, 64
    q, kk, v = (torch.randn(b, h, n, d).bfloat16() for _ in range(3))
    args = [q, kk, v, torch.full((b, h, n, d), float("nan")).bfloat16(), torch.full((b, h, n), float("nan")),
            d ** -0.5]
    ref = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    k(*ref)
    mine = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    run_roles(k.ir, mine, seed=0)
    assert torch.equal(mine[3].float().nan_to_num(7.0), ref[3].float().nan_to_num(7.0))
    assert torch.equal(mine[4].nan_to_num(7.0), ref[4].nan_to_num(7.0))


def test_no_spills():
    try:
        sass = general(128, False, pipeline=ROW_SUMS).asm["sass"]
    except Exception as e:  # no ptxas / nvdisasm here
        pytest.skip(f"no SASS: {e}")
    assert not re.search(r"\b(LDL|STL)\b", sass)
