"""stream-cols keeps several row blocks on chip (residual + LayerNorm keeps x and the residual):
their loads are issued together, each but the last with ``wait = "deferred"`` (ops/memory.py),
so the CTA has both tensors' bytes in flight at once; the register-tile backend waits once, at
the last load (or, at the latest, before an op reads a deferred tile or holds a region). The IR
the pass writes and its decision, the op's verifier and printed form, and the PTX: where the wait
is, and that the kernels still agree with torch on the simulator."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from simkit import simulate
from test_stream_cache import COPY_COLS_IR, _norm_case
from test_stream_cols import RMS_IR, check_lines, run_pass

import tkjit
from tkjit.errors import TkError
from tkjit.ir.parser import parse_kernel
from tkjit.ir.printer import print_kernel

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

RESLN_IR = """kernel @resln(%X: gl<bf16>[R, 1024], %Res: gl<bf16>[R, 1024], %W: gl<bf16>[1024], %H: gl<bf16>[R, 1024],
                %Y: gl<bf16>[R, 1024]) {
  %R = dim {name = "R"} : i32
  %c16 = const {value = 16} : i32
  %0 = cdiv %R, %c16 : i32
  blocks %0 {
  ^(%i: i32):
    %c0 = const {value = 0} : i32
    %x = load %X, %i, %c0 : rt<f32>[16, 1024]
    %res = load %Res, %i, %c0 : rt<f32>[16, 1024]
    %w = load %W, %c0 : rv<f32>[1024]
    %h = add %x, %res : rt<f32>[16, 1024]
    store %H, %h, %i, %c0
    %s = row_sum %h : cv<f32>[16]
    %y = mul_row %h, %s : rt<f32>[16, 1024]
    %z = mul_col %y, %w : rt<f32>[16, 1024]
    store %Y, %z, %i, %c0
  }
}
"""


def test_the_first_of_two_kept_row_blocks_is_loaded_without_waiting():
    out, log = run_pass(RESLN_IR, "stream-cols")
    check_lines(out, ['%x_row = load {wait = "deferred"} %X, %i, %c0 : st<bf16>[16, 1024]',
                      "%res_row = load %Res, %i, %c0 : st<bf16>[16, 1024]",
                      "= for %", "copy_cols %x_row", "copy_cols %res_row"])
    assert out.count("deferred") == 1
    (d,) = [d for d in log if d.pass_name == "stream-cols" and d.decision.startswith("row block loads in flight")]
    assert d.decision == 'row block loads in flight together: %x_row wait = deferred'
    assert d.data["deferred"] == ["x_row"]


def test_one_kept_row_block_waits_at_its_load_as_before():
    out, log = run_pass(RMS_IR, "stream-cols{cache=shared}")
    assert "deferred" not in out
    assert not [d for d in log if d.decision.startswith("row block loads in flight")]


def test_the_wait_is_printed_and_parsed_back():
    out, _ = run_pass(RESLN_IR, "stream-cols")
    assert print_kernel(parse_kernel(out)) == out


@pytest.mark.parametrize("attr, why", [('{wait = "later"}', "the only wait"),
                                       ('{wait = "deferred"}', "on a shared tile")])
def test_the_wait_attribute_is_verified(attr, why):
    text = RESLN_IR.replace("%x = load %X", f"%x = load {attr} %X") if "later" not in attr else \
        COPY_COLS_IR.replace("%s = load %X", f"%s = load {attr} %X").replace("%TYPE", "rt<f32>[16, 64]")
    with pytest.raises(TkError, match=why):
        parse_kernel(text)


def _between(ptx: str, first: str, second: str) -> str:
    return ptx[ptx.index(first):ptx.index(second)]


def test_the_ptx_issues_both_row_blocks_before_one_wait():
    """The register-tile backend's PTX (lowering=auto takes the general lowering for this kernel
    since session 16, whose consumers fill each block at its own copy_fill step:
    tests/test_general_copy_fill.py)."""
    kernel = tkjit.load(EXAMPLES / "residual_layernorm.tk", pipeline="canonicalize,stream-cols,mask-branch,scale-fold")
    ptx = kernel.asm["ptx"]
    loads = [m.start() for m in re.finditer(r"// load at \S*residual_layernorm.tk:(9|10):", ptx)]
    assert len(loads) == 2
    first_pass = ptx.index("// for at", loads[1])
    assert "cp.async.wait_all" not in ptx[loads[0]:loads[1]]  # x's copies stay in flight
    assert ptx[loads[1]:first_pass].count("cp.async.wait_all") == 1  # res's wait covers both
    assert ptx[loads[0]:loads[1]].count("cp.async.cg.shared.global") == ptx[loads[1]:first_pass].count(
        "cp.async.cg.shared.global") > 0


def test_a_deferred_tile_read_at_once_is_awaited_before_the_read():
    """The backend's safety net: an op that reads a tile whose copies are in flight waits first."""
    text = COPY_COLS_IR.replace("%s = load %X", '%s = load {wait = "deferred"} %X').replace("%TYPE", "rt<f32>[16, 64]")
    kernel = tkjit.compile(text, filename="cc.tkir")
    ptx = kernel.asm["ptx"]
    body = _between(ptx, "// load at", "// store at")
    copy = body.index("// copy_cols at")
    assert "cp.async.wait_all;  // the deferred loads' copies" in body[:copy]
    assert body[:copy].count("cp.async.wait_all") == 1
    x = torch.randn(21, 256).bfloat16()
    (got,) = simulate(kernel.ir, [x, torch.full((21, 64), float("nan"))], [1],
                      ptx_meta=(ptx, kernel.metadata))
    torch.testing.assert_close(got, x[:, 128:192].float(), rtol=0, atol=0)


@pytest.mark.parametrize("d, pipeline", [(1024, None), (1024, "canonicalize,stream-cols{force=true cache=shared cols=256}")])
def test_residual_layernorm_with_deferred_loads_agrees_with_torch(d, pipeline):
    r = 37  # not a multiple of BR: the last row block is ragged
    kernel = tkjit.load(EXAMPLES / "residual_layernorm.tk", pipeline=pipeline)
    assert 'wait = "deferred"' in kernel.asm["after:stream-cols"]
    args, index, refs = _norm_case("residual_layernorm", r, d, seed=3)
    kernel(*args)  # the interpreter
    for i, ref in zip(index, refs):
        assert ((args[i].double() - ref).norm() / ref.norm()).item() < 1e-2
    args, index, refs = _norm_case("residual_layernorm", r, d, seed=3)
    got = simulate(kernel.ir, args, index, ptx_meta=(kernel.asm["ptx"], kernel.metadata))
    for g, ref in zip(got, refs):
        assert not torch.isnan(g).any(), "an output element was never written"
        assert ((g.double() - ref).norm() / ref.norm()).item() < 1e-2
