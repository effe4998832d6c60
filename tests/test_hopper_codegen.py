"""The Hopper backend on the CPU: descriptors, the layout contract between TMA boxes and wgmma
descriptors (checked on a model of both), the protocol the kernel follows (explored by the
checker), which kernels take the path and why the others do not, and ptxas/SASS on the emitted
PTX: HGMMA, UTMALDG and SYNCS present, no local memory or spills, setmaxnreg honoured, wgmma
not serialized."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import pytest

import tkjit
from tkjit.codegen.hopper import emit_hopper_ptx, gemm_protocol, plan_gemm
from tkjit.codegen.hopper.copy import SWIZZLE_MASKS
from tkjit.codegen.hopper.plan import operand_a, operand_b
from tkjit.codegen.hopper.wgmma import Operand, descriptor, encode_field
from tkjit.passes.sync_check import check_protocol
from support import needs_cuda_tools

toolchain = pytest.importorskip("tkjit.runtime.toolchain")
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
HOPPER_PIPELINE = "canonicalize,layout,warp-spec,pipeline,smem-plan,mbarrier,reg-budget,grid"


def gemm_source(*, bm=128, bn=256, bk=64, abt=False, dtype="bf16", out="bf16", schedule="persistent, group = 8",
                annotations="", cvt=True) -> str:
    b_type = f"gl<{dtype}>[N, K]" if abt else f"gl<{dtype}>[K, N]"
    b_tile = f"st<{dtype}>[BN, BK] = B.tile(n, k)" if abt else f"st<{dtype}>[BK, BN] = B.tile(k, n)"
    value = f"cvt<{out}>(acc)" if cvt else "acc"
    return f"""{annotations}
kernel g(A: gl<{dtype}>[M, K], B: {b_type}, C: gl<{out}>[M, N]) {{
  const BM = {bm}, BN = {bn}, BK = {bk}
  for (m, n) in blocks(M / BM, N / BN) schedule({schedule}) {{
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {{
      a: st<{dtype}>[BM, BK] = A.tile(m, k)
      b: {b_tile}
      acc = {'mma_ABt' if abt else 'mma_AB'}(a, b, acc)
    }}
    C.tile(m, n) = {value}
  }}
}}
"""


def ir_of(source: str, pipeline: str = "canonicalize"):
    return tkjit.compile(source, pipeline=pipeline, cache=False).ir


VARIANTS = {
    "example": (EXAMPLES / "gemm.tk").read_text(),
    "abt": gemm_source(abt=True),
    "grid_f32_out": gemm_source(bn=128, schedule="grid", out="f32", cvt=False),
    "f16_bk128": gemm_source(dtype="f16", out="f16", bk=128, bn=128),
    "bk32_swizzle64": gemm_source(bk=32, bn=128),
    "bm256_two_slabs": gemm_source(bm=256, bn=128, annotations="@consumers(2)"),
    "bn64_one_consumer": gemm_source(bm=64, bn=64),
}
_EXAMPLE_DEFAULTS = "<BM = 128, BN = 256,"
for _bm, _bn in ((128, 128), (128, 64), (64, 256), (64, 128), (64, 64)):  # what @fill_sms may pick
    assert _EXAMPLE_DEFAULTS in VARIANTS["example"]
    VARIANTS[f"example_bm{_bm}_bn{_bn}"] = VARIANTS["example"].replace(_EXAMPLE_DEFAULTS,
                                                                       f"<BM = {_bm}, BN = {_bn},")


# ------------------------------------------------------------------ descriptors

def test_descriptor_matches_the_worked_example():
    """128x64 bf16 K-major SW128 at a 1024-aligned base: enc(base) | 1<<16 | 64<<32 | 1<<62."""
    base = 0x2400
    assert descriptor(base, 16, 1024, 128) == (base >> 4) | 1 << 16 | 64 << 32 | 1 << 62
    op = Operand("K", 128, 64, 128)
    assert op.constant | encode_field(base) == (base >> 4) | 1 << 16 | 64 << 32 | 1 << 62
    assert op.offset(0, 64) == 8192  # the second m64 half starts 8 KB further
    assert [op.offset(k, 0) for k in range(4)] == [0, 32, 64, 96]  # k16 steps inside the atom


def test_descriptor_fields():
    assert descriptor(0x3FFF0, 8192, 1024, 128) >> 62 == 1
    assert descriptor(0, 16, 512, 64) >> 62 == 2 and descriptor(0, 16, 256, 32) >> 62 == 3
    assert (descriptor(0x10, 8192, 1024, 128) >> 16) & 0x3FFF == 512
    assert encode_field(0x40000 + 0x20) == 2  # the 18-bit shared window wraps
    with pytest.raises(ValueError):
        encode_field(8)


# ------------------------------------------------------------------ TMA boxes vs wgmma descriptors

def swizzled(addr: int, span: int) -> int:
    return addr ^ (((addr >> 7) & SWIZZLE_MASKS[span]) << 4)


def tma_fill(tile: np.ndarray, op: Operand, base: int, smem: dict) -> None:
    """What TMA boxes of ``panel_cols`` x ``rows`` write: panel p holds columns p*W.. of every
    row, row r at +r*span, bytes swizzled by their absolute shared address."""
    for r in range(tile.shape[0]):
        for c in range(tile.shape[1]):
            panel, inner = divmod(c, op.panel_cols)
            smem[swizzled(base + panel * op.panel_bytes + r * op.span + 2 * inner, op.span)] = tile[r, c]


def wgmma_read(desc: int, major: str, mn: int, span: int, smem: dict) -> np.ndarray:
    """What wgmma reads through a descriptor: an mn x 16 operand (PTX canonical layouts)."""
    start, lbo, sbo = (desc & 0x3FFF) << 4, ((desc >> 16) & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4
    assert desc >> 62 == {128: 1, 64: 2, 32: 3}[span]
    out = np.zeros((mn, 16), dtype=np.int64)
    for i in range(mn):
        for j in range(16):
            if major == "K":
                addr = start + (i % 8) * span + (i // 8) * sbo + 2 * j
            else:
                width = span // 2
                addr = start + (i // width) * lbo + 2 * (i % width) + (j % 8) * span + (j // 8) * sbo
            out[i, j] = smem[swizzled(addr, span)]
    return out


@pytest.mark.parametrize("name", ["example", "abt", "bk32_swizzle64", "f16_bk128", "bm256_two_slabs"])
def test_every_wgmma_reads_the_right_elements(name):
    g, plan = plan_gemm(ir_of(VARIANTS[name]))
    rng = np.random.default_rng(0)
    a = rng.integers(0, 1 << 30, (g.bm, g.bk))
    b_rows, b_cols = (g.bk, g.bn) if g.b_major == "MN" else (g.bn, g.bk)
    b = rng.integers(0, 1 << 30, (b_rows, b_cols))
    op_a, op_b = operand_a(g, plan), operand_b(g, plan)
    stage = 3 * plan.stage_stride + 1024  # any stage, any 1024-aligned base
    smem: dict = {}
    tma_fill(a, op_a, stage + plan.a_offset, smem)
    tma_fill(b, op_b, stage + plan.b_offset, smem)
    for ks in range(g.bk // 16):
        for slab in range(g.bm // 64):
            desc = op_a.constant | encode_field(stage + plan.a_offset)
            got = wgmma_read(desc + encode_field(op_a.offset(ks, 64 * slab)), "K", 64, plan.span_a, smem)
            assert (got == a[64 * slab:64 * slab + 64, 16 * ks:16 * ks + 16]).all()
        for piece in range(g.bn // plan.wgmma_n):
            n0 = piece * plan.wgmma_n
            desc = op_b.constant | encode_field(stage + plan.b_offset)
            got = wgmma_read(desc + encode_field(op_b.offset(ks, n0)), g.b_major, plan.wgmma_n, plan.span_b, smem)
            want = b[16 * ks:16 * ks + 16, n0:n0 + plan.wgmma_n].T if g.b_major == "MN" \
                else b[n0:n0 + plan.wgmma_n, 16 * ks:16 * ks + 16]
            assert (got == want).all()


# ------------------------------------------------------------------ the protocol

@pytest.mark.parametrize("name", ["example", "grid_f32_out"])
def test_the_emitted_protocol_passes_the_checker(name):
    g, plan = plan_gemm(ir_of(VARIANTS[name]))
    report = check_protocol(gemm_protocol(g, plan))  # raises SyncError on any violation
    assert len(report.results) >= 6 and "no violation" in report.text()


# ------------------------------------------------------------------ stage counts through the passes

PIPELINED_STAGES = {"example": 4, "example_bm128_bn128": 6, "example_bm128_bn64": 8,
                    "example_bm64_bn256": 5, "example_bm64_bn128": 8, "example_bm64_bn64": 8}
"""The k loop's stages for each tile size @fill_sms may pick: as many as fit beside the epilogue's
staging, up to 8 (a 64x64 stage is 16 KiB: 13 would fit)."""


@pytest.mark.parametrize("name", list(PIPELINED_STAGES))
def test_the_pipeline_pass_gives_smaller_tiles_more_stages(name):
    kernel = tkjit.compile(VARIANTS[name], pipeline=HOPPER_PIPELINE, cache=False)
    (row,) = kernel.decisions.for_pass("pipeline")
    stages = PIPELINED_STAGES[name]
    assert row.data["stages"] == stages and row.decision.startswith(f"{stages} stage(s) of")
    capped = name in ("example_bm64_bn128", "example_bm64_bn64")  # 9 and 13 would fit
    assert row.reason.endswith(", capped at max-stages 8") == capped
    assert capped or f"leave room for {stages} stage(s)" in row.reason
    g, plan = plan_gemm(kernel.ir)
    assert plan.stages == PIPELINED_STAGES[name]


@pytest.mark.parametrize("name", ["example_bm64_bn256", "example_bm128_bn128", "example_bm64_bn64"])
def test_every_new_stage_count_passes_the_full_sync_check(name):
    """5, 6 and 8 stages: every trip count around the ring size (0, 1, s-1, s, s+1, 2s+1; one
    tile and three), every interleaving."""
    g, plan = plan_gemm(ir_of(VARIANTS[name], HOPPER_PIPELINE))
    report = check_protocol(gemm_protocol(g, plan))
    assert plan.stages in (5, 6, 8) and "no violation" in report.text()
    assert len(report.results) >= 12 and all(r.exhaustive for r in report.results)


# ------------------------------------------------------------------ which kernels take the path

def test_the_example_gemm_takes_the_hopper_path_through_the_compiler():
    kernel = tkjit.load(EXAMPLES / "gemm.tk", cache=False)
    assert "wgmma" in kernel.asm["ptx"] and "cp.async.bulk.tensor" in kernel.asm["ptx"]
    assert "codegen" in kernel.explain() and "backend: wgmma" in kernel.explain()


@needs_cuda_tools
def test_aligned_rows_are_assumed_and_the_variant_with_the_fallback_is_made_on_demand():
    """By default the GEMM assumes rows of whole 16-byte units: no copying producer and no
    register-store epilogue in its SASS (no LDG/STG, only TMA), TMA-only tensor maps (so the
    launcher refuses other rows to the kernel object) and the decision in the log. The variant
    the kernel object makes for other rows has both paths and fallback maps."""
    kernel = tkjit.load(EXAMPLES / "gemm.tk", cache=False, lowering="template")
    general = kernel._with_unaligned_rows()
    assert kernel.metadata["assumes_aligned_rows"] and "aligned rows: A, B, C" in kernel.explain()
    assert general is not None and general.options.unaligned_rows and general._with_unaligned_rows() is None
    maps = {kk: [e["fallback"] for e in kk.metadata["params"] if e["kind"] == "tensormap"] for kk in (kernel, general)}
    assert maps[kernel] == [False] * 3 and maps[general] == [True] * 3
    ops = {kk: re.findall(r"\b(LDG|STG|UTMALDG|UTMASTG)\b", kk.asm["sass"]) for kk in (kernel, general)}
    assert set(ops[kernel]) == {"UTMALDG", "UTMASTG"}
    assert {"LDG", "STG", "UTMALDG", "UTMASTG"} <= set(ops[general])
    constant_k = tkjit.compile(VARIANTS["example"].replace("[M, K]", "[M, 100]").replace("[K, N]", "[100, N]").replace(
        "K / BK", "100 / BK"),
                               filename="k100.tk", cache=False)
    assert "LDG" in constant_k.asm["sass"]  # a constant row length of 100 needs the copy: kept


def test_pass_annotations_are_used_when_present():
    g, plan = plan_gemm(ir_of(VARIANTS["example"], HOPPER_PIPELINE))
    assert plan.a_offset == g.load_a.attrs["smem"] and plan.bars == g.loop.attrs["bars"]
    assert any("from the smem-plan pass" in d["why"] for d in plan.decisions)
    assert any("from the layout pass" in d["why"] for d in plan.decisions)


@pytest.mark.parametrize("example, reason", [
    ("softmax.tk", "not the GEMM pattern"), ("layernorm.tk", "not the GEMM pattern")])
def test_other_kernels_fall_back_with_a_reason(example, reason):
    decisions: list = []
    ir = tkjit.load(EXAMPLES / example, cache=False).ir
    assert emit_hopper_ptx(ir, {}, decisions) is None
    assert decisions[0]["value"] == "mma.sync" and reason in decisions[0]["why"]


@pytest.mark.parametrize("source, reason", [
    (gemm_source(out="f32").replace("cvt<f32>", "cvt<bf16>"), "two roundings"),
    (gemm_source(bm=512, bn=64), "TMA box"),
    (gemm_source(bm=192, bn=64, annotations="@consumers(2)"), "cannot share"),
    (gemm_source().replace("A.tile(m, k)", "A.tile(m, 0)"), "tile coordinates"),
])
def test_refusals_name_what_does_not_fit(source, reason):
    assert reason in plan_gemm(ir_of(source))


def test_other_targets_and_the_off_switch():
    ir = ir_of(VARIANTS["example"])
    assert "sm_90a" in plan_gemm(ir, {"arch": "sm_80"})
    assert "turned off" in plan_gemm(ir, {"hopper": False})


def test_metadata_lists_the_tensor_maps_after_the_tensors():
    _, meta = emit_hopper_ptx(ir_of(VARIANTS["example"]))
    kinds = [p["kind"] for p in meta["params"]]
    assert kinds == ["global", "global", "global", "tensormap", "tensormap", "tensormap"]
    a_map, b_map, c_map = meta["params"][3:]
    assert (a_map["param"], a_map["box"], a_map["swizzle"]) == (0, [64, 128], 128)
    assert (b_map["param"], b_map["box"]) == (1, [64, 64])
    assert (c_map["param"], c_map["box"], c_map["fallback"]) == (2, [64, 64], True)
    assert meta["block"] == [384, 1, 1] and meta["registers"] == [40, 232]
    assert meta["grid"] == [["min", ["mul", ["cdiv", ["dim", "M"], 128], ["cdiv", ["dim", "N"], 256]],
                             ["num_sms"]]]


# ------------------------------------------------------------------ ptxas and SASS

@functools.lru_cache(maxsize=None)
def assembled(name: str, pipeline: str = "canonicalize"):
    ptx, meta = emit_hopper_ptx(ir_of(VARIANTS[name], pipeline))
    cubin, report = toolchain.assemble(ptx, name=meta["name"])
    ops = set(re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", toolchain.sass(cubin)))
    return report, ops, meta


@needs_cuda_tools
@pytest.mark.parametrize("name, pipeline", [(name, "canonicalize") for name in VARIANTS]
                         + [(name, HOPPER_PIPELINE) for name in PIPELINED_STAGES])
def test_assembles_with_hgmma_tma_and_mbarriers_and_no_spills(name, pipeline):
    report, ops, meta = assembled(name, pipeline)
    fn = report[meta["name"]]
    assert fn.spill_store_bytes == 0 and fn.spill_load_bytes == 0 and fn.stack_frame_bytes == 0, report.log
    assert not report.setmaxnreg_ignored(), report.log
    assert not {"C7517", "C7519"} & set(report.codes), report.log  # wgmma not serialized
    assert not report.warnings(), report.warnings()
    threads = meta["block"][0]
    assert fn.registers <= min(255, 65536 // threads) // 8 * 8  # the .maxnreg at entry
    producer, consumer = meta["registers"]  # the setmaxnreg counts fit what the CTA starts with
    assert 128 * producer + (threads - 128) * consumer <= fn.registers * threads
    for want in ("HGMMA", "UTMALDG", "SYNCS", "USETMAXREG"):
        assert any(o.startswith(want) for o in ops), f"{want} not in the SASS of {name}"
    assert not any(o.startswith(("LDL", "STL")) for o in ops), "local-memory traffic"
    if meta["params"][-1]["param"] == 2:  # C staged: stmatrix, then TMA stores
        assert any(o.startswith("STSM") for o in ops) and any(o.startswith("UTMASTG") for o in ops)
