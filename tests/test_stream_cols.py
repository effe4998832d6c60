"""stream-cols (a row-wise block program over column chunks) and the contiguous column order of
the register-tile backend, on the CPU: the pass's IR text in and out, the interpreter against
float64 torch on the examples as written at D = 4096 and 8192 (ragged row counts), the SASS of the
chosen paths (no spills, no local memory, 16-byte global accesses), explain() naming the choices,
and the kernels the pass cannot stream."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.compiler import compile
from tkjit.errors import DiagnosticError, PassError
from tkjit.ir.parser import parse_kernel
from tkjit.ir.printer import print_kernel
from tkjit.options import CompileOptions
from tkjit.passes import PassContext, PassManager, Pipeline

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

RMS_IR = """kernel @rms(%X: gl<bf16>[R, 4096], %W: gl<bf16>[4096], %Y: gl<bf16>[R, 4096], %eps: f32) {
  %R = dim {name = "R"} : i32
  %c16 = const {value = 16} : i32
  %0 = cdiv %R, %c16 : i32
  blocks %0 {
  ^(%i: i32):
    %c0 = const {value = 0} : i32
    %x = load %X, %i, %c0 : rt<f32>[16, 4096]
    %w = load %W, %c0 : rv<f32>[4096]
    %1 = mul %x, %x : rt<f32>[16, 4096]
    %2 = row_sum %1 : cv<f32>[16]
    %3 = rsqrt %2 : cv<f32>[16]
    %4 = mul_row %x, %3 : rt<f32>[16, 4096]
    %5 = mul_col %4, %w : rt<f32>[16, 4096]
    store %Y, %5, %i, %c0
  }
}
"""


def run_pass(text: str, pipeline: str = "stream-cols"):
    log_ctx = PassContext(CompileOptions.resolve())
    out = PassManager(Pipeline.parse(pipeline), verify_each=True).run(parse_kernel(text), log_ctx)
    return print_kernel(out), log_ctx.log


def check_lines(text: str, expected: list[str]) -> None:
    """Each expected line appears, in order (FileCheck's CHECK)."""
    at = 0
    lines = text.splitlines()
    for want in expected:
        while at < len(lines) and want not in lines[at]:
            at += 1
        assert at < len(lines), f"{want!r} not found in order in:\n{text}"
        at += 1


def test_rms_ir_streams_in_two_passes_with_the_reduction_carried():
    out, log = run_pass(RMS_IR, "stream-cols{cache=none}")
    check_lines(out, [
        "= zeros : cv<f32>[16]",
        "= for {stages = 2} %",
        "^(%c: i32, %acc: cv<f32>[16]):",
        "%x_s = load %X, %i, %c : st<bf16>[16, 512]",
        "%x = copy %x_s : rt<f32>[16, 512]",
        "row_sum", "= add %", "yield",
        "= rsqrt %",
        "for {stages = 2} %",
        "%chunk = sub %", "load %X, %i, %chunk : st<bf16>[16, 512]",
        "%w = load %W, %chunk : rv<f32>[512]",
        "mul_row", "mul_col", "store %Y,", "yield"])
    assert "4096]" not in out.split("blocks")[1].replace("gl<bf16>[R, 4096]", "")
    (d,) = [d for d in log if d.pass_name == "stream-cols" and d.subject == "@rms"]
    assert d.decision.startswith("streamed over 8 column chunks of 512 in 2 pass(es)")
    assert "needs 262,144 B of registers" in d.reason


def test_register_loads_are_software_pipelined_in_the_tensor_dtype():
    out, _ = run_pass(RMS_IR, "stream-cols{loads=registers order=forward cache=none}")
    check_lines(out, [
        "%x = load %X, %i, %",
        "for %", "%x_next: rt<bf16>[16, 512]):",
        "%next = min %", "load %X, %i, %next : rt<bf16>[16, 512]",
        "= cvt {dtype = \"f32\"} %x_next : rt<f32>[16, 512]", "row_sum", "yield"])


def test_a_program_whose_tiles_fit_is_left_alone():
    small = RMS_IR.replace("4096", "1024")
    out, log = run_pass(small, "stream-cols{cache=none}")
    assert out == print_kernel(parse_kernel(small))
    assert not [d for d in log if d.pass_name == "stream-cols"]


def test_a_product_of_a_wide_tile_is_not_streamed_and_says_why():
    text = """kernel @k(%X: gl<bf16>[R, 4096], %Y: gl<f32>[R, R]) {
  %R = dim {name = "R"} : i32
  %c16 = const {value = 16} : i32
  %0 = cdiv %R, %c16 : i32
  blocks %0 {
  ^(%i: i32):
    %c0 = const {value = 0} : i32
    %x = load %X, %i, %c0 : rt<bf16>[64, 4096]
    %y = mma_ABt %x, %x : rt<f32>[64, 64]
    store %Y, %y, %i, %i
  }
}
"""
    with pytest.raises(DiagnosticError, match="cannot be streamed over column chunks: 'mma_ABt'") as info:
        compile(text, CompileOptions.resolve(), filename="k.tkir")
    assert "rt<bf16>[64, 4096] needs 524288 bytes of registers" in info.value.message


def test_bad_options_are_errors():
    with pytest.raises(PassError, match="loads must be shared or registers"):
        run_pass(RMS_IR, "stream-cols{loads=tma}")


def _rms(x, w, eps):
    xd = x.double()
    return xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * w.double()


@pytest.mark.parametrize("pipeline", [None, "canonicalize,stream-cols{loads=registers}"])
@pytest.mark.parametrize("d", [4096, 8192])
def test_the_examples_as_written_agree_with_torch_on_the_interpreter(d, pipeline):
    torch.manual_seed(d)
    r = 5  # not a multiple of BR
    x = (torch.randn(r, d) * 2 + 0.5).bfloat16()
    res, w, b = torch.randn(r, d).bfloat16(), torch.randn(d).bfloat16(), torch.randn(d).bfloat16()
    y = torch.full((r, d), float("nan")).bfloat16()
    tkjit.load(EXAMPLES / "rmsnorm.tk", constants={"D": d}, pipeline=pipeline)(x, w, y, 1e-6)
    torch.testing.assert_close(y.double(), _rms(x, w, 1e-6), rtol=2e-2, atol=2e-2)
    h, y2 = torch.full_like(y, float("nan")), torch.full_like(y, float("nan"))
    tkjit.load(EXAMPLES / "residual_layernorm.tk", constants={"D": d}, pipeline=pipeline)(x, res, w, b, h, y2, 1e-5)
    hd = x.double() + res.double()
    torch.testing.assert_close(h.double(), hd, rtol=1e-2, atol=1e-2)
    ref = torch.nn.functional.layer_norm(hd, (d,), w.double(), b.double(), eps=1e-5)
    torch.testing.assert_close(y2.double(), ref, rtol=2e-2, atol=3e-2)


def _opcodes(sass: str) -> set[str]:
    return set(re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass))


def _compiled(name: str, d: int, pipeline: str | None = None):
    kernel = tkjit.load(EXAMPLES / f"{name}.tk", constants={"D": d}, pipeline=pipeline)
    try:
        sass = kernel.asm["sass"]
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no ptxas/cuobjdump here: {e}")
    fn = kernel.metadata["ptxas"]["functions"][0]
    assert fn["spill_store_bytes"] == fn["spill_load_bytes"] == fn["stack_frame_bytes"] == 0
    ops = _opcodes(sass)
    assert not {o for o in ops if o.startswith(("LDL", "STL"))}
    return kernel, ops


@pytest.mark.parametrize("name", ["rmsnorm", "residual_layernorm", "layernorm"])
def test_whole_rows_at_1024_load_and_store_16_bytes_a_lane_without_staging(name):
    kernel, ops = _compiled(name, 1024, "canonicalize,stream-cols{direct=true cache=none}")
    assert "LDG.E.128" in ops and "STG.E.128" in ops
    assert not {o for o in ops if o.startswith(("LDGSTS", "HMMA"))}
    assert kernel.metadata["smem_bytes"] <= 512  # only the cross-warp row reductions
    assert "column_order: contiguous" in str(kernel.explain())


@pytest.mark.parametrize("name", ["rmsnorm", "residual_layernorm"])
@pytest.mark.parametrize("d", [4096, 8192])
def test_streamed_examples_assemble_without_spills_and_explain_the_schedule(name, d):
    kernel, ops = _compiled(name, d)
    text = str(kernel.explain())
    assert "stream-cols" in text and "streamed over" in text and "chunk pass" in text
    assert "STG.E.128" in ops


def test_the_chunk_order_of_a_stream_is_the_passes_and_the_interpreter_runs_it():
    result = compile((EXAMPLES / "rmsnorm.tk").read_text(), CompileOptions.resolve(constants={"D": 4096}),
                     filename="rmsnorm.tk")
    assert print_kernel(result.portable_ir) == result.asm["after:stream-cols"]
    assert "blocks {cluster = 4} %" in result.asm["after:stream-cols"]  # cluster=auto: 4 slices of 1024


@pytest.mark.parametrize("name", ["rmsnorm", "residual_layernorm", "layernorm"])
def test_without_the_cache_whole_rows_keep_the_fragment_order_and_its_staged_loads(name):
    kernel, ops = _compiled(name, 1024, "canonicalize,stream-cols{cache=none}")
    assert "LDGSTS.E.BYPASS.128" in ops and "STG.E.128" in ops
    assert "column_order: fragment" in str(kernel.explain())


def test_register_chunk_loads_take_the_contiguous_order():
    kernel, ops = _compiled("rmsnorm", 4096, "canonicalize,stream-cols{loads=registers cache=none}")
    assert "LDG.E.128" in ops and not {o for o in ops if o.startswith("LDGSTS")}
    text = str(kernel.explain())
    assert "column_order: contiguous" in text and "straight between global memory and registers" in text


def test_a_named_width_with_a_ragged_last_chunk_and_a_tile_at_a_later_column():
    """The chunk coordinate is k * chunks + c for a tile at column coordinate k; a width that is a
    runtime size leaves the last chunk partly padding, which reductions skip and stores clip."""
    ragged = tkjit.compile("""
kernel rmsd(X: gl<bf16>[R, D], W: gl<bf16>[D], Y: gl<bf16>[R, D], eps: f32) {
  for i in blocks(R / 16) {
    x: rt<f32>[16, 4096] = X.tile(i, 0)
    w: rv<f32>[4096] = W.tile(0)
    Y.tile(i, 0) = mul_col(mul_row(x, rsqrt(row_sum(x * x) / 4000.0 + eps)), w)
  }
}""", filename="rmsd.tk")
    x, w = (torch.randn(5, 4000) * 2 + 0.5).bfloat16(), torch.randn(4000).bfloat16()
    y = torch.full((5, 4000), float("nan")).bfloat16()
    ragged(x, w, y, 1e-6)
    torch.testing.assert_close(y.double(), _rms(x, w, 1e-6), rtol=2e-2, atol=2e-2)
    later = tkjit.compile("""
kernel half2(X: gl<bf16>[R, 8192], Y: gl<bf16>[R, 8192]) {
  for i in blocks(R / 16) {
    x: rt<f32>[16, 4096] = X.tile(i, 1)
    Y.tile(i, 1) = sub_row(x, row_max(x))
  }
}""", filename="half2.tk")
    x = torch.randn(3, 8192).bfloat16()
    y = torch.full((3, 8192), float("nan")).bfloat16()
    later(x, y)
    right = x[:, 4096:].double()
    torch.testing.assert_close(y[:, 4096:].double(), right - right.max(-1, keepdim=True).values, rtol=1e-2, atol=1e-2)
    assert torch.isnan(y[:, :4096]).all()
    assert "2 pass(es)" in str(later.explain())
