"""Issue 20, item 1: the cache key is the kernel text exactly as the lexer reads it, so two kernels
the lexer reads differently never share a binary, and a hit's decision log has this text's
line:col (needs ptxas: nothing is cached without it)."""
from __future__ import annotations

import pytest

import tkjit
from tkjit.config import reset_config
from support import skip_without_cuda_tools

SRC = """kernel scale(X: gl<f32>[N, 64], Y: gl<f32>[N, 64]) {
  for i in blocks(N / 16) {
    x: rt<f32>[16, 64] = X.tile(i, 0)
    y = x * 2.0 # note
    Y.tile(i, 0) = y
  }
}
"""


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    skip_without_cuda_tools()
    monkeypatch.setenv("TKJIT_CACHE_DIR", str(tmp_path / "cache"))
    reset_config()
    yield
    reset_config()


def test_a_comment_run_on_by_a_lone_carriage_return_is_not_the_cached_kernel():
    stored = tkjit.compile(SRC)
    stored.binary  # noqa: B018 - assembles and writes the entry
    commented_out = tkjit.compile(SRC.replace("# note\n", "# note\r"))
    assert not commented_out._result.from_cache
    assert "st.global" in stored.asm["ptx"] and "st.global" not in commented_out.asm["ptx"]


def test_a_hit_reports_the_line_and_column_of_the_text_compiled():
    tkjit.compile(SRC).binary  # noqa: B018
    assert "<string>:5:5" in tkjit.compile(SRC).explain()
    shifted = tkjit.compile("\n\n" + SRC)  # the old key dropped leading blank lines: a hit
    assert "<string>:7:5" in shifted.explain() and "<string>:5:5" not in shifted.explain()
