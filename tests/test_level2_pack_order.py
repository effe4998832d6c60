"""Level 2's trip tail (codegen/hopper/interleave.py ``level2_parts`` / ``pack_at``): the ops that
read the carried tile (the rescale of the accumulator, mul_row(o, alpha)) come before the op that
packs the next product's register A (cvt<bf16>(p)), unless one of them reads the pack. ptxas keeps
that order; packed first, it interleaved the packs with the rescale in attention_nol and lost the
FMULs' operand reuse (issue 18: nol ran 0.974x of attention.tk at D = 128 causal N = 2048, H200,
benchmarks/results/2026-11-27-nvidia-h200-s16-nol-parity.json, ncu in ...-s16-nol-ncu-*)."""
from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

import tkjit
from tkjit.codegen.hopper.interleave import level2_parts, pack_at
from tkjit.passes.mbarrier import schedule_of

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def compiled(name: str, d: int = 128, causal: bool = True):
    return tkjit.compile((EXAMPLES / f"{name}.tk").read_text(), filename=f"{name}.tk",
                         constants={"D": d, "CAUSAL": causal}, lowering="general", cache=False)


def test_the_pack_goes_after_the_ops_that_do_not_read_it():
    p, o, alpha, packed, o2, o3 = (object() for _ in range(6))
    maker = SimpleNamespace(results=[packed], operands=[p])
    rescale = [SimpleNamespace(results=[o2], operands=[o, alpha]),
               SimpleNamespace(results=[o3], operands=[o2, alpha])]
    assert pack_at(maker, rescale) == 2
    reader = SimpleNamespace(results=[object()], operands=[o3, packed])
    assert pack_at(maker, rescale + [reader]) == 2       # before the op that reads it
    assert pack_at(maker, [reader] + rescale) == 0


@pytest.mark.parametrize("name", ["attention", "attention_nol"])
def test_the_rescale_comes_before_the_pack_in_the_trip(name):
    k = compiled(name)
    loop = schedule_of(k.ir).level2[0]
    _, _, work, rescale, second = level2_parts(loop)
    maker = second.operands[0].owner
    assert maker not in work and rescale[-1] is maker
    assert [type(op).__name__ for op in rescale] == ["MulRow", "Cvt"]
    # the PTX of the later trips: the line's mul_row, then its cvt, then the loop's back edge
    assert _tail_order(k.asm["ptx"]) == ["mul_row", "cvt"]


def _key_loop_tail(sass: str) -> list[str]:
    """The opcodes of the last basic block of the innermost loop holding an HGMMA."""
    ins = [(int(m.group(1), 16), m.group(2)) for m in
           re.finditer(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", sass)]
    best = None
    for at, text in ins:
        m = re.search(r"\bBRA (0x[0-9a-f]+)", text)
        if m and text.startswith("@") and int(m.group(1), 16) < at:
            body = [t for a, t in ins if int(m.group(1), 16) <= a <= at]
            if any("HGMMA" in t for t in body) and (best is None or len(body) < len(best)):
                best = body
    assert best is not None
    last = max(i for i, t in enumerate(best[:-1]) if "BRA" in t or "BSYNC" in t)
    return [t.split()[0] if not t.startswith("@") else t.split()[1] for t in best[last + 1:]]


def test_ptxas_keeps_the_packs_after_the_rescale_with_or_without_l():
    """Causal D = 128: the loop's tail is 64 FMULs (O *= alpha), then the 32 F2FP packs of P, in
    attention_nol as in attention.tk (before, nol's alternated F2FP and FMUL)."""
    tails = []
    for name in ("attention", "attention_nol"):
        try:
            sass = compiled(name).asm["sass"]
        except tkjit.errors.NotAvailableError as e:
            pytest.skip(str(e))
        ops = [op.split(".")[0] for op in _key_loop_tail(sass)]
        packs = [i for i, op in enumerate(ops) if op == "F2FP"]
        assert len(packs) == 32
        assert not [op for op in ops[packs[0]:packs[-1]] if op == "FMUL"], f"{name}: packs interleaved"
        tails.append([op for op in ops if op in ("FMUL", "F2FP")])
    assert tails[0] == tails[1]


def _tail_order(ptx: str) -> list[str]:
    body = ptx[ptx.index("$L_j_loop"):]
    body = body[:body.index("bra $L_j_loop")]
    return [m.group(1) for m in re.finditer(r"// (mul_row|cvt) at", body)][-2:]


def test_pack_first_keeps_the_old_order_and_says_so():
    from tkjit.passes import DEFAULT_PIPELINE
    first = DEFAULT_PIPELINE.replace("mbarrier,", "mbarrier{pack=first},")
    k = tkjit.compile((EXAMPLES / "attention_nol.tk").read_text(), filename="attention_nol.tk",
                      constants={"D": 128, "CAUSAL": True}, lowering="general", pipeline=first, cache=False)
    assert _tail_order(k.asm["ptx"]) == ["cvt", "mul_row"]
    assert "mbarrier{pack=first}: packed before the carried tile's rescale" in k.explain()
    assert "packed for the next trip after the carried tile's rescale" in compiled("attention_nol").explain()
    with pytest.raises(tkjit.errors.TkError, match="pack must be auto or first"):
        tkjit.compile((EXAMPLES / "attention_nol.tk").read_text(), filename="attention_nol.tk",
                      lowering="general", pipeline=DEFAULT_PIPELINE.replace("mbarrier,", "mbarrier{pack=last},"),
                      cache=False).asm["ptx"]


@pytest.mark.parametrize("d, causal, first", [(64, False, True), (64, True, False), (128, False, False),
                                              (128, True, False)])
def test_auto_packs_first_where_the_carried_tile_is_narrow_and_the_trips_uniform(d, causal, first):
    """pack=auto packs first where the carried tile is at most 64 columns and every tile runs the
    same trips (measured faster at D = 64 non-causal: mbarrier.PACK_FIRST_MEASURED), after elsewhere."""
    k = compiled("attention_nol", d, causal)
    (loop,) = [op for op in k.ir.walk() if op.NAME == "for" and "pack" in op.attrs] or [None]
    assert (loop is not None) == first
    (level2,) = [x for x in k.decisions.for_pass("mbarrier") if x.decision.startswith("level 2")]
    assert ("before the carried tile's rescale: its carried tile is at most 64 columns" in level2.reason) == first
