"""The epilogue cost model (passes/epilogue_cost.py), where warp-spec logs it, the launch
metadata carries it, and @fill_sms weighs it: a GEMM whose tile does costly work after its K loop
(bias + gelu / silu) launches the half-width tile with ping-pong consumers, which runs that work
beside the other consumer's K loop (hiding part of it), at K where the plain GEMM keeps its wide cooperative tile."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from test_hopper_codegen import HOPPER_PIPELINE, ir_of

import tkjit
from tkjit.ir.ops import For
from tkjit.passes.epilogue_cost import PLAIN, epilogue_cost

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
H200_SMS = 132


def source(name: str, act: str | None = None) -> str:
    text = (EXAMPLES / f"{name}.tk").read_text()
    return text.replace("gelu(add_col", f"{act}(add_col") if act else text


def cost_of(text: str):
    k = ir_of(text, HOPPER_PIPELINE)
    (loop,) = [op for op in k.walk() if isinstance(op, For)]
    return epilogue_cost(k, loop)


@pytest.mark.parametrize("name, act, cycles, mufu", [
    ("gemm", None, PLAIN, 0),                  # the conversion and store only
    ("gemm_bias_gelu", None, 17.5, 2),         # bias load + add_col + gelu: 16.5 issue, 2 MUFU (16)
    ("gemm_bias_silu", None, 14.5, 1),
    ("gemm_bias_gelu", "relu", 3.5, 0),
    ("gemm_bias_gelu", "exp", 9.0, 1),         # MUFU-bound: 8 cycles + the store
])
def test_the_model_counts_the_ops_after_the_k_loop(name, act, cycles, mufu):
    c = cost_of(source(name, act))
    assert c.cycles == cycles and c.mufu == mufu


def test_warp_spec_logs_the_epilogue_and_what_hides_it():
    k = tkjit.compile(source("gemm_bias_gelu"), cache=False)
    (entry,) = k.decisions.for_pass("warp-spec")
    assert "epilogue ~17.5 warp cycles per accumulator element (rv load, add_col, gelu" in entry.reason
    assert "the tensor cores wait for it" in entry.reason
    half = tkjit.compile(source("gemm_bias_gelu"), constants={"BN": 128}, cache=False)
    (entry,) = half.decisions.for_pass("warp-spec")
    assert entry.decision.startswith("1 producer + 2 consumer") and "runs beside the other consumer's wgmmas, which hide only part of it" in entry.reason
    plain = tkjit.compile(source("gemm"), cache=False)
    assert "epilogue ~" not in plain.decisions.for_pass("warp-spec")[0].reason


def metadata(text: str) -> dict:
    k = tkjit.compile(text, cache=False)
    k.asm["ptx"]  # the launch metadata comes with the PTX
    return k.metadata


def test_the_metadata_carries_it_where_it_is_more_than_the_plain_store():
    assert metadata(source("gemm_bias_gelu"))["gemm"]["epilogue"] == 17.5
    assert "epilogue" not in metadata(source("gemm"))["gemm"]


def tensors(m: int, n: int, k: int, bias: bool = True) -> tuple:
    args = [SimpleNamespace(shape=(m, k)), SimpleNamespace(shape=(k, n))]
    return tuple(args + ([SimpleNamespace(shape=(n,))] if bias else []) + [SimpleNamespace(shape=(m, n))])


@pytest.fixture
def gpu(monkeypatch):
    from tkjit.runtime import driver
    monkeypatch.setattr(driver, "gpu_available", lambda: True)
    monkeypatch.setattr(driver, "ensure_context", lambda: 0)
    monkeypatch.setattr(driver, "num_sms", lambda device=None: H200_SMS)


@pytest.mark.parametrize("name, act, k, half", [
    ("gemm_bias_gelu", None, 4096, True),      # 64 trips <= 16 x 17.5
    ("gemm_bias_gelu", None, 8192, True),      # 128 trips
    ("gemm_bias_gelu", None, 32768, False),    # 512 trips: the epilogue a small share again
    ("gemm_bias_silu", None, 8192, True),
    ("gemm_bias_gelu", "relu", 4096, False),   # 64 trips > 16 x 3.5
])
def test_fill_sms_takes_the_half_width_ping_pong_tile_for_a_costly_epilogue(gpu, name, act, k, half):
    kernel = tkjit.compile(source(name, act), cache=False)
    chosen = kernel._shape_dispatch()._choose(tensors(4096, 4096, k))
    (entry,) = kernel.decisions.for_pass("fill-sms")
    if half:
        assert chosen.options.constants == (("BM", 128), ("BN", 128))
        assert chosen.metadata["gemm"]["pingpong"] is True
        assert "its epilogue (~" in entry.reason and "runs it beside the other consumer's K loop" in entry.reason
    else:
        assert chosen._result is kernel._result
        assert entry.reason.startswith("the default tiles fill the GPU")


def test_the_plain_gemm_keeps_its_rule(gpu):
    kernel = tkjit.load(EXAMPLES / "gemm.tk", cache=False)
    dispatch = kernel._shape_dispatch()
    assert dispatch._choose(tensors(4096, 4096, 2048, bias=False))._result is kernel._result
    assert dispatch._choose(tensors(4096, 4096, 1024, bias=False)).options.constants[1] == ("BN", 128)


BRANCHES = """
kernel branches(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<f32>[M, N], act: i32) {
  for (m, n) in blocks(M / 128, N / 128) schedule(persistent, group = 8) {
    acc: rt<f32>[128, 128] = zeros()
    for k in 0 .. K / 64 {
      a: st<bf16>[128, 64] = A.tile(m, k)
      b: st<bf16>[64, 128] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    out: rt<f32>[128, 128] = zeros()
    two: rt<f32>[128, 128] = zeros()
    if act > 0 {
      out = sigmoid(acc)
      two = acc
    } else {
      out = acc * 2.0
      two = acc
    }
    C.tile(m, n) = out + two
  }
}
"""


def test_ops_inside_an_if_count_and_its_several_results_do_not_trip_it():
    c = cost_of(BRANCHES)
    assert "sigmoid" in c.ops and c.mufu == 1
