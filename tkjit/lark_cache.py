"""Built lark LALR parsers, kept as JSON in the cache directory: ``cached_lark(grammar, **options)``.

Building the kernel language's parser (grammar analysis and the LALR tables) takes 60-80 ms, in
every fresh process; loading the same tables from JSON takes about 5 ms. The file lives in
``<cache dir>/grammars/<key>.json``; the key hashes the grammar text, the options, the post-lexer's
class and lark's version, so any change builds a new one. The tables are lark's own
serialization (``memo_serialize``, what lark's standalone generator writes), kept as JSON, not
pickle: dicts with non-string keys and tuples are tagged so that they come back as they were.
The file's first line is the sha256 of the JSON after it: a file that does not verify (one
changed number would load and misparse every kernel), cannot be read or does not load is rebuilt
and rewritten; ``TKJIT_NO_CACHE`` builds without reading or writing it.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

_TAGS = ("~items", "~tuple")
"""A dict with exactly one of these keys is an encoded container (lark's own dicts never use them)."""


def _encode(obj: Any) -> Any:
    """Lark's serialized data → JSON values: non-string dict keys and tuples are tagged."""
    if isinstance(obj, dict):
        if all(isinstance(k, str) and k not in _TAGS for k in obj):
            return {k: _encode(v) for k, v in obj.items()}
        return {"~items": [[_encode(k), _encode(v)] for k, v in obj.items()]}
    if isinstance(obj, tuple):
        return {"~tuple": [_encode(x) for x in obj]}
    if isinstance(obj, list):
        return [_encode(x) for x in obj]
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    raise TypeError(f"cannot keep a {type(obj).__name__} of a lark parser as JSON")


def _tagged(obj: dict) -> Any:
    """``json.loads`` object hook (called innermost first): undo ``_encode``'s tags."""
    if len(obj) == 1 and "~items" in obj:
        return {_hashable(k): v for k, v in obj["~items"]}
    if len(obj) == 1 and "~tuple" in obj:
        return tuple(obj["~tuple"])
    return obj


def _hashable(key: Any) -> Any:
    return tuple(_hashable(x) for x in key) if isinstance(key, list) else key


def _build(grammar: str, options: dict) -> Any:
    from ._lark import lark
    return lark.Lark(grammar, **options)


def _serialized(parser: Any) -> dict:
    from ._lark import lark  # noqa: F401 (imported first, without regex)
    from lark.grammar import Rule
    from lark.lexer import TerminalDef
    data, memo = parser.memo_serialize([TerminalDef, Rule])
    data["options"] = {k: v for k, v in data["options"].items() if k != "postlex"}  # given at load
    return {"data": _encode(data), "memo": _encode(memo)}


def _load(text: bytes, postlex: Any) -> Any:
    from ._lark import lark
    tables = json.loads(text, object_hook=_tagged)
    return lark.Lark._load_from_dict(tables["data"], tables["memo"], postlex=postlex)


def grammar_key(grammar: str, options: dict, postlex: Any = None) -> str:
    from ._lark import lark
    described = {"grammar": grammar, "options": {k: repr(v) for k, v in sorted(options.items())},
                 "postlex": None if postlex is None else f"{type(postlex).__module__}.{type(postlex).__qualname__}",
                 "lark": lark.__version__}
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()


def cached_lark(grammar: str, *, postlex: Any = None, cache_dir: Path | None = None, **options: Any) -> Any:
    """``lark.Lark(grammar, postlex=postlex, **options)`` (an LALR parser), built once per change of
    the grammar, its options or lark, then loaded from ``cache_dir`` (default: tkjit's cache
    directory; nothing is read or written when the cache is off)."""
    if options.get("parser") != "lalr":
        raise ValueError("cached_lark keeps LALR parsers only (parser='lalr')")
    from .config import get_config
    config = get_config()
    with_postlex = dict(options, postlex=postlex) if postlex is not None else options
    if config.no_cache and cache_dir is None:
        return _build(grammar, with_postlex)
    path = Path(cache_dir or config.cache_dir) / "grammars" / f"{grammar_key(grammar, options, postlex)}.json"
    try:
        return _load(_verified(path), postlex)
    except FileNotFoundError:
        pass
    except Exception:  # noqa: BLE001 - a damaged or foreign file: build it again
        from .cache import _debug
        _debug("the parser tables in %s do not load; building them again", path)
    parser = _build(grammar, with_postlex)
    _save(path, _serialized(parser))
    return parser


MAX_TABLES = 64 << 20
"""The largest tables file read (the kernel language's is about 100 KB)."""


def _verified(path: Path) -> bytes:
    """The file's JSON once its sha256 line matches (``cache.read_signed``)."""
    from .cache import read_signed
    return read_signed(path, MAX_TABLES)


def _save(path: Path, tables: dict) -> None:
    """Written signed by an atomic rename (``cache.write_signed``); a read-only cache only means
    doing the work again next time."""
    from .cache import write_signed
    write_signed(path, json.dumps(tables, separators=(",", ":")).encode())