"""Golden diagnostics: each malformed kernel in tests/golden/diagnostics.txt gets exactly the
message written under it (file:line:col, message, source line, caret, notes).

TKJIT_UPDATE_GOLDEN=1 rewrites the expectations from the compiler's current messages before the
cases are checked; review the diff by eye.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from tkjit.errors import TkError
from tkjit.frontend import lower_source

GOLDEN = Path(__file__).parent / "golden" / "diagnostics.txt"
CASE, EXPECT = "=== ", "--- expect"


@dataclass
class Case:
    name: str
    constants: Optional[dict]
    source: str
    expected: str


def load(text: str) -> tuple[str, list[Case]]:
    """The file's header comment and its cases."""
    header, cases = [], []
    lines = text.split("\n")
    i = 0
    while i < len(lines) and not lines[i].startswith(CASE):
        header.append(lines[i])
        i += 1
    while i < len(lines):
        name, _, consts = lines[i][len(CASE):].partition(" ")
        i += 1
        source = []
        while lines[i] != EXPECT:
            source.append(lines[i])
            i += 1
        i += 1
        expected = []
        while i < len(lines) and not lines[i].startswith(CASE):
            expected.append(lines[i])
            i += 1
        while expected and not expected[-1].strip():
            expected.pop()
        cases.append(Case(name, json.loads(consts) if consts else None,
                          "\n".join(source) + "\n" if source else "", "\n".join(expected)))
    return "\n".join(header), cases


def dump(header: str, cases: list[Case]) -> str:
    parts = [header]
    for c in cases:
        head = CASE + c.name + (" " + json.dumps(c.constants) if c.constants else "")
        parts.append(f"{head}\n{c.source}{EXPECT}\n{c.expected}\n")
    return "\n".join(parts)


def rendered(case: Case) -> str:
    try:
        lower_source(case.source, f"{case.name}.tk", case.constants)
    except TkError as err:
        return "\n".join(line.rstrip() for line in err.render().split("\n"))
    return "<no error: the kernel compiled>"


def _update_if_asked() -> None:
    if os.environ.get("TKJIT_UPDATE_GOLDEN", "") in ("", "0"):
        return
    header, cases = load(GOLDEN.read_text())
    for c in cases:
        c.expected = rendered(c)
    GOLDEN.write_text(dump(header, cases))


_update_if_asked()
HEADER, CASES = load(GOLDEN.read_text())


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_malformed_kernel_gets_its_golden_message(case):
    assert rendered(case) == "\n".join(line.rstrip() for line in case.expected.split("\n"))


def test_the_golden_file_covers_every_kind_of_mistake():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names)), "two cases share a name"
    assert len(CASES) >= 45
    for prefix in ("syntax_", "name_", "redefine_", "shape_", "dtype_", "tile_", "block_",
                   "annotation_", "const_", "call_"):
        assert any(n.startswith(prefix) for n in names), prefix
    for c in CASES:
        assert c.expected.startswith(f"{c.name}.tk:"), c.name  # located: file:line:col first


def test_the_golden_file_round_trips():
    assert dump(HEADER, CASES) == GOLDEN.read_text()
