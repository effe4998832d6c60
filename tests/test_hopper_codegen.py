"""The Hopper backend on the CPU, through the general lowering (codegen/hopper/lower.py) since the
GEMM template was deleted (2026-11-27): descriptors, the layout contract between TMA boxes and
wgmma descriptors (checked on a model of both, with the operands the lowering reads), the
protocol the kernel follows (explored by the checker), which kernels take the path and why the
others do not, and ptxas/SASS on the emitted PTX: HGMMA, UTMALDG and SYNCS present, no local
memory or spills, setmaxnreg honoured, wgmma not serialized."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import pytest

import tkjit
from tkjit.codegen.hopper import emit_hopper_ptx
from tkjit.codegen.hopper.copy import SWIZZLE_MASKS
from tkjit.codegen.hopper.lower_checks import a_operand, b_operand
from tkjit.codegen.hopper.wgmma import Operand, descriptor, encode_field
from tkjit.ir.ops import MMA_OPS
from tkjit.passes.hopper import wgmma_n
from tkjit.passes.mbarrier import schedule_of
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


def ir_of(source: str, pipeline: str | None = None):
    """The IR after the passes (the default pipeline, or ``pipeline``), for the general lowering."""
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
    """The operands the general lowering builds its descriptors from (lower_checks.a_operand /
    b_operand, offsets per k16 step, 64-row slab and wgmma-wide piece, as lower_consumer.wgmma
    adds them) read exactly the elements the producer's TMA boxes wrote."""
    (mma,) = [op for op in ir_of(VARIANTS[name]).walk() if isinstance(op, MMA_OPS)]
    ta, tb = mma.operands[0].type, mma.operands[1].type
    op_a, op_b = a_operand(mma), b_operand(mma)
    b_major = op_b.major
    n = wgmma_n(mma.result.type.cols, op_b.panel_cols if b_major == "MN" else 8)
    rng = np.random.default_rng(0)
    a = rng.integers(0, 1 << 30, (ta.rows, ta.cols))
    b = rng.integers(0, 1 << 30, (tb.rows, tb.cols))
    base_a, base_b = 0x2400 + 3 * 0xC000, 0x2400 + 3 * 0xC000 + 0x8000  # any stage, 1024-aligned
    smem: dict = {}
    tma_fill(a, op_a, base_a, smem)
    tma_fill(b, op_b, base_b, smem)
    bm, bn = mma.result.type.rows, mma.result.type.cols
    for ks in range(ta.cols // 16):
        for slab in range(bm // 64):
            desc = op_a.constant | encode_field(base_a)
            got = wgmma_read(desc + encode_field(op_a.offset(ks, 64 * slab)), "K", 64, op_a.span, smem)
            assert (got == a[64 * slab:64 * slab + 64, 16 * ks:16 * ks + 16]).all()
        for piece in range(bn // n):
            n0 = piece * n
            desc = op_b.constant | encode_field(base_b)
            got = wgmma_read(desc + encode_field(op_b.offset(ks, n0)), b_major, n, op_b.span, smem)
            want = b[16 * ks:16 * ks + 16, n0:n0 + n].T if b_major == "MN" else b[n0:n0 + n, 16 * ks:16 * ks + 16]
            assert (got == want).all()


# ------------------------------------------------------------------ the protocol

@pytest.mark.parametrize("name", ["example", "grid_f32_out"])
def test_the_emitted_protocol_passes_the_checker(name):
    """The mbarrier pass's protocol, the object the general lowering emits step by step."""
    report = check_protocol(schedule_of(ir_of(VARIANTS[name])).protocol)  # raises SyncError on any violation
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
    (ring,) = schedule_of(kernel.ir).protocol.rings
    assert ring.stages == PIPELINED_STAGES[name]


@pytest.mark.parametrize("name", ["example_bm64_bn256", "example_bm128_bn128", "example_bm64_bn64"])
def test_every_new_stage_count_passes_the_full_sync_check(name):
    """5, 6 and 8 stages: every trip count around the ring size (0, 1, s-1, s, s+1, 2s+1; one
    tile and three), every interleaving."""
    proto = schedule_of(ir_of(VARIANTS[name], HOPPER_PIPELINE)).protocol
    report = check_protocol(proto)
    assert proto.rings[0].stages in (5, 6, 8) and "no violation" in report.text()
    assert len(report.results) >= 12 and all(r.exhaustive for r in report.results)


# ------------------------------------------------------------------ which kernels take the path

def test_the_example_gemm_takes_the_hopper_path_through_the_compiler():
    kernel = tkjit.load(EXAMPLES / "gemm.tk", cache=False)
    assert "wgmma" in kernel.asm["ptx"] and "cp.async.bulk.tensor" in kernel.asm["ptx"]
    assert "codegen" in kernel.explain() and "backend: wgmma" in kernel.explain()


@needs_cuda_tools
def test_aligned_rows_are_assumed_and_the_variant_with_the_fallback_is_made_on_demand():
    """By default the GEMM assumes rows of whole 16-byte units: no copying producer and no
    register-store epilogue in its SASS (no LDG/STG, only TMA) and TMA-only tensor maps (so the
    launcher refuses other rows to the kernel object). The variant the kernel object makes for
    other rows (lower_copy.py) copies A and B where TMA cannot (fallback maps) and stores C from
    registers."""
    kernel = tkjit.load(EXAMPLES / "gemm.tk", cache=False)
    general = kernel._with_unaligned_rows()
    ops = {kk: set(re.findall(r"\b(LDG|STG|UTMALDG|UTMASTG)\b", kk.asm["sass"])) for kk in (kernel, general)}
    assert kernel.metadata["assumes_aligned_rows"] and "assumes_aligned_rows" not in general.metadata
    assert general is not None and general.options.unaligned_rows and general._with_unaligned_rows() is None
    maps = {kk: {e["tensor"]: e["fallback"] for e in kk.metadata["params"] if e["kind"] == "tensormap"}
            for kk in (kernel, general)}
    assert maps[kernel] == {"A": False, "B": False, "C": False} and maps[general] == {"A": True, "B": True}
    assert ops[kernel] == {"UTMALDG", "UTMASTG"}
    assert ops[general] == {"LDG", "STG", "UTMALDG"}
    constant_k = tkjit.compile(VARIANTS["example"].replace("[M, K]", "[M, 100]").replace("[K, N]", "[100, N]").replace(
        "K / BK", "100 / BK"),
                               filename="k100.tk", cache=False)
    assert "LDG" in constant_k.asm["sass"]  # a constant row length of 100 needs the copy: kept


@pytest.mark.parametrize("example, constants, reason", [  # (what auto keeps on the register-tile backend)
    ("attention_bwd_prep.tk", None, "the general lowering cannot take 'row_sum'"),
    ("attention_bwd_prep.tk", None, "a reduction in a kernel with no matrix product and no shared tile")])
def test_other_kernels_fall_back_with_a_reason(example, constants, reason):
    decisions: list = []
    ir = tkjit.load(EXAMPLES / example, cache=False, constants=constants).ir
    assert emit_hopper_ptx(ir, {}, decisions) is None
    assert decisions[0]["value"] == "mma.sync" and reason in decisions[0]["why"]
    assert "template" not in decisions[0]["why"]  # one route: the general lowering's reason alone


def test_refusals_name_what_does_not_fit():
    decisions: list = []
    assert emit_hopper_ptx(ir_of(gemm_source(bm=512, bn=64)), {}, decisions) is None
    assert "a 512-row tile: a TMA box has at most 256 rows" in decisions[0]["why"]
    assert decisions[0]["refusal"].op is not None


def test_other_targets():
    decisions: list = []
    assert emit_hopper_ptx(ir_of(VARIANTS["example"]), {"arch": "sm_80"}, decisions) is None
    assert "wgmma and setmaxnreg need sm_90a" in decisions[0]["why"]


def test_lowering_template_is_an_error_that_says_the_templates_are_gone():
    """Both templates were deleted on 2026-11-27: lowering='template' names what replaced them."""
    from tkjit.errors import TkError
    with pytest.raises(TkError, match="lowering 'template' is gone: the GEMM and attention templates "
                                      "were deleted on 2026-11-27"):
        tkjit.compile(VARIANTS["example"], lowering="template", cache=False)


def test_metadata_lists_the_tensor_maps_after_the_tensors():
    _, meta = emit_hopper_ptx(ir_of(VARIANTS["example"]))
    kinds = [p["kind"] for p in meta["params"]]
    assert kinds == ["global", "global", "global", "tensormap", "tensormap", "tensormap"]
    c_map, a_map, b_map = meta["params"][3:]  # the staged store's map first (lower.py)
    assert (a_map["param"], a_map["box"], a_map["swizzle"], a_map["fallback"]) == (0, [64, 128], 128, False)
    assert (b_map["param"], b_map["box"], b_map["fallback"]) == (1, [64, 64], False)
    assert (c_map["param"], c_map["box"], c_map["fallback"]) == (2, [64, 64], False)
    assert meta["block"] == [384, 1, 1] and meta["registers"] == [40, 232]
    assert meta["grid"] == [["min", ["mul", ["cdiv", ["dim", "M"], 128], ["cdiv", ["dim", "N"], 256]],
                             ["num_sms"]]]


# ------------------------------------------------------------------ ptxas and SASS

@functools.lru_cache(maxsize=None)
def assembled(name: str, pipeline: str | None = None):
    ptx, meta = emit_hopper_ptx(ir_of(VARIANTS[name], pipeline))
    cubin, report = toolchain.assemble(ptx, name=meta["name"])
    ops = set(re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", toolchain.sass(cubin)))
    return report, ops, meta


@needs_cuda_tools
@pytest.mark.parametrize("name, pipeline", [(name, None) for name in VARIANTS]
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
