"""tile-split (tkjit/passes/tile_split.py) on whole kernels: which tiles it halves and why, what
warp-spec then gives them, and that the halved program means what the written one does (the
roles interpreter on the rewritten IR against the source-level interpreter, at ragged shapes).
Its IR in/out tests are tests/ir/tile-split/*.tkir."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.interpreter.roles import run_roles
from tkjit.ir.printer import print_kernel
from tkjit.passes import default_pipeline

from test_async_schedule import SEEDS, _async, _copy, _same
from unseen_corpus import GEMM_BM64_RESIDUAL, GEMM_SCALE_GATE

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
WHOLE = default_pipeline("sm_90a").replace("tile-split", "tile-split{mode=off}")

BMM_BIAS_GELU = """
kernel bmm_bias_gelu<BM = 128, BN = 256, BK = 64>(A: gl<bf16>[BATCH, M, K], B: gl<bf16>[BATCH, K, N],
                                                  Bias: gl<bf16>[BATCH, N], C: gl<bf16>[BATCH, M, N]) {
  for (b, m, n) in blocks(BATCH, M / BM, N / BN) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<bf16>[BM, BK] = A.tile(b, m, k)
      w: st<bf16>[BK, BN] = B.tile(b, k, n)
      acc = mma_AB(a, w, acc)
    }
    bias: rv<f32>[BN] = Bias.tile(b, n)
    C.tile(b, m, n) = cvt<bf16>(gelu(add_col(acc, bias)))
  }
}
"""
"""An unseen user kernel (benchmarks/probes/unseen/bmm_bias_gelu.tk): 128 x 256 tiles, erf gelu."""

TWO_OUT = """
kernel two_out(A: gl<bf16>[M, K], B: gl<bf16>[K, N], Bias: gl<bf16>[N], Pre: gl<bf16>[M, N], C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / 128, N / 256) {
    acc: rt<f32>[128, 256] = zeros()
    for k in 0 .. K / 64 {
      a: st<bf16>[128, 64] = A.tile(m, k)
      b: st<bf16>[64, 256] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    bias: rv<f32>[256] = Bias.tile(n)
    pre = add_col(acc, bias)
    Pre.tile(m, n) = cvt<bf16>(pre)
    C.tile(m, n) = cvt<bf16>(gelu_tanh(pre))
  }
}
"""


def _decision(k, pass_name: str):
    (d,) = k.decisions.for_pass(pass_name)
    return d


def test_a_wide_tile_with_a_costly_epilogue_is_halved_and_gets_ping_pong():
    k = tkjit.compile(BMM_BIAS_GELU, cache=False)
    d = _decision(k, "tile-split")
    assert d.decision == "tiles of 128 columns: %n walks cdiv(.., 128)"
    assert "epilogue ~17.5 warp cycles" in d.reason and "needs about 296 registers" in d.reason
    ir = k.asm["after:tile-split"]
    assert "cdiv %N, %c128" in ir and "rt<f32>[128, 128]" in ir and "rv<f32>[128]" in ir
    assert "st<bf16>[64, 128]" in ir and "st<bf16>[128, 64]" in ir  # B halved, A as written
    assert "[128, 256]" not in ir
    assert "ping-pong: 2 consumers, each computing whole 128x128 tiles" in _decision(k, "warp-spec").reason
    sass = k.asm["sass"]
    assert "HGMMA" in sass and not re.search(r"\b(LDL|STL)\b", sass)


def test_tile_split_off_keeps_the_tile_as_written():
    k = tkjit.compile(BMM_BIAS_GELU, cache=False, pipeline=WHOLE)
    assert not k.decisions.for_pass("tile-split")
    assert "rt<f32>[128, 256]" in k.asm["after:tile-split"]
    assert "cooperative, not ping-pong" in _decision(k, "warp-spec").reason


@pytest.mark.parametrize("source, consts", [(BMM_BIAS_GELU, None), (BMM_BIAS_GELU, {"BN": 128})],
                         ids=["split", "written-at-128"])
def test_the_halved_program_computes_what_the_written_one_does(source, consts):
    """The rewritten IR, parsed back and run as its roles in several interleavings, against the
    source-level interpreter of the kernel as written, at a batch of 2 and N = 300 (a half-width
    tile past N's end, and one that N ends inside)."""
    k = tkjit.compile(source, constants=consts, cache=False)
    parsed = _async(k)
    torch.manual_seed(0)
    bt, m, n, kk = 2, 130, 300, 96
    args = [torch.randn(bt, m, kk).bfloat16(), (torch.randn(bt, kk, n) / 4).bfloat16(),
            torch.randn(bt, n).bfloat16(), torch.full((bt, m, n), float("nan")).bfloat16()]
    ref = _copy(args)
    tkjit.compile(BMM_BIAS_GELU, cache=False, pipeline=WHOLE)(*ref)  # the program as written
    want = torch.nn.functional.gelu(ref[0].float() @ ref[1].float() + ref[2].float()[:, None, :])
    assert ((ref[3].float() - want).norm() / want.norm()).item() < 1e-2
    for seed in SEEDS:
        mine = _copy(args)
        run_roles(parsed, mine, seed=seed)
        assert _same((3,), mine, ref), f"schedule {seed} of the halved tile differs from the written one"


def test_two_stored_tiles_keep_the_tile_whole_and_say_why():
    d = _decision(tkjit.compile(TWO_OUT, cache=False), "tile-split")
    assert d.decision == "tile kept whole" and "it stores 2 tiles" in d.reason


@pytest.mark.parametrize("name, why", [("gemm_bias_gelu", "@fill_sms launches its own half-width variant"),
                                       ("gemm_fp8", "an epilogue under 8 cycles an element"),
                                       ("gemm_alpha_beta", "an epilogue under 8 cycles an element")])
def test_the_examples_keep_their_tiles(name, why):
    """@fill_sms picks the example's tile at launch; the fp8 scale and alpha-beta are below the
    measured threshold: none of the examples' programs change."""
    d = _decision(tkjit.load(EXAMPLES / f"{name}.tk", cache=False), "tile-split")
    assert d.decision == "tile kept whole" and why in d.reason


def test_a_bad_mode_is_an_error():
    with pytest.raises(tkjit.TkError, match="tile-split: mode must be auto, off"):
        tkjit.compile(BMM_BIAS_GELU, cache=False,
                      pipeline=default_pipeline("sm_90a").replace("tile-split", "tile-split{mode=on}"))


def test_cooperative_consumers_asked_for_keep_the_tile_whole():
    """warp-spec{mode=cooperative} asks for the tile as written: no split to then run cooperative."""
    pipeline = default_pipeline("sm_90a").replace("warp-spec", "warp-spec{mode=cooperative}")
    k = tkjit.compile(BMM_BIAS_GELU, cache=False, pipeline=pipeline)
    d = _decision(k, "tile-split")
    assert d.decision == "tile kept whole" and "warp-spec{mode=cooperative}" in d.reason
    assert "rt<f32>[128, 256]" in k.asm["after:tile-split"]


GATE = GEMM_SCALE_GATE
"""A user kernel whose 128 x 256 tile fits no consumer split (a per-column scale and a sigmoid gate
read as a second tile: about 288 registers a cooperative consumer thread): before this rule it
fell back to the mma.sync backend (0.4x)."""


def test_a_tile_no_consumer_split_holds_is_halved_not_sent_to_mma_sync():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning
        k = tkjit.compile(GATE, cache=False)
        sass = k.asm["sass"]
    d = _decision(k, "tile-split")
    assert d.decision == "tiles of 128 columns: %n walks cdiv(.., 128)" and d.data["split_for"] == "fit"
    assert "no consumer split holds the whole 128x256 tile (2: 288 registers needed > 240" in d.reason
    assert "rt<f32>[128, 128]" in k.asm["after:tile-split"] and "[128, 256]" not in k.asm["after:tile-split"]
    assert "backend: wgmma" in str(k.explain())
    assert "HGMMA" in sass and not re.search(r"\b(LDL|STL)\b", sass)
    with pytest.raises(tkjit.TkError, match="do not fit any consumer split"):  # what it was: declined
        tkjit.compile(GATE, cache=False, pipeline=WHOLE).asm["ptx"]


def test_the_halved_gate_computes_what_the_written_one_does():
    """The fit split's rewritten IR on the roles interpreter against the kernel as written (the
    source-level interpreter), at a ragged N whose last half-width tile is cut."""
    parsed = _async(tkjit.compile(GATE, cache=False))
    torch.manual_seed(1)
    m, n, kk = 130, 300, 96
    args = [torch.randn(m, kk).bfloat16(), (torch.randn(kk, n) / 4).bfloat16(), torch.randn(n),
            torch.randn(m, n).bfloat16(), torch.full((m, n), float("nan")).bfloat16()]
    ref = _copy(args)
    k = tkjit.compile(GATE, cache=False)
    assert "[128, 256]" in print_kernel(k._result.portable_ir)  # what the interpreter runs: the tile as written
    k(*ref)  # on CPU tensors: the interpreter runs the portable IR, the program as written
    want = (ref[0].float() @ ref[1].float()) * ref[2] * torch.sigmoid(ref[3].float())
    assert ((ref[4].float() - want).norm() / want.norm()).item() < 1e-2
    for seed in SEEDS:
        mine = _copy(args)
        run_roles(parsed, mine, seed=seed)
        assert _same((4,), mine, ref), f"schedule {seed} of the halved gate differs from the written one"


def test_a_64_row_tile_one_consumer_cannot_hold_is_halved_too():
    """The fit rule for any multiple of 64 rows, counted as warp-spec counts it (after layout: the
    bias vector in the wgmma fragment is 64 registers a thread, not 8)."""
    k = tkjit.compile(GEMM_BM64_RESIDUAL, cache=False)
    d = _decision(k, "tile-split")
    assert d.data["split_for"] == "fit" and "64x256 tile (1: 288 registers needed > 256)" in d.reason
    assert "rt<f32>[64, 128]" in k.asm["after:tile-split"] and k.metadata["backend"] == "wgmma"


# -- the third rule: a trip that reads its streamed tile into registers runs at twice the width ----
WIDEN_OFF = default_pipeline("sm_90a").replace("tile-split", "tile-split{widen=off}")


@pytest.mark.parametrize("name", ["rms_linear_read", "gemm_f32a", "gemm_fp8a"])
def test_a_trip_reading_its_streamed_tile_runs_at_twice_the_width(name):
    from unseen_corpus import BY_NAME
    k = tkjit.compile(BY_NAME[name].source, cache=False)
    text = k.asm["after:tile-split"]
    assert "cdiv %N, %c256" in text and re.search(r"load %\w+, %k, %n : st<bf16>\[\d+, 256\]", text), text
    explain = str(k.explain())
    assert "tiles of 256 columns: %n walks cdiv(.., 256)" in explain
    assert "into registers: that work is set by the tile's rows and K step" in explain
    assert k.metadata["lowering"] == "general"
    kept = tkjit.compile(BY_NAME[name].source, cache=False, pipeline=WIDEN_OFF)
    assert "cdiv %N, %c128" in kept.asm["after:tile-split"]


def test_a_tile_already_256_wide_and_a_plain_gemm_keep_their_width():
    from unseen_corpus import BY_NAME
    wide = tkjit.compile(BY_NAME["gemm_dequant_a"].source, cache=False)
    assert "columns: %n walks" not in str(wide.explain()) and "cdiv %N, %c256" in wide.asm["after:tile-split"]
    plain = tkjit.compile(BY_NAME["rms_linear_read"].source.replace(
        "      xr: rt<f32>[BM, BK] = x\n      ss = ss + row_sum(xr * xr)\n", ""), cache=False)
    assert "columns: %n walks" not in str(plain.explain()) and "cdiv %N, %c128" in plain.asm["after:tile-split"]


def test_pinned_consumers_keep_the_width_and_say_so():
    from unseen_corpus import BY_NAME
    src = "@consumers(2)\n" + BY_NAME["gemm_f32a"].source.lstrip()
    k = tkjit.compile(src, cache=False)
    assert "cdiv %N, %c128" in k.asm["after:tile-split"]
    assert "@consumers pins the consumers, so the tile is taken as written" in str(k.explain())


def test_a_bad_widen_option_is_named():
    with pytest.raises(tkjit.TkError, match="widen must be auto, off, got 'yes'"):
        tkjit.compile(GEMM_SCALE_GATE, cache=False,
                      pipeline=default_pipeline("sm_90a").replace("tile-split", "tile-split{widen=yes}"))


@pytest.mark.parametrize("name", ["rms_linear_read", "gemm_fp8a"])
def test_the_widened_program_means_what_the_written_one_does(name):
    """The roles interpreter on the rewritten, scheduled IR against the source-level interpreter,
    at the corpus's ragged CPU shape (columns not a multiple of either width)."""
    from unseen_corpus import BY_NAME
    case = BY_NAME[name]
    k = tkjit.compile(case.source, cache=False)
    assert "cdiv %N, %c256" in k.asm["after:tile-split"]
    torch.manual_seed(0)
    args = case.make(case.cpu_shape, "cpu")
    ref = _copy(args)
    k(*ref)
    for seed in SEEDS:
        mine = _copy(args)
        run_roles(k.ir, mine, seed=seed)
        assert _same(case.outputs, mine, ref), f"{name}: schedule {seed} differs from the interpreter"
