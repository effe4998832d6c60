"""`tkjit cache ls|verify|clear` on a cache that real compiles filled (issue 19's first hour):
verify's exit status, clear removing everything tkjit put there, ls telling specializations apart."""
from __future__ import annotations

from pathlib import Path

import pytest

import tkjit
from tkjit.cli import main
from tkjit.config import reset_config
from support import skip_without_cuda_tools

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture
def filled(tmp_path, monkeypatch):
    """A cache with two specializations of softmax (C=64 and the defaults) assembled into it."""
    skip_without_cuda_tools()
    root = tmp_path / "cache"
    monkeypatch.setenv("TKJIT_CACHE_DIR", str(root))
    monkeypatch.delenv("TKJIT_NO_CACHE", raising=False)
    reset_config()
    for constants in ({"C": 64}, {}):
        tkjit.load(EXAMPLES / "softmax.tk", constants=constants).binary  # noqa: B018 - assembles it
    return root


def cli(capsys, *argv):
    code = main(["cache", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_ls_shows_the_constants_that_tell_entries_apart(filled, capsys):
    code, out, _ = cli(capsys, "ls")
    lines = [line for line in out.splitlines() if "softmax" in line]
    assert code == 0 and len(lines) == 2
    assert any(line.endswith("[C=64]") for line in lines)
    assert any(line.endswith("[default constants]") for line in lines)


def test_verify_exits_nonzero_on_a_corrupt_entry(filled, capsys):
    assert cli(capsys, "verify")[0] == 0
    cubin = next(filled.glob("??/*/kernel.cubin"))
    data = cubin.read_bytes()
    cubin.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    code, out, _ = cli(capsys, "verify")
    assert code == 1 and "CORRUPT" in out and out.rstrip().endswith(f"1 corrupted in {filled}")


def test_clear_removes_everything_tkjit_put_there_and_says_so(filled, capsys):
    (filled / "grammars").mkdir(exist_ok=True)
    (filled / "grammars" / "x.json").write_text("{}")  # as lark_cache writes them
    (filled / "sync-verdicts").mkdir(exist_ok=True)
    (filled / "sync-verdicts" / "y.json").write_text("{}")
    assert list(filled.glob("memo-*.json"))  # the key's memos, written by the compiles
    (filled / "notes.txt").write_text("not tkjit's")
    code, out, _ = cli(capsys, "clear")
    assert code == 0
    assert out.startswith("removed 2 entries, ") and "grammar" in out and "sync verdict" in out and "memo" in out
    assert sorted(p.name for p in filled.iterdir()) == ["notes.txt"]
    assert cli(capsys, "clear")[1] == f"removed 0 entries from {filled}\n"
