"""The general lowering's copying producer (codegen/hopper/lower_copy.py), on the CPU: rows TMA
cannot address (a loaded tensor's row not a multiple of 16 bytes, e.g. K = 700) in the variant a
launch with such rows compiles (option unaligned_rows). Its GPU test is
tests/gpu/test_general_lowering_gpu.py."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from general_corpus import BY_NAME
from test_general_lowering import sync_outside_the_protocol

import tkjit
from tkjit.errors import NotAvailableError
from tkjit.runtime.tensormap import row_multiples, tensor_map_encoders

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def copying(source: str, **options):
    """The variant with the copying producer of a kernel compiled with lowering='general'."""
    kernel = tkjit.compile(source, lowering="general", cache=False, **options)
    variant = kernel._with_unaligned_rows()
    assert variant is not None and variant.options.unaligned_rows
    return variant


@pytest.fixture(scope="module")
def gemm():
    return copying((EXAMPLES / "gemm.tk").read_text(), filename="gemm.tk")


def test_the_producer_copies_where_a_row_length_is_not_16_byte_units(gemm):
    ptx = gemm.asm["ptx"]
    assert gemm.metadata["lowering"] == "general" and "assumes_aligned_rows" not in gemm.metadata
    # the prologue tests K and N (A's and B's rows) once; TMA where both are multiples of 8 elements
    assert re.search(r"and\.b32 %r\d+, %r\d+, 7;\s+or\.b32 %r\d+, %r\d+, %r\d+;\s+"
                     r"and\.b32 %r\d+, %r\d+, 7;\s+or\.b32 %r\d+, %r\d+, %r\d+;\s+setp\.eq\.u32 %p\d+, %r\d+, 0;", ptx)
    copy_path, tma_path = ptx.split("$L_tma_producer")[1], ptx.split("$L_tma_producer")[2]
    assert "ld.global.nc.b16" in copy_path and "st.shared.b16" in copy_path
    assert "cp.async.bulk.tensor" not in copy_path.split("$L_producer_done")[0]
    assert "cp.async.bulk.tensor.2d.shared::cluster.global" in tma_path
    # one ring, two loads: one publish and one arrival per stage, after the second load
    assert copy_path.count("bar.sync 15, 128;") == 1 and copy_path.count("fence.proxy.async.shared::cta;") == 1
    assert re.search(r"bar\.sync 15, 128;\s+@%p\d+ mbarrier\.arrive\.shared::cta\.b64 _, \[%r\d+\];", copy_path)


def test_the_maps_say_fallback_and_the_launcher_takes_any_rows(gemm):
    gemm.asm["ptx"]
    params = gemm.metadata["params"]
    maps = [p for p in params if p["kind"] == "tensormap"]
    assert {m["tensor"] for m in maps} == {"A", "B"} and all(m["fallback"] for m in maps)
    from tkjit.runtime.launcher import parse_signature
    sig = parse_signature(params)
    encoders = tensor_map_encoders(params, len([p for p in params if p["kind"] != "tensormap"]), "gemm",
                                   encode=lambda *a: bytes(128))
    assert row_multiples(encoders, sig) == {}  # no named dim must be a multiple of 8 any more
    aligned = tkjit.load(EXAMPLES / "gemm.tk", cache=False, lowering="general")
    aligned.asm["ptx"]
    a_params = aligned.metadata["params"]
    a_encoders = tensor_map_encoders(a_params, len([p for p in a_params if p["kind"] != "tensormap"]), "gemm",
                                     encode=lambda *a: bytes(128))
    assert set(row_multiples(a_encoders, parse_signature(a_params))) == {"K", "N"}


def test_c_is_stored_from_registers_and_the_log_says_why(gemm):
    ptx = gemm.asm["ptx"]
    assert "stmatrix" not in ptx and "cp.async.bulk.tensor.2d.global.shared::cta" not in ptx
    assert "st.global" in ptx
    why = [d for d in gemm.decisions.decisions if d.decision == "epilogue: registers"]
    assert why and "16-byte" in why[0].reason


def test_nothing_spills_and_ptxas_does_not_warn(gemm):
    try:
        sass = gemm.asm["sass"]
    except NotAvailableError as e:
        pytest.skip(str(e))
    assert re.search(r"\bHGMMA", sass) and "UTMALDG" in sass and "LDG" in sass
    assert not re.search(r"\b(LDL|STL)\b", sass)
    assert not [m for m in gemm.metadata["ptxas"]["messages"] if m["level"] == "warning"]


@pytest.mark.parametrize("name", ["gemm_bias_relu", "linear", "gemm_alpha_beta", "gemm_atb", "two_loops",
                                  "gemm_fp8_scaled"])
def test_every_barrier_of_the_copy_path_is_a_protocol_step(name):
    case = BY_NAME[name]
    variant = copying(case.source, constants=case.constants or None)
    ptx = variant.asm["ptx"]
    assert "$L_tma_producer" in ptx
    stray = sync_outside_the_protocol(ptx, variant.async_ir)
    assert stray == []


def test_auto_takes_the_copying_producer_for_such_rows():
    """Under lowering='auto' the copying variant of a kernel the general lowering takes is the
    general lowering's too (its GPU tests passed, H200, 2026-11-27): no warning, no template, no
    register-tile fallback; its producer copies."""
    import warnings
    case = BY_NAME["gemm_bias_relu"]
    kernel = tkjit.compile(case.source, cache=False)
    kernel.asm["ptx"]
    assert kernel.metadata.get("lowering") == "general"
    variant = kernel._with_unaligned_rows()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        ptx = variant.asm["ptx"]
    assert variant.metadata.get("lowering") == "general"
    assert "$L_tma_producer" in ptx and "register-tile" not in ptx.splitlines()[0]


def test_a_batched_load_copies_from_the_matrix_its_leading_coordinate_selects():
    """bmm (rank-3 loads): the copy's source moves by b * M * K (A) and b * K * N (B) elements,
    in 64 bits, before the element loop; no register-tile fallback, lint clean, no spills."""
    import warnings
    case = BY_NAME["bmm"]
    kernel = tkjit.compile(case.source, lowering="general", require_hopper=True, cache=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        variant = kernel._with_unaligned_rows()
        ptx = variant.asm["ptx"]
    assert variant.metadata.get("lowering") == "general" and variant.options.unaligned_rows
    copy_path = ptx.split("$L_tma_producer")[1]
    # two loads, each: index = b; index *= extent; index *= extent; bytes; add to the base
    offsets = re.findall(r"cvt\.s64\.s32 (%rd\d+), %r\d+;\s+cvt\.u64\.u32 (%rd\d+), %r\d+;\s+"
                         r"mul\.lo\.s64 \1, \1, \2;\s+cvt\.u64\.u32 \2, %r\d+;\s+mul\.lo\.s64 \1, \1, \2;\s+"
                         r"shl\.b64 \1, \1, 1;\s+add\.s64 %rd\d+, %rd\d+, \1;", copy_path)
    assert len(offsets) == 2
    stray = sync_outside_the_protocol(ptx, variant.async_ir)
    assert stray == []
    try:
        sass = variant.asm["sass"]
    except NotAvailableError as e:
        pytest.skip(str(e))
    assert re.search(r"\bHGMMA", sass) and not re.search(r"\b(LDL|STL)\b", sass)


def test_what_the_copy_cannot_take_is_refused_at_its_op():
    """A strided view's rows: the copy reads rows as contiguous; require_hopper says why."""
    case = BY_NAME["gemm_bias_relu"]
    kernel = tkjit.compile(case.source, lowering="general", require_hopper=True, cache=False)
    variant = kernel._recompiled(strided=True, unaligned_rows=True)
    with pytest.raises(NotAvailableError, match=r"reads rows as contiguous"):
        variant.asm["ptx"]


def test_the_aligned_kernel_has_no_copy_path():
    k = tkjit.load(EXAMPLES / "gemm.tk", cache=False, lowering="general")
    ptx = k.asm["ptx"]
    assert "$L_tma_producer" not in ptx and "ld.global.nc.b16" not in ptx
    assert k.metadata["assumes_aligned_rows"]


def test_fp8_rows_are_tested_in_16_element_units():
    """e4m3 operands: TMA needs rows of 16 elements; the copy moves bytes (u8)."""
    case = BY_NAME["gemm_fp8_scaled"]
    variant = copying(case.source, constants=case.constants or None)
    ptx = variant.asm["ptx"]
    assert "and.b32" in ptx and re.search(r"and\.b32 %r\d+, %r\d+, 15;", ptx)
    assert "ld.global.nc.u8" in ptx and "st.shared.u8" in ptx


def test_a_split_k_variant_copies_its_share_of_the_trips():
    """@fill_sms's SPLIT = 2 variant (small shapes, e.g. 129x257x65): the copy path computes the
    loop variable from the CTA's first trip, as the TMA path does; no spills, lint clean."""
    variant = copying((EXAMPLES / "gemm.tk").read_text(), filename="gemm.tk",
                      constants={"BM": 64, "BN": 64, "SPLIT": 2})
    ptx = variant.asm["ptx"]
    assert ".reqnctapercluster 2" in ptx and "$L_tma_producer" in ptx
    copy_path = ptx.split("$L_tma_producer")[1]
    assert "%clusterid.x" in copy_path and re.search(r"mul\.lo\.s32 %r\d+, %r\d+, %r\d+;\s+sub\.s32", copy_path)
    assert sync_outside_the_protocol(ptx, variant.async_ir) == []
    try:
        sass = variant.asm["sass"]
    except NotAvailableError as e:
        pytest.skip(str(e))
    assert not re.search(r"\b(LDL|STL)\b", sass)
