"""The documentation a new user reads: docs/api.md covers the public API, and docs/tutorial.md's
steps are in order and run as written (on the CPU interpreter, from the repository's root)."""
from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

import tkjit
from tkjit.kernel import CompiledKernel

REPO = Path(__file__).resolve().parents[1]
API = (REPO / "docs" / "api.md").read_text()
TUTORIAL = (REPO / "docs" / "tutorial.md").read_text()
_runs = itertools.count()


def test_the_api_page_covers_every_public_name():
    exported = [n for n in dir(tkjit) if not n.startswith("_") and not isinstance(getattr(tkjit, n), type(tkjit))]
    members = [n for n in dir(CompiledKernel) if not n.startswith("_")]
    missing = [n for n in exported + members if f"`{n}" not in API and f"{n}(" not in API and f".{n}" not in API]
    assert missing == [], f"docs/api.md does not mention {missing}"


def test_the_tutorial_path():
    steps = re.findall(r"^## \d\. (.+)$", TUTORIAL, re.M)
    assert steps == ["A first kernel", "A GEMM", "Attention", "Reading dumps and the decision log",
                     "Pinning decisions", "Using a kernel inside a torch model"]


def test_the_tutorial_runs_as_written(monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.chdir(REPO)
    fresh = f"tutorial_{next(_runs)}"  # an op name registers once per process
    scope: dict = {}
    for i, block in enumerate(re.findall(r"```python\n(.*?)```", TUTORIAL, re.S)):
        code = block.replace("tutorial::", f"{fresh}::").replace('"tutorial.gemm"', f'"{fresh}.gemm"')
        exec(compile(code, f"docs/tutorial.md block {i + 1}", "exec"), scope)
