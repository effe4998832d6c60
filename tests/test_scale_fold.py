"""scale-fold (tkjit/passes/scale_fold.py) on whole kernels: what it decides for the attention
examples, that the folded program means what the written one does (the roles interpreter on the
scheduled IR against the source-level interpreter, for a positive and a negative scale), and the
FFMAs it buys in SASS. Its IR in/out tests are tests/ir/scale-fold/*.tkir."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import tkjit
from tkjit.ir.ops import If
from tkjit.ir.types import TileType
from tkjit.passes.liveness import consumer_pressure

from general_corpus import CASES

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SOURCE = (EXAMPLES / "attention.tk").read_text()
from tkjit.passes import default_pipeline  # noqa: E402

NO_FOLD = default_pipeline("sm_90a").replace("scale-fold,", "")


def general(d: int, causal: bool, source: str = SOURCE, **extra):
    return tkjit.compile(source, filename="attention.tk", constants={"D": d, "CAUSAL": causal},
                         lowering="general", cache=False, **extra)


def versioned_ifs(kernel) -> list[If]:
    return [op for op in kernel.walk() if isinstance(op, If) and op.attrs.get("fold") == "scale"]


def _variants():
    """Every example, the attention ones at D = 64 and 128, causal and not (where they take it)."""
    for path in sorted(EXAMPLES.glob("*.tk")):
        text = path.read_text()
        head = text[text.find("kernel "):text.find(">(")]
        ds = [64, 128] if re.search(r"\bD = ", head) and path.stem.startswith("attention") else [None]
        causal = [False, True] if re.search(r"\bCAUSAL = ", head) else [None]
        for d in ds:
            for c in causal:
                constants = {k: v for k, v in (("D", d), ("CAUSAL", c)) if v is not None}
                yield pytest.param(path.name, constants, id=f"{path.stem}-{constants}")


UP_TO_BRANCH_TAIL = "mask-branch,scale-fold,layout,row-sums,branch-tail"
"""scale-fold and the passes before it, and branch-tail, which moves ops into the fold's if."""


@pytest.mark.parametrize("lowering", ["auto", "general"])
@pytest.mark.parametrize("name,constants", list(_variants()))
def test_scale_fold_leaves_its_own_output_unchanged(name, constants, lowering):
    """Run on the text it printed, scale-fold finds its folds by the ``fold`` mark of their ifs:
    the folded branch is not folded again, nor the as-written one on its own scale."""
    from tkjit.frontend import lower_source
    from tkjit.ir.parser import parse_kernel
    from tkjit.ir.printer import print_kernel
    from tkjit.options import CompileOptions
    from tkjit.passes import PassContext, PassManager

    def schedule(kernel):
        ctx = PassContext(CompileOptions(lowering=lowering))
        return print_kernel(PassManager(UP_TO_BRANCH_TAIL, verify_each=True).run(kernel, ctx))

    once = schedule(lower_source((EXAMPLES / name).read_text(), name, constants))
    assert schedule(parse_kernel(once)) == once


@pytest.mark.parametrize("lowering", ["general", "auto"])
def test_the_attention_example_gets_the_folded_scale(lowering):
    k = tkjit.compile(SOURCE, filename="attention.tk", constants={"D": 64, "CAUSAL": True},
                      lowering=lowering, cache=False)
    text = k.explain()
    assert len(versioned_ifs(k.ir)) == 1
    assert "mul at attention.tk:36:11: folded into its readers when the scale is positive" in text
    assert "row_max at attention.tk:42:24, sub_row at attention.tk:43:16 read the raw tile" in text


def test_selects_against_inf_fold_and_others_are_left_as_written():
    """attention_window masks with select(d < 0, -inf, select(d >= w, -inf, s)): a select against
    a constant -inf commutes with a positive scale; against 0.0 it does not (the log says why)."""
    source = (EXAMPLES / "attention_window.tk").read_text()
    k = tkjit.compile(source, filename="attention_window.tk", lowering="general", cache=False)
    assert len(versioned_ifs(k.ir)) == 1
    assert "folded into its readers when the scale is positive" in k.explain()
    zero = source.replace("select(d < 0, -inf,", "select(d < 0, 0.0,")
    assert zero != source
    k = tkjit.compile(zero, filename="attention_window.tk", lowering="general", cache=False)
    assert versioned_ifs(k.ir) == []
    assert re.search(r"left as written\n\s+because a max/min reduction reads the scaled tile, but "
                     r"cmp_select at attention_window.tk:\d+:\d+ reads the scaled tile", k.explain())


def _sass_counts(k) -> dict:
    sass = k.asm["sass"]
    return {op: len(re.findall(rf"\b{op}\b", sass)) for op in ("FFMA", "FMUL", "LDL", "STL")}


@pytest.mark.parametrize("d,causal,scores", [(128, False, 88), (64, True, 64)])
def test_the_folded_branch_is_one_ffma_per_score(d, causal, scores):
    """ptxas contracts mul(raw, c) into the subtract: per softmax copy (the peeled first trip and
    the loop) one FFMA per score register of the thread, and the schedule is the unfolded one's."""
    try:
        folded, plain = general(d, causal), general(d, causal, pipeline=NO_FOLD)
        a, b = _sass_counts(folded), _sass_counts(plain)
    except Exception as e:  # no ptxas / nvdisasm here
        pytest.skip(f"no SASS: {e}")
    assert a["FFMA"] - b["FFMA"] >= 2 * scores
    assert a["LDL"] == a["STL"] == 0
    keep = ("setmaxnreg", "level 2", "stage(s)")
    assert [l for l in folded.explain().splitlines() if any(w in l for w in keep) and "because" not in l] == \
        [l for l in plain.explain().splitlines() if any(w in l for w in keep) and "because" not in l]


@pytest.mark.parametrize("scale", [0.125, -0.125, 0.0])
@pytest.mark.parametrize("name,constants,shape", [
    ("attention.tk", {"D": 64, "CAUSAL": True}, (1, 2, 2, 150)),
    ("attention_softcap.tk", {"D": 64}, (1, 2, 2, 150)),
    ("attention_window.tk", {"D": 64, "BQ": 128, "BKV": 64}, (1, 2, 1, 300)),
])
def test_the_folded_schedule_matches_the_interpreter_for_any_sign(name, constants, shape, scale):
    """The scheduled IR (with the branch) on the roles interpreter against the source-level
    interpreter: bit-equal (max(x)·c = max(x·c) in f32 for c > 0; the rest is the same ops)."""
    import torch
    from tkjit.interpreter.roles import run_roles
    source = (EXAMPLES / name).read_text()
    k = tkjit.compile(source, filename=name, constants=constants, lowering="general", cache=False)
    assert len(versioned_ifs(k.ir)) == 1
    torch.manual_seed(0)
    b, h, hkv, n = shape
    d = constants["D"]
    q = torch.randn(b, h, n, d).bfloat16()
    kk, v = (torch.randn(b, hkv, n, d).bfloat16() for _ in range(2))
    params = [p.hint for p in k.ir.params]
    args = {"Q": q, "K": kk, "V": v, "O": torch.full((b, h, n, d), float("nan")).bfloat16(),
            "L": torch.full((b, h, n), float("nan")), "softcap": 30.0, "window": 100}
    call = [args[p] if p in args else scale for p in params]
    ref = [a.clone() if isinstance(a, torch.Tensor) else a for a in call]
    k(*ref)
    mine = [a.clone() if isinstance(a, torch.Tensor) else a for a in call]
    run_roles(k.ir, mine, seed=1)
    for i, p in enumerate(params):
        if p in ("O", "L"):
            assert torch.equal(mine[i].float().nan_to_num(7.0), ref[i].float().nan_to_num(7.0)), p


def test_a_value_read_in_the_else_branch_is_not_live_in_the_then_branch():
    """branchy: ``out = sigmoid(acc)`` in one branch, ``acc * 2`` in the other. Whole 128x128
    tiles per consumer (ping-pong): sigmoid reads acc for the last time on its path, so it writes
    in place: 128 registers, not acc's 128 held through the then branch for the else's read."""
    case = next(c for c in CASES if c.name == "branchy")
    k = tkjit.compile(case.source, filename="branchy", constants=case.constants, lowering="general",
                      cache=False)
    assert consumer_pressure(k.ir, 1).peak == 128
    assert "ping-pong: 2 consumers" in k.explain()


@pytest.mark.parametrize("scale", [0.125, -0.125])
@pytest.mark.parametrize("causal", [False, True])
def test_a_base_e_softmax_takes_base_2_on_the_fold_and_means_the_same(scale, causal):
    """attention_exp: the folded branch yields x·(c·log2e) − m·log2e (the multiply by log2e per
    score is gone), the else branch its subtract times log2e, and the exp after the if is an exp2
    (outside the branch, as written); the scheduled IR on the roles interpreter agrees with the
    source-level interpreter to within float rounding (the change of base rounds differently)."""
    import torch
    from tkjit.interpreter.roles import run_roles
    from tkjit.ir.ops import Exp, Exp2
    name = "attention_exp.tk"
    k = tkjit.compile((EXAMPLES / name).read_text(), filename=name, lowering="general", cache=False,
                      constants={"D": 64, "CAUSAL": causal, "BQ": 128, "BKV": 64})
    (branch,) = versioned_ifs(k.ir)
    then, orelse = branch.regions
    # the scores' exp is an exp2 wherever it ended up: after the if, or in both branches once
    # branch-tail moved the trip's tail into them (the per-row exp of alpha stays exp)
    body = branch.parent
    tile_exps = [inner for op in body.ops[body.ops.index(branch):] for inner in op.walk()
                 if isinstance(inner, (Exp, Exp2)) and isinstance(inner.result.type, TileType)]
    assert tile_exps and all(isinstance(op, Exp2) for op in tile_exps)
    assert "taken in base 2 there" in k.explain()
    torch.manual_seed(3)
    b, h, n, d = 1, 2, 150, 64
    q, kk, v = (torch.randn(b, h, n, d).bfloat16() for _ in range(3))
    ref = [q, kk, v, torch.full((b, h, n, d), float("nan")).bfloat16(), scale]
    k(*ref)
    mine = [q, kk, v, torch.full((b, h, n, d), float("nan")).bfloat16(), scale]
    run_roles(k.ir, mine, seed=2)
    got, want = mine[3].float(), ref[3].float()
    assert not got.isnan().any()
    assert ((got - want).norm() / want.norm()).item() < 2e-3
