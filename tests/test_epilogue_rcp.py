"""The epilogue pass's option ``rcp`` (passes/epilogue.py, ``rcp_choice``; the kernel attribute
``epilogue_rcp``): it pins the pipe of the reciprocals of the maps that take one
(``mathfn.RCP_OPS``: gelu's on MUFU, the sigmoid's -- silu's, gelu_tanh's -- on the FMA pipe by
default), logged, for same-run A/Bs; ``auto`` (the default) puts the sigmoid's on MUFU after a
tensor-core product (measured faster: ``SIGMOID_MUFU_MEASURED``) and leaves gelu's there (its
FMA-pipe reciprocal measured slower under ping-pong: ``RCP_MEASURED``)."""
from __future__ import annotations

from pathlib import Path

import pytest
from support import needs_cuda_tools

import tkjit
from tkjit.errors import TkError
from tkjit.ir.printer import print_kernel
from tkjit.passes import default_pipeline

EXAMPLE = (Path(__file__).resolve().parents[1] / "examples" / "gemm_bias_gelu.tk").read_text()


def kernel(act: str = "gelu", bn: int = 128, rcp: str | None = None):
    pipeline = None
    if rcp is not None:
        pipeline = ",".join(f"epilogue{{rcp={rcp}}}" if p.split("{")[0] == "epilogue" else p
                            for p in default_pipeline("sm_90a").split(","))
    return tkjit.compile(EXAMPLE.replace("gelu(add_col", f"{act}(add_col"), constants={"BN": bn},
                         pipeline=pipeline, require_hopper=True, cache=False)


def pinned(k) -> list:
    return [e for e in k.decisions.for_pass("epilogue") if e.decision.startswith("epilogue reciprocals on")]


@pytest.mark.parametrize("act, bn", [("gelu", 128), ("gelu", 256), ("relu", 128)])
def test_auto_moves_no_reciprocal_of_gelu_or_relu(act, bn):
    k = kernel(act, bn)
    assert not pinned(k) and "epilogue_rcp" not in print_kernel(k.ir)
    ptx = k.asm["ptx"]
    assert ("rcp.approx" in ptx) == (act == "gelu")  # gelu's on MUFU, relu has none


@pytest.mark.parametrize("act, bn", [("silu", 128), ("silu", 256), ("gelu_tanh", 128), ("sigmoid", 128)])
def test_auto_puts_the_sigmoids_reciprocal_on_mufu_after_a_product_and_says_why(act, bn):
    k = kernel(act, bn)
    (entry,) = pinned(k)
    assert entry.decision == "epilogue reciprocals on MUFU" and entry.reason.startswith(f"{act}: auto, in the epilogue")
    assert "silu-mufu-{1,2}.json" in entry.reason  # the measurement it rests on
    assert k.asm["ptx"] == kernel(act, bn, rcp="mufu").asm["ptx"] and "rcp.approx" in k.asm["ptx"]


def test_a_kernel_with_no_product_keeps_the_sigmoids_own_pipe():
    from tkjit.passes.epilogue import rcp_choice
    k = tkjit.compile("""
kernel sig(X: gl<bf16>[R, 64], Y: gl<bf16>[R, 64]) {
  for i in blocks(R / 16) {
    x: rt<f32>[16, 64] = X.tile(i, 0)
    Y.tile(i, 0) = cvt<bf16>(sigmoid(x))
  }
}""", cache=False)
    assert rcp_choice(k.ir, "auto") == ("", "")


def test_rcp_fma_moves_gelus_reciprocal_and_says_so():
    k = kernel(rcp="fma")
    (entry,) = pinned(k)
    assert entry.decision == "epilogue reciprocals on the FMA pipe"
    assert entry.reason == "gelu: asked for by the pass option rcp=fma"
    assert 'epilogue_rcp = "fma"' in print_kernel(k.ir) and "epilogue reciprocals on the FMA pipe" in str(k.explain())
    ptx = k.asm["ptx"]
    assert "rcp.approx" not in ptx and "ex2.approx" in ptx


def test_rcp_mufu_moves_the_sigmoids_reciprocal_and_says_so():
    k, own = kernel("silu", rcp="mufu"), kernel("silu", rcp="fma")
    (entry,) = pinned(k)
    assert entry.decision == "epilogue reciprocals on MUFU" and entry.reason.startswith("silu: asked for")
    assert "rcp.approx" in k.asm["ptx"] and k.asm["ptx"].count("fma.rn") < own.asm["ptx"].count("fma.rn")
    gelu = kernel(rcp="mufu")  # gelu's own pipe: logged, the same PTX
    assert pinned(gelu) and gelu.asm["ptx"] == kernel().asm["ptx"]


def test_a_kernel_without_such_maps_is_untouched_and_a_wrong_value_is_refused():
    k = kernel("relu", rcp="fma")
    assert not pinned(k) and k.asm["ptx"] == kernel("relu").asm["ptx"]
    with pytest.raises(TkError, match="rcp must be auto, fma or mufu"):
        kernel(rcp="sfu").ir  # noqa: B018


@needs_cuda_tools
def test_the_pinned_pipes_trade_mufu_for_fma_pipe_instructions_without_spills():
    def count(sass, op):
        return sum(1 for line in sass.splitlines() if f" {op}" in line)
    fma, own = kernel(rcp="fma").asm["sass"], kernel().asm["sass"]
    assert count(own, "MUFU.RCP") >= 128 and count(fma, "MUFU.RCP") <= 8
    silu_mufu, silu = kernel("silu", rcp="mufu").asm["sass"], kernel("silu", rcp="fma").asm["sass"]
    assert count(silu_mufu, "MUFU.RCP") >= 128 > count(silu, "MUFU.RCP")
    assert count(silu_mufu, "FFMA") < count(silu, "FFMA")
    for sass in (fma, silu_mufu):
        assert "LDL" not in sass and "STL" not in sass
