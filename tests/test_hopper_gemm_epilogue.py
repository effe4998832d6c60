"""The GEMM's deferred epilogue in the general lowering: which kernels take it and why (the
epilogue pass, passes/epilogue.py ``defer_choice``), and where the stores land in the PTX (after
the next tile's first wgmma group is issued, before that group is waited on: the protocol's
``IfHeld`` steps, lower_epilogue.py ``Deferred``)."""
from __future__ import annotations

import re

import pytest

import tkjit
from test_hopper_codegen import VARIANTS, gemm_source


def lowered(source: str):
    k = tkjit.compile(source, lowering="general", cache=False)
    return k.asm["ptx"], k


def overlap_decision(k):
    """The epilogue pass's word on the tile's store: (deferred?, why)."""
    mine = [d for d in k.decisions.decisions if d.pass_name == "epilogue"]
    staged = next(d for d in mine if d.decision.startswith("staged"))
    if staged.data["deferred"]:
        return True, staged.reason
    return False, next(d for d in mine if d.decision == "epilogue overlap: none").reason


def test_the_example_defers_its_stores_and_says_why():
    _, k = lowered(VARIANTS["example"])
    deferred, why = overlap_decision(k)
    assert deferred and "128 registers" in why and "(64)" in why
    assert "deferred to the next tile's first wgmma group" in k.explain()


@pytest.mark.parametrize("source, reason", [
    (gemm_source(bn=128, schedule="grid"), "one tile per CTA"),
    (gemm_source(annotations="@regs(72, 216)"), "exceed the"),
])
def test_kernels_that_do_not_defer_say_why(source, reason):
    _, k = lowered(source)
    deferred, why = overlap_decision(k)
    assert not deferred and reason in why
    assert "epilogue overlap: none" in k.explain()


def test_the_pass_option_turns_it_off():
    from tkjit.passes import default_pipeline
    k = tkjit.compile(VARIANTS["example"], lowering="general", cache=False,
                      pipeline=default_pipeline("sm_90a").replace("epilogue", "epilogue{defer=off}"))
    deferred, why = overlap_decision(k)
    assert not deferred and "defer=off" in why
    assert "no_pending_tile" not in k.asm["ptx"] and "stmatrix" in k.asm["ptx"]


def test_a_tiles_stores_sit_between_the_next_tiles_first_commit_and_its_wait():
    ptx, _ = lowered(VARIANTS["example"])
    body = ptx[ptx.index("wgmma.commit_group"):]
    before_wait = body[:body.index("wgmma.wait_group")]
    assert "stmatrix" in before_wait and "cp.async.bulk.tensor.2d.global.shared" in before_wait
    assert re.search(r"@!%p\d+ bra \$L_no_pending_tile", before_wait)  # only when a tile waits
