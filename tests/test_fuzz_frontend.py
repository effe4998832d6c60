"""Fuzzing the front end: token-level mutations of the example kernels must either compile to
verified IR or fail with a located TkError — never any other exception.

Mutations delete, duplicate, swap or replace tokens, drawing replacements from the examples'
own tokens and the language's punctuation, so most mutants are nearly valid kernels that reach
deep into the lowering. Derandomized, so CI is reproducible.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tkjit.errors import TkError
from tkjit.frontend import lower_source

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NAMES = ("gemm", "attention", "layernorm", "softmax", "rotary")
CASES_PER_EXAMPLE = 420  # 2,100 in all

# Splits kernel text into whitespace/comments (kept as they are) and tokens (mutated).
_PIECE = re.compile(r"\s+|#[^\n]*|[A-Za-z_]\w*|\d+\.?\d*(?:[eE][+-]?\d+)?|\.\.|//|&&|\|\|"
                    r"|[=!<>]=|\S")
_PUNCTUATION = ["(", ")", "[", "]", "{", "}", "<", ">", ",", ";", ":", "=", ".", "..", "+", "-",
                "*", "/", "//", "%", "==", "!=", "<=", ">=", "&&", "||", "!", "@", "\n", "0",
                "1", "16", "-1", "1e9", "2147483648", "0.5", "true", "false", "inf", "nan"]


def _pieces(text: str) -> list[str]:
    return _PIECE.findall(text)


def _is_token(piece: str) -> bool:
    return not piece.isspace() and not piece.startswith("#")


SOURCES = {name: (EXAMPLES / f"{name}.tk").read_text() for name in NAMES}
POOL = sorted({p for text in SOURCES.values() for p in _pieces(text) if _is_token(p)}
              | set(_PUNCTUATION))


def _token_class(token: str) -> str:
    if token[:1].isalpha() or token[:1] == "_":
        return "name"
    return "number" if token[:1].isdigit() else "punctuation"


POOL_BY_CLASS = {cls: [t for t in POOL if _token_class(t) == cls]
                 for cls in ("name", "number", "punctuation")}
KINDS = ["delete", "duplicate", "swap", "replace", "insert", "replace-alike", "replace-alike"]


def _mutate(pieces: list[str], data) -> list[str]:
    """1 to 3 mutations. 'replace-alike' swaps a name for a name, a number for a number, which
    keeps most mutants parseable so that they reach the lowering's checks."""
    out = list(pieces)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        tokens = [i for i, p in enumerate(out) if _is_token(p)]
        if not tokens:
            break
        i = data.draw(st.sampled_from(tokens), label="at")
        kind = data.draw(st.sampled_from(KINDS), label="kind")
        if kind == "replace-alike":
            alike = POOL_BY_CLASS[_token_class(out[i])]
            out[i] = data.draw(st.sampled_from(alike), label="by")
            continue
        if kind == "delete":
            out[i] = ""
        elif kind == "duplicate":
            out[i] = out[i] + " " + out[i]
        elif kind == "swap":
            j = data.draw(st.sampled_from(tokens), label="with")
            out[i], out[j] = out[j], out[i]
        elif kind == "replace":
            out[i] = data.draw(st.sampled_from(POOL), label="by")
        else:
            out[i] = data.draw(st.sampled_from(POOL), label="insert") + " " + out[i]
    return out


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=CASES_PER_EXAMPLE, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutants_compile_or_fail_with_a_located_error(name, data):
    text = "".join(_mutate(_pieces(SOURCES[name]), data))
    filename = f"{name}.tk"
    try:
        lower_source(text, filename)
    except TkError as err:
        rendered = err.render()
        assert err.span is not None, rendered
        assert re.match(rf"{re.escape(filename)}:\d+:\d+: error: ", rendered), rendered


def test_the_pool_and_the_pieces_round_trip():
    for text in SOURCES.values():
        assert "".join(_pieces(text)) == text  # nothing is lost when splitting
