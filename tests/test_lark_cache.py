"""Parser tables kept as JSON in the cache directory: a loaded parser is the built one (same trees,
same syntax errors on every golden malformed kernel), a second process-worth of work loads instead
of building, and a damaged file, a changed grammar or the cache switched off are handled."""
from __future__ import annotations

import json
from pathlib import Path

import lark
import pytest

from tkjit import lark_cache
from tkjit.config import reset_config
from tkjit.frontend import parser as frontend_parser
from tkjit.ir import parser as ir_parser

ROOT = Path(__file__).resolve().parent.parent
GRAMMAR = (Path(frontend_parser.__file__).parent / "grammar.lark").read_text()
OPTIONS = dict(parser="lalr", lexer="basic", propagate_positions=True, maybe_placeholders=True)


def kernel_parser(cache_dir: Path) -> lark.Lark:
    return lark_cache.cached_lark(GRAMMAR, postlex=frontend_parser._Newlines(), cache_dir=cache_dir, **OPTIONS)


def golden_sources() -> list[str]:
    text = (ROOT / "tests" / "golden" / "diagnostics.txt").read_text()
    cases = text.split("\n=== ")[1:]
    return [case.split("\n", 1)[1].split("\n--- expect")[0] for case in cases]


def outcome(parser: lark.Lark, text: str):
    try:
        return "tree", parser.parse(text)
    except lark.exceptions.UnexpectedInput as e:
        token = getattr(e, "token", None)
        return type(e).__name__, (e.line, e.column, str(token), sorted(getattr(e, "expected", None) or []))


@pytest.fixture(scope="module")
def built_and_loaded(tmp_path_factory):
    cache = tmp_path_factory.mktemp("grammars")
    built = kernel_parser(cache)
    (path,) = (cache / "grammars").iterdir()
    loaded = lark_cache._load(lark_cache._verified(path), frontend_parser._Newlines())
    return built, loaded


def test_the_loaded_parser_reads_every_example_as_the_built_one(built_and_loaded):
    built, loaded = built_and_loaded
    examples = sorted((ROOT / "examples").glob("*.tk"))
    assert examples
    for path in examples:
        assert outcome(loaded, path.read_text()) == outcome(built, path.read_text()), path.name


def test_the_loaded_parser_fails_on_every_golden_kernel_as_the_built_one(built_and_loaded):
    built, loaded = built_and_loaded
    sources = golden_sources()
    assert len(sources) > 50
    for text in sources:
        assert outcome(loaded, text) == outcome(built, text)
    assert [t.name for t in loaded.terminals] == [t.name for t in built.terminals]
    for terminal in built.terminals:
        ours, theirs = loaded.get_terminal(terminal.name).pattern, terminal.pattern
        assert (type(ours), ours.to_regexp()) == (type(theirs), theirs.to_regexp())


def test_a_second_parser_is_loaded_not_built(tmp_path, monkeypatch):
    kernel_parser(tmp_path)

    def no_build(grammar, options):
        raise AssertionError("built the tables again")
    monkeypatch.setattr(lark_cache, "_build", no_build)
    assert outcome(kernel_parser(tmp_path), "kernel k() {}")[0] == "tree"


def test_a_damaged_file_is_rebuilt(tmp_path):
    kernel_parser(tmp_path)
    (path,) = (tmp_path / "grammars").iterdir()
    path.write_text('{"data": {"parser": 1}, "memo": {}}')
    assert outcome(kernel_parser(tmp_path), "kernel k() {}")[0] == "tree"
    assert outcome(lark_cache._load(lark_cache._verified(path), frontend_parser._Newlines()), "kernel k() {}")[0] == "tree"


def test_one_changed_number_in_the_tables_is_caught_and_rebuilt(tmp_path):
    """The tables still load after such a change, and then misparse every kernel: the sha256 on
    the first line refuses them, and they are built again and rewritten."""
    import re
    kernel_parser(tmp_path)
    (path,) = (tmp_path / "grammars").iterdir()
    good = path.read_bytes()
    digest, _, body = good.partition(b"\n")
    match = re.search(rb"(?<=[\[,])(\d+)(?=[,\]])", body[len(body) // 2:])
    start = len(body) // 2 + match.start()
    changed = body[:start] + str(int(match.group()) + 1).encode() + body[start + len(match.group()):]
    path.write_bytes(digest + b"\n" + changed)
    with pytest.raises(ValueError, match="sha256"):
        lark_cache._verified(path)
    assert outcome(kernel_parser(tmp_path), "kernel k() {}")[0] == "tree"
    assert lark_cache._verified(path) and path.read_bytes() != digest + b"\n" + changed  # rewritten


def test_a_fifo_in_place_of_the_tables_does_not_hang(tmp_path):
    import os
    kernel_parser(tmp_path)
    (path,) = (tmp_path / "grammars").iterdir()
    path.unlink()
    os.mkfifo(path)
    assert outcome(kernel_parser(tmp_path), "kernel k() {}")[0] == "tree"
    assert path.is_file()


def test_the_key_follows_the_grammar_and_options(tmp_path):
    key = lark_cache.grammar_key(GRAMMAR, OPTIONS, frontend_parser._Newlines())
    assert key != lark_cache.grammar_key(GRAMMAR + "\n// changed\n", OPTIONS, frontend_parser._Newlines())
    assert key != lark_cache.grammar_key(GRAMMAR, {**OPTIONS, "propagate_positions": False},
                                         frontend_parser._Newlines())
    assert key != lark_cache.grammar_key(GRAMMAR, OPTIONS)


def test_no_file_when_the_cache_is_off(tmp_path, monkeypatch):
    monkeypatch.setenv("TKJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TKJIT_NO_CACHE", "1")
    reset_config()
    lark_cache.cached_lark("start: NAME\n%import common.CNAME -> NAME\n", parser="lalr")
    assert list(tmp_path.iterdir()) == []


def test_the_ir_grammar_round_trips_too(tmp_path):
    grammar = (Path(ir_parser.__file__).parent / "ir.lark").read_text()
    options = dict(parser="lalr", propagate_positions=True, maybe_placeholders=True)
    built = lark_cache.cached_lark(grammar, cache_dir=tmp_path, **options)
    (path,) = (tmp_path / "grammars").iterdir()
    loaded = lark_cache._load(lark_cache._verified(path), None)
    text = (ROOT / "tests" / "codegen_kernels" / "gemm.tkir").read_text()
    assert outcome(loaded, text) == outcome(built, text) and outcome(built, text)[0] == "tree"
    json.loads(lark_cache._verified(path))  # plain JSON after the sha256 line


def test_only_lalr_parsers():
    with pytest.raises(ValueError, match="LALR"):
        lark_cache.cached_lark("start: 'a'", parser="earley")
