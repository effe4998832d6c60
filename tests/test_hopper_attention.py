"""The Hopper attention path on the CPU: the matcher, the plan (from the scheduling passes), the
protocol (explored by the sync checker), the PTX (ptxas assembles it: HGMMA, no local memory, no
spills, wgmma not serialized) and the fallbacks with their reasons."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from tkjit.codegen.hopper import attention_protocol, emit_hopper_ptx, match_attention, plan_attention
from tkjit.compiler import compile as compile_source
from tkjit.options import CompileOptions
from tkjit.passes.sync_check import check_protocol
from tkjit.runtime import toolchain
from support import needs_cuda_tools

SOURCE = (Path(__file__).resolve().parents[1] / "examples" / "attention.tk").read_text()
VARIANTS = [(d, causal) for d in (128, 64) for causal in (False, True)]


@functools.lru_cache(maxsize=None)
def ir_of(d: int = 128, causal: bool = False, source: str = SOURCE, pipeline: str | None = None):
    opts = CompileOptions.resolve(constants={"D": d, "CAUSAL": causal}, cache=False, pipeline=pipeline)
    return compile_source(source, opts, filename="attention.tk").ir


@pytest.mark.parametrize("d, causal", VARIANTS)
def test_the_example_matches(d, causal):
    m = match_attention(ir_of(d, causal))
    assert not isinstance(m, str), m
    assert (m.bq, m.bkv, m.d, m.causal) == (128, 128, d, causal)
    assert (m.q, m.k, m.v, m.o, m.l) == (0, 1, 2, 3, 4)


def test_the_plan_follows_the_passes():
    ir = ir_of(128, True)
    m, plan = plan_attention(ir)
    assert plan.consumers == ir.attrs["consumers"] and list(plan.regs) == list(ir.attrs["regs"])
    assert plan.stages == m.loop.attrs["stages"] and plan.bars == m.loop.attrs["bars"]
    assert plan.q_offset == m.q_load.attrs["smem"] and plan.smem_bytes == ir.attrs["smem"] + 1024
    assert plan.heavy_first
    log = {d["decision"]: d for d in plan.decisions}
    for what in ("consumers", "registers", "stages", "block size", "shared_memory", "block order"):
        assert what in log
    assert "reg-budget" in log["registers"]["why"] and "heaviest" in log["block order"]["value"]


@pytest.mark.parametrize("stages", [2, 3])
def test_the_protocol_passes_the_checker(stages):
    source = SOURCE.replace("@stages(2)", f"@stages({stages})")
    m, plan = plan_attention(ir_of(128, True, source))
    assert plan.stages == stages
    report = check_protocol(attention_protocol(m, plan))
    assert len(report.results) >= 5


def test_metadata():
    _, meta = emit_hopper_ptx(ir_of(128, False), {"arch": "sm_90a"})
    maps = [p for p in meta["params"] if p["kind"] == "tensormap"]
    assert [(p["param"], p["box"], p["swizzle"]) for p in maps] == [
        (0, [64, 128, 1, 1], 128), (1, [64, 128, 1, 1], 128), (2, [64, 128, 1, 1], 128)]
    assert meta["block"] == [384, 1, 1] and meta["backend"] == "wgmma"
    assert meta["grid"] == [["mul", ["mul", ["dim", "B"], ["dim", "H"]], ["cdiv", ["dim", "N"], 128]]]
    assert "ring kv" in meta["protocol"] and "one-shot" in meta["protocol"]


@functools.lru_cache(maxsize=None)
def assembled(d: int, causal: bool):
    ptx, meta = emit_hopper_ptx(ir_of(d, causal), {"arch": "sm_90a"})
    cubin, report = toolchain.assemble(ptx, name=meta["name"])
    sass = toolchain.sass(cubin)
    ops = re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass)
    return ptx, report, ops, meta


@needs_cuda_tools
@pytest.mark.parametrize("d, causal", VARIANTS)
def test_assembles_with_hgmma_and_no_local_memory(d, causal):
    ptx, report, ops, meta = assembled(d, causal)
    fn = report[meta["name"]]
    assert fn.spill_store_bytes == 0 and fn.spill_load_bytes == 0 and fn.stack_frame_bytes == 0, report.log
    assert not report.setmaxnreg_ignored(), report.log
    assert not {"C7517", "C7519"} & set(report.codes), report.log
    assert not {"LDL", "STL"} & {op.split(".")[0] for op in ops}
    hgmma = [op for op in ops if op.startswith("HGMMA")]
    assert len(hgmma) == 2 * (d // 16 + 128 // 16)  # S: D/16, P·V: BKV/16 k-steps; first trip peeled, last P·V after the loop
    assert any(op.startswith("UTMALDG.4D") for op in ops)
    assert ptx.count(f"m64n{d}k16") >= 8 and "}, {%r" in ptx  # P·V with P from registers (RS form)


def test_ptx_text_of_the_softmax():
    ptx, _ = emit_hopper_ptx(ir_of(128, True), {"arch": "sm_90a"})
    assert ptx.count("shfl.sync.bfly.b32") >= 8      # row max over the quad, row sums at the end
    assert "ex2.approx.ftz.f32" in ptx and "cvt.rn.bf16x2.f32" in ptx
    assert "setmaxnreg.dec.sync.aligned.u32 40" in ptx and "setmaxnreg.inc.sync.aligned.u32 232" in ptx


@pytest.mark.parametrize("edit, reason", [
    (("o = mma_AB(cvt<bf16>(p), v, mul_row(o, alpha))", "o = mma_AB(cvt<bf16>(p), v, o)"),
     "the accumulator of P·V must be 'mul_row'"),
    (("l = l * alpha + row_sum(p)", "l = l * alpha + row_max(p)"), "the new row sum's second term"),
    (("@consumers(2)", "@consumers(2)\n"), None),
])
def test_refusals_name_what_does_not_match(edit, reason):
    ir = ir_of(128, False, SOURCE.replace(*edit))
    decisions: list = []
    out = emit_hopper_ptx(ir, {"arch": "sm_90a"}, decisions)
    if reason is None:
        assert out is not None
        return
    assert out is None
    assert decisions[0]["value"] == "mma.sync" and "nor the attention pattern" in decisions[0]["why"]
    assert reason in decisions[0]["why"], decisions[0]["why"]


def test_without_the_scheduling_passes_it_falls_back_with_the_reason():
    decisions: list = []
    assert emit_hopper_ptx(ir_of(128, False, pipeline="canonicalize"), {"arch": "sm_90a"}, decisions) is None
    assert "scheduling passes" in decisions[0]["why"]
