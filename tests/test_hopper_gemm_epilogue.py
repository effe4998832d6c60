"""The GEMM's deferred epilogue in the general lowering (lower_epilogue.py ``Deferred``,
``defer_choice``): which kernels take it and why, and where the stores land in the PTX (after the
next tile's first wgmma group is issued, before that group is waited on)."""
from __future__ import annotations

import re

import pytest

from tkjit.codegen.hopper import emit_hopper_ptx
from test_hopper_codegen import HOPPER_PIPELINE, VARIANTS, gemm_source, ir_of


def lowered(source: str):
    return emit_hopper_ptx(ir_of(source, HOPPER_PIPELINE), {"lowering": "general"})


def overlap_decision(meta) -> dict:
    return next(d for d in meta["decisions"] if d["decision"] == "epilogue overlap")


def test_the_example_defers_its_stores_and_says_why():
    _, meta = lowered(VARIANTS["example"])
    d = overlap_decision(meta)
    assert d["value"] == "deferred to the next tile's first wgmma group"
    assert "128 registers" in d["why"] and "64" in d["why"]


@pytest.mark.parametrize("source, reason", [
    (gemm_source(bn=128, schedule="grid"), "one tile per CTA"),
    (gemm_source(annotations="@regs(72, 216)"), "exceed the"),
])
def test_kernels_that_do_not_defer_say_why(source, reason):
    _, meta = lowered(source)
    d = overlap_decision(meta)
    assert d["value"] == "none" and reason in d["why"]


def test_a_tiles_stores_sit_between_the_next_tiles_first_commit_and_its_wait():
    ptx, _ = lowered(VARIANTS["example"])
    body = ptx[ptx.index("wgmma.commit_group"):]
    before_wait = body[:body.index("wgmma.wait_group")]
    assert "stmatrix" in before_wait and "cp.async.bulk.tensor.2d.global.shared" in before_wait
    assert re.search(r"@!%p\d+ bra \$L_no_pending_tile", before_wait)  # only when a tile waits
