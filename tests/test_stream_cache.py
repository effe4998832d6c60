"""stream-cols{cache=shared}: a row block that more than one pass reads is loaded whole into a
shared tile before the first pass and each pass copies its chunks from there (``copy_cols``),
instead of loading them again from global memory. The op (verifier, interpreter), the IR the pass
writes, its decision and its refusals, and the register-tile backend's PTX on the simulator at a
ragged row count with poisoned outputs (docs/codegen.md)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tkjit
from simkit import simulate
from test_stream_cols import RMS_IR, check_lines, run_pass
from tkjit.errors import PassError, TkError
from tkjit.ir.parser import parse_kernel

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

COPY_COLS_IR = """kernel @cc(%X: gl<bf16>[R, 256], %Y: gl<f32>[R, 64]) {
  %R = dim {name = "R"} : i32
  %c16 = const {value = 16} : i32
  %0 = cdiv %R, %c16 : i32
  blocks %0 {
  ^(%i: i32):
    %c0 = const {value = 0} : i32
    %c2 = const {value = 2} : i32
    %s = load %X, %i, %c0 : st<bf16>[16, 256]
    %x = copy_cols %s, %c2 : %TYPE
    store %Y, %x, %i, %c0
  }
}
"""


def test_copy_cols_reads_the_chunk_on_the_interpreter_and_the_simulated_ptx():
    kernel = tkjit.compile(COPY_COLS_IR.replace("%TYPE", "rt<f32>[16, 64]"), filename="cc.tkir")
    x = torch.randn(21, 256).bfloat16()
    y = torch.full((21, 64), float("nan"))
    kernel(x, y)
    torch.testing.assert_close(y, x[:, 128:192].float(), rtol=0, atol=0)
    (got,) = simulate(kernel.ir, [x, torch.full((21, 64), float("nan"))], [1],
                      ptx_meta=(kernel.asm["ptx"], kernel.metadata))
    torch.testing.assert_close(got, x[:, 128:192].float(), rtol=0, atol=0)


@pytest.mark.parametrize("bad, why", [("rt<f32>[16, 48]", "not a column chunk"),
                                      ("rt<f32>[32, 64]", "not a column chunk"),
                                      ("st<bf16>[16, 64]", "into a register tile")])
def test_copy_cols_is_verified(bad, why):
    with pytest.raises(TkError, match=why):
        parse_kernel(COPY_COLS_IR.replace("%TYPE", bad))


def test_cache_loads_the_row_block_once_and_every_pass_copies_its_chunks():
    out, log = run_pass(RMS_IR, "stream-cols{cache=shared}")
    check_lines(out, [
        "%x_row = load %X, %i, %c0 : st<bf16>[16, 4096]",
        "= for %",  # no pipelined loads left in the loop: no stages
        "%x = copy_cols %x_row, %c : rt<f32>[16, 512]",
        "row_sum", "yield",
        "%w = load %W, %", "= for %",  # the vector of the first trip, then each trip loads the next
        "%w_next: rv<f32>[512]):",
        "= load %W, %next : rv<f32>[512]",
        "copy_cols %x_row, %chunk : rt<f32>[16, 512]",
        "mul_col", "store %Y,", "yield"])
    assert out.count("load %X") == 1 and "stages" not in out
    (d,) = [d for d in log if d.pass_name == "stream-cols" and d.decision.startswith("row blocks kept")]
    assert d.decision == "row blocks kept in shared memory: %x" and "131,072 B" in d.reason


def test_a_row_block_over_the_budget_keeps_its_first_chunks_and_re_reads_the_rest():
    out, log = run_pass(RMS_IR.replace("4096", "8192"), "stream-cols{cache=shared}")
    check_lines(out, [
        "%x_row = load %X, %i, %c0 : st<bf16>[16, 5120]",    # 10 of 16 chunks: 160 KB
        "= const {value = 10} : i32", "= for %", "copy_cols %x_row, %c :", "row_sum",
        "for {stages = 2} %", "%chunk = add %", "load %X, %i, %chunk : st<bf16>[16, 512]", "row_sum",
        "rsqrt",
        "for {stages = 2} %", "= const {value = 15} : i32", "load %X, %i, %chunk.1 : st<bf16>[16, 512]",
        "store %Y,",  # backward: the re-read chunks first (the pass before read them last)
        "= for %", "= const {value = 9} : i32", "copy_cols %x_row, %chunk.2", "store %Y,"])
    (d,) = [d for d in log if d.pass_name == "stream-cols" and d.decision.startswith("row blocks kept")]
    assert d.decision == "row blocks kept in shared memory: %x (chunks 0..9 of 16)"
    assert "the first 10 of 16 chunks (163,840 B" in d.reason
    out, log = run_pass(RMS_IR.replace("4096", "8192"), "stream-cols{cache=shared cache_bytes=8192}")
    assert "copy_cols" not in out and out.count("load %X") == 2
    (d,) = [d for d in log if d.pass_name == "stream-cols" and d.decision.startswith("row blocks re-read")]
    assert "16,384 B, over the 8,192 B kept" in d.reason
    with pytest.raises(PassError, match="cache must be"):
        run_pass(RMS_IR, "stream-cols{cache=registers}")


@pytest.mark.parametrize("name", ["rmsnorm", "residual_layernorm"])
def test_a_partly_cached_stream_agrees_with_torch_on_the_simulated_ptx(name):
    r, d = 21, 1024  # 4 chunks of 256, the first 2 (rmsnorm) or 1 (two tensors) cached
    kernel = tkjit.load(EXAMPLES / f"{name}.tk",
                        pipeline="canonicalize,stream-cols{force=true cache=shared cols=256 cache_bytes=16384}")
    assert "chunks 0.." in str(kernel.explain())
    args, index, refs = _norm_case(name, r, d, seed=1)
    got = simulate(kernel.ir, args, index, ptx_meta=(kernel.asm["ptx"], kernel.metadata))
    for g, ref in zip(got, refs):
        assert not torch.isnan(g).any(), "an output element was never written"
        assert ((g.double() - ref).norm() / ref.norm()).item() < 1e-2
    args, index, refs = _norm_case(name, r, d, seed=1)
    kernel(*args)
    for i, ref in zip(index, refs):
        assert ((args[i].double() - ref).norm() / ref.norm()).item() < 1e-2


def _norm_case(name, r, d, seed=0):
    torch.manual_seed(seed)
    x = (torch.randn(r, d) * 2 + 0.5).bfloat16()
    res, w, b = torch.randn(r, d).bfloat16(), torch.randn(d).bfloat16(), torch.randn(d).bfloat16()
    out = [torch.full((r, d), float("nan")).bfloat16() for _ in range(2)]
    if name == "rmsnorm":
        xd = x.double()
        return [x, w, out[0], 1e-6], [2], [xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()]
    if name == "layernorm":
        return [x, w, b, out[0], 1e-5], [3], [torch.nn.functional.layer_norm(x.double(), (d,), w.double(), b.double(),
                                                                              eps=1e-5)]
    h = x.double() + res.double()
    return [x, res, w, b, out[0], out[1], 1e-5], [4, 5], \
        [h, torch.nn.functional.layer_norm(h, (d,), w.double(), b.double(), eps=1e-5)]


@pytest.mark.parametrize("name", ["rmsnorm", "layernorm", "residual_layernorm"])
def test_cached_examples_agree_with_torch_on_the_interpreter_and_the_simulated_ptx(name):
    r, d = 37, 1024  # not a multiple of BR: the last row block is ragged
    kernel = tkjit.load(EXAMPLES / f"{name}.tk", pipeline="canonicalize,stream-cols{force=true cache=shared cols=256}")
    assert "copy_cols" in kernel.asm["after:stream-cols"]
    args, index, refs = _norm_case(name, r, d)
    kernel(*args)  # the interpreter (no GPU here)
    for i, ref in zip(index, refs):
        assert not torch.isnan(args[i]).any()
        assert ((args[i].double() - ref).norm() / ref.norm()).item() < 1e-2
    args, index, refs = _norm_case(name, r, d)
    got = simulate(kernel.ir, args, index, ptx_meta=(kernel.asm["ptx"], kernel.metadata))
    for g, ref in zip(got, refs):
        assert not torch.isnan(g).any(), "an output element was never written"
        assert ((g.double() - ref).norm() / ref.norm()).item() < 1e-2


def test_the_interpreter_refuses_a_chunk_outside_the_tile():
    kernel = tkjit.compile(COPY_COLS_IR.replace("%TYPE", "rt<f32>[16, 64]").replace("{value = 2}", "{value = 4}"),
                           filename="cc.tkir")
    with pytest.raises(TkError, match="column chunk 4 of 4"):
        kernel(torch.randn(16, 256).bfloat16(), torch.zeros(16, 64))


@pytest.mark.parametrize("name", ["rmsnorm", "residual_layernorm"])
def test_the_contiguous_order_reads_cached_chunks_and_vectors_16_bytes_a_lane(name):
    """cache=shared with direct=true: the cached row block is read with ld.shared.v4 (copy_cols in
    the contiguous order), the weight vectors with ld.global.v4, outputs stored with st.global.v4
    and no staging; right on the simulator at a ragged row count."""
    kernel = tkjit.load(EXAMPLES / f"{name}.tk", pipeline="canonicalize,stream-cols{force=true cache=shared cols=256 direct=true}")
    ptx = kernel.asm["ptx"]
    assert "column_order: contiguous" in str(kernel.explain())
    assert "ld.shared.v4.b32" in ptx and "ld.global.v4.b32" in ptx and "st.global.v4.b32" in ptx
    assert "ld.global.b16" not in ptx and "st.shared" not in ptx.replace("st.shared.f32", "")
    args, index, refs = _norm_case(name, 37, 1024, seed=4)
    got = simulate(kernel.ir, args, index, ptx_meta=(ptx, kernel.metadata))
    for g, ref in zip(got, refs):
        assert not torch.isnan(g).any(), "an output element was never written"
        assert ((g.double() - ref).norm() / ref.norm()).item() < 1e-2


def test_auto_keeps_a_re_read_row_block_on_chip_even_when_it_fits_registers():
    """cache=auto (the default): a row block that a later pass reads again is streamed over
    256-column chunks with the block in shared memory, contiguous order, whether or not its
    register tile would fit; a one-pass program and a program one chunk holds are left alone."""
    fits = RMS_IR.replace("4096", "1024")
    out, log = run_pass(fits)
    check_lines(out, ["%x_row = load %X, %i, %c0 : st<bf16>[16, 1024]", "copy_cols %x_row, %c : rt<f32>[16, 256]",
                      "copy_cols %x_row, %chunk : rt<f32>[16, 256]"])
    assert 'column_order = "contiguous"' in out
    (d,) = [d for d in log if d.pass_name == "stream-cols" and "cache=auto" in d.decision]
    assert "chunks of 256 columns" in d.reason and "65,536 B" in d.reason
    one_chunk = RMS_IR.replace("4096", "256")
    out, log = run_pass(one_chunk)
    assert "copy_cols" not in out and not [d for d in log if d.pass_name == "stream-cols"]
    one_pass = RMS_IR.replace("%4 = mul_row %x, %3", "%4 = mul %x, %x")
    out, log = run_pass(one_pass)
    assert "copy_cols" not in out and "st<bf16>[16, 4096]" not in out


def test_reduce_tile_carries_partials_and_reduces_once_per_pass():
    out, log = run_pass(RMS_IR, "stream-cols{cache=none reduce=tile}")
    check_lines(out, ["= zeros : rt<f32>[16, 512]", "= for {stages = 2} %",
                      "%x = copy %x_s : rt<f32>[16, 512]", "= mul %x, %x : rt<f32>[16, 512]",
                      "= add %", "yield", "= row_sum %", "rsqrt"])
    loop = out.split("= for {stages = 2}")[1].split("}")[0]
    assert "row_sum" not in loop
    (d,) = [d for d in log if d.pass_name == "stream-cols" and d.decision.startswith("row reductions")]
    assert d.decision == "row reductions once per pass"
    ragged = RMS_IR.replace("gl<bf16>[R, 4096]", "gl<bf16>[R, D]").replace("gl<bf16>[4096]", "gl<bf16>[D]")
    out, log = run_pass(ragged, "stream-cols{cache=none reduce=tile}")
    assert "zeros : cv<f32>[16]" in out
    (d,) = [d for d in log if d.pass_name == "stream-cols" and d.decision.startswith("row reductions")]
    assert d.decision == "row reductions per chunk" and "padding columns" in d.reason
    with pytest.raises(PassError, match="reduce must be"):
        run_pass(RMS_IR, "stream-cols{reduce=rows}")


@pytest.mark.parametrize("name", ["layernorm", "softmax"])
def test_reduce_tile_and_eight_warps_agree_with_torch_on_the_simulated_ptx(name):
    kernel = tkjit.load(EXAMPLES / f"{name}.tk", pipeline="canonicalize,stream-cols{reduce=tile warps=8}")
    kernel.asm["ptx"]  # noqa: B018 - emitted now: the launch metadata and decisions are the backend's
    text = str(kernel.explain())
    assert "8 warps per block" in text and "pinned by the kernel attribute num_warps" in text
    torch.manual_seed(6)
    x = (torch.randn(37, 1024) * 2 + 0.5).bfloat16()
    if name == "softmax":
        args, index, refs = [x, torch.full((37, 1024), float("nan")).bfloat16()], [1], [torch.softmax(x.double(), -1)]
    else:
        args, index, refs = _norm_case(name, 37, 1024, seed=6)
    got = simulate(kernel.ir, args, index, ptx_meta=(kernel.asm["ptx"], kernel.metadata))
    assert kernel.metadata["block"] == [256, 1, 1]
    for g, ref in zip(got, refs):
        assert not torch.isnan(g).any(), "an output element was never written"
        assert ((g.double() - ref).norm() / ref.norm()).item() < 1e-2


def test_over_its_budget_auto_rereads_with_tile_partials_eight_warps_and_four_stages():
    """The wide-row default (the row block over the cache budget): the first chunks cached, the rest
    read again through a 4-stage pipeline, reduce=tile, 8 warps; the same choice made at D = 1024
    with a small budget runs right on the simulator at a ragged row count (one CTA per row block:
    cluster=none; cluster=auto splits such a block over a cluster, test_stream_cluster.py)."""
    out, log = run_pass(RMS_IR, "stream-cols{cluster=none}")
    assert 'num_warps = 8' in out and "for {stages = 4}" in out and "zeros : rt<f32>[16, 256]" in out
    (d,) = [d for d in log if d.pass_name == "stream-cols" and "cache=auto" in d.decision]
    assert d.decision.endswith("later chunks read again") and "8 warps and 4 stages" in d.reason
    kernel = tkjit.load(EXAMPLES / "residual_layernorm.tk", pipeline="canonicalize,stream-cols{cache_bytes=16384 cluster=none}")
    assert "for {stages = 4}" in kernel.asm["after:stream-cols"]
    args, index, refs = _norm_case("residual_layernorm", 37, 1024, seed=7)
    got = simulate(kernel.ir, args, index, ptx_meta=(kernel.asm["ptx"], kernel.metadata))
    assert kernel.metadata["block"] == [256, 1, 1]
    for g, ref in zip(got, refs):
        assert not torch.isnan(g).any(), "an output element was never written"
        assert ((g.double() - ref).norm() / ref.norm()).item() < 1e-2
