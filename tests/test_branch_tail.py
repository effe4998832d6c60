"""branch-tail (tkjit/passes/branch_tail.py) and one edge branch a region
(lower_consumer.EDGE_REGIONS, emit_reduce.edge_versioned) on the attention examples through the
general lowering: the decisions, and what they buy in SASS -- a whole-tile trip's softmax (row
max, scaled subtract, exp2, row sum) in one basic block that ptxas interleaves, as the attention
template's is, where the session-11 code split it into four (88 FFMA, then 90 MUFU, then 86 FADD
at D = 128, each its own block). IR in/out: tests/ir/branch-tail/."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import tkjit
from tkjit.codegen.hopper import lower_consumer
from tkjit.passes import DEFAULT_PIPELINE

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PREVIOUS = DEFAULT_PIPELINE.replace("row-sums,", "").replace("branch-tail,", "")


def compile_(name: str, d: int, causal: bool = False, **extra):
    source = (EXAMPLES / name).read_text()
    return tkjit.compile(source, filename=name, constants={"D": d, "CAUSAL": causal},
                         lowering="general", cache=False, **extra)


def sass_of(k) -> str:
    try:
        return k.asm["sass"]
    except Exception as e:  # no ptxas / nvdisasm here
        pytest.skip(f"no SASS: {e}")


def basic_blocks(sass: str) -> list[list[str]]:
    """The SASS split at branches and at branch targets: each block's opcodes."""
    ins = [(int(a, 16), t.strip()) for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)]
    targets = {int(t, 16) for _, text in ins for t in re.findall(r"\bBRA(?:\.\S+)? (0x[0-9a-f]+)", text)}
    blocks, cur = [], []
    for addr, text in ins:
        if addr in targets and cur:
            blocks.append(cur)
            cur = []
        op = re.sub(r"^@!?U?P\w+\s+", "", text).split()[0]
        cur.append(op)
        if op.startswith(("BRA", "EXIT", "RET")):
            blocks.append(cur)
            cur = []
    return blocks + [cur]


def softmax_blocks(sass: str, scores: int) -> list[dict]:
    """Blocks holding at least ``scores`` MUFU.EX2 and as many FMNMX, FFMA and FADD: a trip's whole
    softmax (max, subtract, exp2, sum) of ``scores`` elements a thread."""
    out = []
    for block in basic_blocks(sass):
        n = {op: sum(1 for o in block if o.startswith(op)) for op in ("MUFU.EX2", "FMNMX", "FFMA", "FADD")}
        if all(v >= scores for v in n.values()):
            out.append(n)
    return out


@pytest.mark.parametrize("name,d,scores", [("attention.tk", 128, 88), ("attention.tk", 64, 64),
                                           ("attention_nol.tk", 128, 88)])
def test_the_whole_tile_softmax_is_one_basic_block(name, d, scores, monkeypatch):
    now = sass_of(compile_(name, d))
    assert softmax_blocks(now, scores), "no basic block holds a whole trip's softmax"
    monkeypatch.setattr(lower_consumer, "EDGE_REGIONS", False)
    before = sass_of(compile_(name, d, pipeline=PREVIOUS))
    assert softmax_blocks(before, scores) == []  # the session-11 code: split at every join


@pytest.mark.parametrize("d,causal", [(128, False), (64, False), (128, True), (64, True)])
def test_no_spills(d, causal):
    sass = sass_of(compile_("attention.tk", d, causal))
    assert not re.search(r"\b(LDL|STL)\b", sass)


def test_the_decisions_are_logged():
    text = compile_("attention.tk", 128).explain()
    assert re.search(r"if at attention.tk:\d+:\d+: 6 op\(s\) after it moved into both branches", text)
    assert "padding masks: one edge branch a region" in text
    assert "row sums of %l kept per thread" in text


@pytest.mark.parametrize("d", [64, 128])
def test_a_branch_holding_an_if_keeps_its_tail_and_a_branch_a_reduction(d):
    """The causal trip's scale-fold branch holds the causal-mask if: its tail stays after the join
    (measured slower moved in at D = 128), and the branch (row_max and the causal if) is not
    copied under one edge branch (copying the if spilled at D = 64): its reduction keeps its own."""
    text = compile_("attention.tk", d, True).explain()
    assert "moved into both branches" not in text
    assert re.search(r"if at attention.tk:\d+:\d+: the ops after it stay after its join", text)
    assert "one edge branch a region" not in text
    assert "padding masks: edge tiles only" in text
