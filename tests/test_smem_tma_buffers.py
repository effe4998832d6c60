"""Shared memory the producer's TMA writes is never lent: on every example and corpus kernel the
general lowering takes, each ring and each tile loaded once per tile (all its slots) has bytes of
its own. A TMA copy lands whenever the producer issues it, ahead of the consumers, so two such
buffers sharing bytes would need a protocol step between them that smem-plan does not ask for
(a one-shot tile written after a ring loop once shared the ring's bytes: the GPU read it
half-overwritten). Staging tiles may still reuse them: the consumers write those after a meeting."""
from __future__ import annotations

from pathlib import Path

import pytest
from general_corpus import CASES

import tkjit
from tkjit.ir.ops import For, Load
from tkjit.passes.hopper import is_shared
from tkjit.passes.smem_buffers import one_shot_bytes

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
GEMM_LIKE = ["gemm", "gemm_bias_gelu", "bmm", "gemm_alpha_beta", "gemm_atb", "gemm_fp8", "mlp",
             "attention", "attention_nol", "attention_window", "attention_bwd_dkdv", "linear_attention"]


def tma_ranges(kernel) -> list[tuple[int, int, str]]:
    """(first byte, end, what) of every ring and every one-shot tile of the scheduled kernel."""
    out = []
    for op in kernel.walk():
        if isinstance(op, For) and "stage_stride" in op.attrs:
            loads = [ld for ld in op.regions[0].ops if isinstance(ld, Load) and is_shared(ld.result)]
            lo = min(ld.attrs["smem"] for ld in loads)
            out.append((lo, lo + op.attrs["stages"] * op.attrs["stage_stride"], f"ring at {op.span.location()}"))
    for op in kernel.walk():
        if isinstance(op, Load) and is_shared(op.result) and "bars" in op.attrs:
            out.append((op.attrs["smem"], op.attrs["smem"] + one_shot_bytes(op), f"%{op.result.hint}"))
    return out


def _check(kernel) -> None:
    ranges = sorted(tma_ranges(kernel))
    assert ranges, "no TMA buffer found: the test would check nothing"
    for (lo1, hi1, a), (lo2, hi2, b) in zip(ranges, ranges[1:]):
        assert hi1 <= lo2, f"{a} [{lo1}, {hi1}) and {b} [{lo2}, {hi2}) share bytes"


@pytest.mark.parametrize("lowering", ["auto", "general"])   # general: persistent one-shot slots
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_corpus_tma_buffers_have_bytes_of_their_own(case, lowering):
    k = tkjit.compile(case.source, constants=case.constants or None, lowering=lowering, cache=False)
    _check(k.ir)


@pytest.mark.parametrize("name", GEMM_LIKE)
def test_example_tma_buffers_have_bytes_of_their_own(name):
    k = tkjit.load(EXAMPLES / f"{name}.tk", lowering="general", cache=False)
    _check(k.ir)
