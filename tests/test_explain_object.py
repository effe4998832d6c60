"""kernel.explain() returns an Explanation: the decision log's text as a str (so `in`, str() and
comparisons keep working), shown as text at a prompt, as a table in a notebook, and as JSON."""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

import tkjit
from tkjit.explanation import Explanation

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def explained():
    return tkjit.load(EXAMPLES / "softmax.tk").explain()


def test_it_is_the_text(explained):
    assert isinstance(explained, str) and isinstance(explained, Explanation)
    assert explained.startswith("kernel 'softmax', pipeline '")
    assert "warp-spec" in explained and str(explained) == explained
    assert type(str(explained)) is str


def test_a_prompt_shows_the_text_not_a_quoted_string(explained):
    assert repr(explained) == str(explained).rstrip("\n")
    assert "\\n" not in repr(explained)

    class Printer:  # what IPython hands _repr_pretty_
        def __init__(self):
            self.out = ""

        def text(self, s):
            self.out += s
    p = Printer()
    explained._repr_pretty_(p, False)
    assert p.out == repr(explained)


def test_a_notebook_gets_a_table_with_a_row_per_decision(explained):
    page = explained._repr_html_()
    assert page.count("<tr><td>") == len(explained.decisions) > 3
    assert "<th>because</th>" in page and "<code>softmax</code>" in page
    weird = Explanation("x", kernel="<k>", pipeline="p", decisions=[{"pass": "a&b", "reason": "<b>"}], notes=[])
    assert "&lt;k&gt;" in weird._repr_html_() and "a&amp;b" in weird._repr_html_() and "<b>" not in \
        weird._repr_html_().replace("<b>kernel", "")


def test_it_converts_to_json(explained):
    data = json.loads(explained.to_json_text())
    assert data["kernel"] == "softmax" and data["pipeline"] == explained.pipeline
    assert list(dict.fromkeys(d["pass"] for d in data["decisions"]))[:3] == ["stream-cols", "layout", "grid"]
    assert all({"pass", "subject", "decision", "reason"} <= d.keys() for d in data["decisions"])
    assert json.loads(json.dumps(explained)) == str(explained)  # and as a plain JSON string
    assert pickle.loads(pickle.dumps(explained)) == explained
