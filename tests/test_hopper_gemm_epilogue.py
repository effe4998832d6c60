"""The GEMM's deferred epilogue (plan.py ``_deferred_epilogue``, gemm.py ``store_pending``): which
kernels take it and why, and where the stores land in the PTX (after the next tile's first
wgmma group is issued, before that group is waited on)."""
from __future__ import annotations

import re

import pytest

import tkjit
from tkjit.codegen.hopper import emit_hopper_ptx, plan_gemm
from test_hopper_codegen import HOPPER_PIPELINE, VARIANTS, gemm_source


def plan_of(source: str):
    _, plan = plan_gemm(tkjit.compile(source, pipeline=HOPPER_PIPELINE, cache=False).ir)
    return plan


def overlap_decision(plan) -> dict:
    return next(d for d in plan.decisions if d["decision"] == "epilogue overlap")


def test_the_example_defers_its_stores_and_says_why():
    plan = plan_of(VARIANTS["example"])
    assert plan.deferred_epilogue
    d = overlap_decision(plan)
    assert d["value"].startswith("deferred") and "128 registers" in d["why"] and "64" in d["why"]


@pytest.mark.parametrize("source, reason", [
    (gemm_source(bn=128, schedule="grid", out="f32", cvt=False), "no staging"),
    (gemm_source(annotations="@regs(72, 216)"), "over its 216"),
])
def test_kernels_that_do_not_defer_say_why(source, reason):
    plan = plan_of(source)
    assert not plan.deferred_epilogue
    assert reason in overlap_decision(plan)["why"]


def test_a_tiles_stores_sit_between_the_next_tiles_first_commit_and_its_wait():
    ptx, _ = emit_hopper_ptx(tkjit.compile(VARIANTS["example"], pipeline=HOPPER_PIPELINE, cache=False).ir,
                             {"lowering": "template"})
    body = ptx[ptx.index("wgmma.commit_group"):]
    before_wait = body[:body.index("wgmma.wait_group")]
    assert "stmatrix" in before_wait and "cp.async.bulk.tensor.2d.global.shared" in before_wait
    assert re.search(r"@!%p\d+ bra \$L_no_pending_tile", before_wait)  # only when a tile waits
    # The accumulators are packed once per tile (64 cvt for 128 f32 registers per thread) and
    # every stmatrix stores packed registers, never converting in the loop.
    stores = ptx.count("stmatrix")
    assert stores == 3 * 16  # in the loop, at a tile without K steps, after the last tile
