"""IR in, IR out: every ``tests/ir/**/*.tkir`` file with a ``// RUN:`` line, checked like FileCheck.

A test file is textual IR (its ``//`` comments are ignored by the IR parser) with directives:

    // RUN: tkjit opt %s -p canonicalize [--verify-each]
                     the command, parsed by the real `tkjit` argument parser and run in-process
                     through the pass manager (always verifying after every pass)
    // EXPECT: <line>  the whole output, line by line, exactly (indentation after "EXPECT: ")
    // CHECK: <text>   a later output line contains <text> ...
    // CHECK-NEXT: <text>   ... the very next output line contains <text>
    // CHECK-NOT: <text>    ... no output line up to the next CHECK match (or the end) contains it
    // LOG: <text>     the rendered decision log contains <text>, LOG lines in order
    // ERROR: <text>   the command fails with a tkjit error whose rendering contains <text>
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tkjit.cli import build_parser
from tkjit.compiler import optimize_ir_text
from tkjit.errors import TkError

HERE = Path(__file__).parent
REPO = HERE.parent
DIRECTIVES = ("RUN", "EXPECT", "CHECK", "CHECK-NEXT", "CHECK-NOT", "LOG", "ERROR")


@dataclass
class IRTest:
    path: Path
    run: list[str] = field(default_factory=list)
    checks: list[tuple[str, str, int]] = field(default_factory=list)
    """(directive, text, line number) for EXPECT/CHECK*/LOG/ERROR, in file order."""

    def of(self, *kinds: str) -> list[tuple[str, str, int]]:
        return [c for c in self.checks if c[0] in kinds]


def read_test(path: Path) -> IRTest:
    test = IRTest(path)
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.startswith("// "):
            continue
        head, sep, rest = line[3:].partition(":")
        if not sep or head not in DIRECTIVES:
            continue
        text = rest[1:] if rest.startswith(" ") else rest
        if head == "RUN":
            test.run = shlex.split(text.replace("%s", shlex.quote(str(path.relative_to(REPO)))))
        else:
            test.checks.append((head, text if head == "EXPECT" else text.strip(), number))
    return test


def run_command(test: IRTest) -> tuple[str, str]:
    """(output, decision log text) of the RUN line; raises the TkError it fails with."""
    argv = test.run
    assert argv[:2] == ["tkjit", "opt"], f"{test.path}: only `tkjit opt` RUN lines are supported"
    args = build_parser().parse_args(argv[1:])
    text = (REPO / args.file).read_text()
    out, log = optimize_ir_text(text, args.file, args.pipeline, verify_each=True)
    return out, log.render()


def check_lines(test: IRTest, out: str) -> None:
    """FileCheck's CHECK / CHECK-NEXT / CHECK-NOT over the output lines."""
    lines = out.splitlines()
    cursor = 0          # the next line a CHECK may match
    last = -1           # the line the previous CHECK matched
    pending_not: list[tuple[str, int]] = []
    for kind, text, number in test.of("CHECK", "CHECK-NEXT", "CHECK-NOT"):
        where = f"{test.path.name}:{number}: {kind}: {text}"
        if kind == "CHECK-NOT":
            pending_not.append((text, number))
            continue
        if kind == "CHECK-NEXT":
            found = last + 1 if last + 1 < len(lines) and text in lines[last + 1] else None
            assert found is not None, f"{where}\nnot on the line after line {last + 1}:\n{out}"
        else:
            found = next((i for i in range(cursor, len(lines)) if text in lines[i]), None)
            assert found is not None, f"{where}\nnot found after output line {cursor}:\n{out}"
        _check_absent(pending_not, lines[cursor:found], test, out)
        pending_not = []
        last, cursor = found, found + 1
    _check_absent(pending_not, lines[cursor:], test, out)


def _check_absent(nots: list[tuple[str, int]], lines: list[str], test: IRTest, out: str) -> None:
    for text, number in nots:
        hit = next((line for line in lines if text in line), None)
        assert hit is None, f"{test.path.name}:{number}: CHECK-NOT: {text}\nfound in: {hit}\n{out}"


def check_log(test: IRTest, log: str) -> None:
    position = 0
    for _, text, number in test.of("LOG"):
        at = log.find(text, position)
        assert at >= 0, f"{test.path.name}:{number}: LOG: {text}\nnot in the decision log (in order):\n{log}"
        position = at + len(text)


def discover() -> list[Path]:
    return sorted(p for p in (HERE / "ir").rglob("*.tkir") if "// RUN:" in p.read_text())


@pytest.mark.parametrize("path", discover(), ids=lambda p: str(p.relative_to(HERE / "ir")))
def test_ir_file(path: Path) -> None:
    test = read_test(path)
    assert test.run, f"{path}: no RUN line"
    assert test.of("EXPECT", "CHECK", "CHECK-NEXT", "LOG", "ERROR"), f"{path}: checks nothing"
    errors = test.of("ERROR")
    try:
        out, log = run_command(test)
    except TkError as e:
        assert errors, f"{path.name}: unexpected error:\n{e.render()}"
        rendered = e.render()
        for _, text, number in errors:
            assert text in rendered, f"{path.name}:{number}: ERROR: {text}\nnot in:\n{rendered}"
        return
    assert not errors, f"{path.name}: expected an error, got output:\n{out}"
    expect = test.of("EXPECT")
    if expect:
        want = "".join(text + "\n" for _, text, _ in expect)
        assert out == want, f"{path.name}: the output differs from its EXPECT lines:\n{out}"
    check_lines(test, out)
    check_log(test, log)


# ---------------------------------------------------------------- the harness itself

def _fake(tmp_path: Path, body: str) -> IRTest:
    path = tmp_path / "t.tkir"
    path.write_text(body)
    return read_test(path)


def test_harness_check_semantics(tmp_path):
    test = _fake(tmp_path, "// CHECK: a\n// CHECK-NEXT: b\n// CHECK-NOT: x\n// CHECK: d\n")
    check_lines(test, "a\nb\nc\nd\n")
    for bad in ("a\nc\nb\nd\n", "a\nb\nx\nd\n", "a\nb\nc\n"):
        with pytest.raises(AssertionError):
            check_lines(test, bad)


def test_harness_check_not_at_the_end(tmp_path):
    test = _fake(tmp_path, "// CHECK: a\n// CHECK-NOT: z\n")
    check_lines(test, "a\nb\n")
    with pytest.raises(AssertionError):
        check_lines(test, "a\nb\nz\n")


def test_harness_log_order(tmp_path):
    test = _fake(tmp_path, "// LOG: first\n// LOG: second\n")
    check_log(test, "first then second")
    with pytest.raises(AssertionError):
        check_log(test, "second then first")


def test_every_ir_test_directory_has_tests():
    assert any(p.parent.name == "canonicalize" for p in discover())
