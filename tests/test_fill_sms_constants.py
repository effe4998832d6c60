"""Issue 20, item 3: a @fill_sms constant may size tiles and nothing else. The launch swaps it per
shape (tkjit/fill_sms.py) while the interpreter runs the defaults, so a constant that reaches the
computation would make the GPU's answer differ from the interpreter's: refused at the front end,
located at the computation."""
from __future__ import annotations

from pathlib import Path

import pytest

import tkjit
from tkjit.errors import DiagnosticError
from tkjit.frontend import lower_source

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

SCALE = """@fill_sms(BR, S)
kernel scale<BR = 128, S = 128>(X: gl<f32>[R, 64], Y: gl<f32>[R, 64]) {
  for i in blocks(R / BR) {
    x: rt<f32>[BR, 64] = X.tile(i, 0)
    Y.tile(i, 0) = x * S
  }
}
"""


def test_a_constant_that_reaches_the_computation_is_refused_where_it_does():
    with pytest.raises(DiagnosticError) as err:
        lower_source(SCALE, "scale.tk")
    text = err.value.render()
    assert text.startswith("scale.tk:5:24: error: @fill_sms: S does more than size tiles")
    assert "S = 64 instead of 128" in text and "constants={'S': 128}" in text


def test_the_same_through_compile_with_no_traceback():
    with pytest.raises(DiagnosticError, match="S does more than size tiles"):
        tkjit.compile(SCALE, filename="scale.tk", cache=False)


def test_a_constant_that_changes_nothing_sizes_no_tile():
    unused = SCALE.replace("x * S", "x * 2.0")
    with pytest.raises(DiagnosticError) as err:
        lower_source(unused, "scale.tk")
    assert err.value.render().startswith("scale.tk:1:15: error: @fill_sms: S sizes no tile")


def test_a_pinned_constant_is_never_changed_so_it_may_be_a_value():
    kernel = lower_source(SCALE, "scale.tk", {"S": 128})
    assert kernel.attrs["fill_sms"] == "BR=128 S=128"


@pytest.mark.parametrize("index_use", [
    "x: rt<f32>[BR, 64] = X.tile(i * BR / BR, 0)",     # index arithmetic scales with the tile
])
def test_tile_sizes_in_shapes_counts_and_indices_are_accepted(index_use):
    ok = SCALE.replace("@fill_sms(BR, S)", "@fill_sms(BR)").replace("x * S", "x * 2.0")
    ok = ok.replace("x: rt<f32>[BR, 64] = X.tile(i, 0)", index_use)
    lower_source(ok, "scale.tk")


@pytest.mark.parametrize("example", ["gemm.tk", "attention.tk"])
def test_the_examples_pass(example):
    lower_source((EXAMPLES / example).read_text(), example)
