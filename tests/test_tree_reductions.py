"""Row/column reductions of the general lowering, with its option lower_consumer.TREE_REDUCTIONS
on, combine a thread's elements pairwise (codegen/emit_reduce.py ``_push``/``_drain``): depth
log2 n instead of one chain of n, and at most log2 n partial values live. Off by default (the
measurement is in the option's docstring): then the chain, as the register-tile backend."""
from __future__ import annotations

import re
from pathlib import Path

import tkjit
from tkjit.codegen.emit_reduce import _drain, _push

SOURCE = (Path(__file__).resolve().parents[1] / "examples" / "attention.tk").read_text()


class _Ctx:
    def __init__(self):
        self.n = 0

    def new(self, kind):
        self.n += 1
        return f"%t{self.n}"


def _combine(names: list[str]) -> tuple[str, list[str], int]:
    ctx, out, stack, peak = _Ctx(), [], [], 0
    for x in names:
        _push(ctx, "max", stack, x, out)
        peak = max(peak, len(stack))
    return _drain(ctx, "max", stack, out), out, peak


def _depth(result: str, out: list[str]) -> int:
    depth = {}
    for line in out:
        r, a, b = re.match(r"\S+ (\S+), (\S+), (\S+);", line).groups()
        depth[r] = 1 + max(depth.get(a, 0), depth.get(b, 0))
    return depth[result]


def test_eight_elements_combine_as_a_balanced_tree():
    r, out, _ = _combine([f"x{i}" for i in range(8)])
    assert out[:3] == ["max.f32 %t1, x0, x1;", "max.f32 %t2, x2, x3;", "max.f32 %t3, %t1, %t2;"]
    assert len(out) == 7 and _depth(r, out) == 3


def test_a_score_row_of_44_has_depth_6_and_few_live_partials():
    r, out, peak = _combine([f"x{i}" for i in range(44)])
    assert len(out) == 43            # n - 1 combines, as the chain
    assert _depth(r, out) == 6       # the chain's is 43
    assert peak <= 6                 # partials live at a time (the leaves are the tile's registers)


def _general():
    return tkjit.compile(SOURCE, filename="attention.tk", constants={"D": 128, "CAUSAL": False},
                         lowering="general", cache=False)


def test_the_general_lowering_logs_its_pairwise_reductions(monkeypatch):
    from tkjit.codegen.hopper import lower_consumer
    monkeypatch.setattr(lower_consumer, "TREE_REDUCTIONS", True)
    k = _general()
    ptx = k.asm["ptx"]
    text = k.explain()
    assert "row/column reductions: pairwise" in text
    assert "row_max at attention.tk:42:24, row_sum at attention.tk:45:23" in text
    monkeypatch.setattr(lower_consumer, "TREE_REDUCTIONS", False)
    chain = _general()
    assert "row/column reductions" not in chain.explain()
    assert chain.asm["ptx"] != ptx and len(chain.asm["ptx"]) == len(ptx)  # the same ops, reordered
