"""The disk cache of compiled kernels: the cache key, DiskCache, and the `tkjit cache` command.

An entry lives in ``root/<key[:2]>/<key>/``: the caller's files (binaries as bytes),
``metadata.json`` and, written last, ``manifest.json`` with the sha256 and size of every other
file. An entry is written into a temporary directory under ``root`` and committed by one
``os.rename``; a final path therefore only ever holds a complete entry, and anything there that
does not verify is corruption: ``get`` treats it as a miss (logged at debug level on the
"tkjit.cache" logger) and removes it so it is rebuilt. No pickle: JSON and raw bytes only.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Callable, NamedTuple

import tkjit
from .errors import TkError


def _debug(message: str, *args) -> None:
    """Log on the "tkjit.cache" logger (imported here: logging costs ~2.5 ms to import, more than a
    cache hit, and only corruption and failed writes are logged)."""
    import logging
    logging.getLogger("tkjit.cache").debug(message, *args)


FORMAT = 1
MANIFEST, METADATA = "manifest.json", "metadata.json"
STALE_TMP_SECONDS = 300  # a temporary directory older than this belongs to a crashed writer
_KEY, _SHARD = re.compile(r"[0-9a-f]{64}"), re.compile(r"[0-9a-f]{2}")


def _json_bytes(obj) -> bytes:
    """Canonical JSON: the same object always gives the same bytes."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def _source_files(package_dir: Path) -> list[tuple[str, str]]:
    """(path relative to the package, absolute path) of every .py and .lark file, sorted."""
    found: list[tuple[str, str]] = []
    pending = [(str(package_dir), "")]
    while pending:
        directory, prefix = pending.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        pending.append((entry.path, f"{prefix}{entry.name}/"))
                elif entry.name.endswith((".py", ".lark")) and entry.is_file():
                    found.append((prefix + entry.name, entry.path))
    return sorted(found)


def _hash_source_tree(package_dir: Path) -> str:
    """sha256 over the relative path, size and contents of every .py and .lark file."""
    h = hashlib.sha256()
    for rel, path in _source_files(package_dir):
        with open(path, "rb") as f:
            data = f.read()
        h.update(f"{rel}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def _stat_key(package_dir: Path) -> str:
    """A cheap stand-in for the content hash: the package's path and every source file's relative
    path, size and mtime (ns). Editing, adding, removing or renaming a file changes it."""
    h = hashlib.sha256(str(Path(package_dir).resolve()).encode())
    for rel, path in _source_files(package_dir):
        st = os.stat(path)
        h.update(f"\0{rel}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()


SOURCE_MEMO, ASSEMBLER_MEMO = "memo-source-hash.json", "memo-assembler-version.json"
"""Small JSON files in the cache root: a cheap pre-key → the value it stands for."""
_MEMO_ENTRIES = 32
_source_hashes: dict[str, str] = {}


def _memo_read(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            memo = json.loads(f.read())
    except (OSError, ValueError):
        return {}
    return memo if isinstance(memo, dict) else {}


def _memo_write(path: Path, key: str, value: str) -> None:
    """Add ``key → value`` (keeping the newest entries) by an atomic replace; a failure (read-only
    cache, a race with another writer) only costs a recomputation later."""
    memo = {k: v for k, v in _memo_read(path).items() if isinstance(v, str) and k != key}
    memo = dict(list(memo.items())[-(_MEMO_ENTRIES - 1):])
    memo[key] = value
    tmp = path.with_name(f".tmp-{path.name}-{os.urandom(6).hex()}")
    try:
        path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
        tmp.write_bytes(_json_bytes(memo))
        os.replace(tmp, path)
    except OSError as e:
        _debug("could not write %s: %s", path, e)
        tmp.unlink(missing_ok=True)


def _memoized(memo_path: Path, key: str, compute: Callable[[], str]) -> str:
    value = _memo_read(memo_path).get(key)
    if isinstance(value, str) and value:
        return value
    value = compute()
    _memo_write(memo_path, key, value)
    return value


def source_hash_of(package_dir: Path, memo_dir: Path | None = None) -> str:
    """The content hash of a package's sources. With ``memo_dir``: looked up by the stat pre-key in
    ``memo_dir/memo-source-hash.json`` first (a few stat calls instead of reading every file)."""
    if memo_dir is None:
        return _hash_source_tree(package_dir)
    return _memoized(Path(memo_dir) / SOURCE_MEMO, _stat_key(package_dir),
                     lambda: _hash_source_tree(package_dir))


def tkjit_source_hash(memo_dir: Path | None = None) -> str:
    """sha256 over every .py and .lark file of the installed tkjit package, once per process (and
    with ``memo_dir``, once per change of the sources: see ``source_hash_of``)."""
    found = _source_hashes.get("tkjit")
    if found is None:
        found = _source_hashes["tkjit"] = source_hash_of(Path(tkjit.__file__).parent, memo_dir)
    return found


def assembler_version(memo_dir: Path | None = None) -> str:
    """ptxas's version (part of the key). ``ptxas --version`` is a subprocess: with ``memo_dir``,
    its answer is kept in ``memo_dir/memo-assembler-version.json`` under the binary's path, size
    and mtime, so a process that finds it there runs no subprocess (nor imports toolchain.py)."""
    if memo_dir is None:
        return _ptxas_version()
    from .runtime.tool_paths import find_tool
    path = find_tool("ptxas")
    st = os.stat(path)
    return _memoized(Path(memo_dir) / ASSEMBLER_MEMO, f"{path}\0{st.st_size}\0{st.st_mtime_ns}",
                     _ptxas_version)


def _ptxas_version() -> str:
    from .runtime import toolchain
    return toolchain.ptxas_version()


def normalize_kernel_text(text: str) -> str:
    """Newlines → \\n, trailing whitespace of each line and leading/trailing blank lines removed.
    Comments and indentation are kept: only whitespace that cannot change meaning goes."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).strip("\n")


def cache_key(*, kernel_text: str, options: dict, arch: str, assembler_version: str,
              extra: dict | None = None, source_hash: str | None = None) -> str:
    """The key of everything that changes a compiled kernel. ``options``/``extra`` must be JSON.
    ``source_hash`` is tkjit's (default: ``tkjit_source_hash()``)."""
    return hashlib.sha256(_json_bytes({
        "tkjit": tkjit.__version__, "source": source_hash or tkjit_source_hash(),
        "kernel": normalize_kernel_text(kernel_text), "options": options, "arch": arch,
        "assembler": assembler_version, "extra": extra or {},
    })).hexdigest()


# The two records below are NamedTuples rather than frozen dataclasses: every cached load imports
# this module, and generating the two dataclasses' methods took a fifth of such a load.

class CacheEntry(NamedTuple):
    key: str
    path: Path
    files: dict[str, bytes]
    """The caller's files, every one read and verified by ``get`` (not metadata.json/manifest.json)."""
    metadata: dict

    def __repr__(self) -> str:  # the files are binaries: left out
        return f"CacheEntry(key={self.key!r}, path={self.path!r}, metadata={self.metadata!r})"


class EntryInfo(NamedTuple):
    key: str
    size: int
    """Bytes on disk, all files of the entry."""
    created: str | None
    name: str | None
    """The kernel's name, from the metadata's "name"."""
    detail: str | None = None
    """What tells this entry apart from others of the same name: the constants it was compiled
    with (overrides of the defaults; the metadata's "options"), or a @fill_sms choice's constants."""


class _Corrupt(ValueError):
    pass


def _check(cond: bool, reason: str) -> None:
    if not cond:
        raise _Corrupt(reason)


def _reason(e: Exception) -> str:
    return str(e) if isinstance(e, _Corrupt) else f"{type(e).__name__}: {e}"


def _valid_name(name: object) -> bool:
    return (isinstance(name, str) and name not in ("", ".", "..", MANIFEST)
            and not name.startswith(".") and "/" not in name and "\\" not in name)


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DiskCache:
    """The cache under ``root``; safe to share between processes (see the module docstring)."""

    def __init__(self, root: Path):
        self.root = Path(root)

    @staticmethod
    def default() -> "DiskCache":
        from .config import get_config
        return DiskCache(get_config().cache_dir)

    def _path(self, key: str) -> Path:
        if not (isinstance(key, str) and _KEY.fullmatch(key)):
            raise ValueError(f"cache key must be 64 lowercase hex digits, got {key!r}")
        return self.root / key[:2] / key

    def _lock(self, key: str):
        from filelock import FileLock  # lazily: importing filelock costs more than a cache hit
        return FileLock(str(self.root / key[:2] / f"{key}.lock"), timeout=60)

    def _read(self, key: str, path: Path) -> CacheEntry:
        """The verified entry at ``path``; raises _Corrupt (a ValueError) or OSError."""
        manifest = json.loads((path / MANIFEST).read_bytes())
        _check(isinstance(manifest, dict) and manifest.get("format") == FORMAT, "unknown format")
        _check(manifest.get("key") == key, "manifest names another key")
        listed = manifest.get("files")
        _check(isinstance(listed, dict) and METADATA in listed, "manifest lists no metadata.json")
        files = {}
        for name, info in listed.items():
            _check(_valid_name(name) and isinstance(info, dict), f"bad manifest entry {name!r}")
            data = (path / name).read_bytes()
            size = info.get("size")
            _check(len(data) == size, f"{name}: {len(data)} bytes, expected {size}")
            _check(hashlib.sha256(data).hexdigest() == info.get("sha256"), f"{name}: sha256 mismatch")
            files[name] = data
        metadata = json.loads(files.pop(METADATA))
        _check(isinstance(metadata, dict), "metadata.json is not an object")
        return CacheEntry(key, path, files, metadata)

    def _discard(self, path: Path) -> bool:
        """Move ``path`` aside (atomic for readers), then delete it. False if it was not there."""
        trash = self.root / f".trash-{os.urandom(8).hex()}"
        try:
            os.rename(path, trash)
        except FileNotFoundError:
            return False
        if trash.is_dir() and not trash.is_symlink():
            shutil.rmtree(trash, ignore_errors=True)
        else:
            trash.unlink(missing_ok=True)
        return True

    def get(self, key: str) -> CacheEntry | None:
        """The entry, or None for a missing or corrupted one (which is removed). Never raises
        for what is on disk."""
        path = self._path(key)
        if not os.path.lexists(path):
            return None
        try:
            return self._read(key, path)
        except (OSError, ValueError) as e:
            _debug("cache entry %s is corrupted (%s); removing it", key, _reason(e))
        try:
            with self._lock(key):  # re-check: another process may have replaced it meanwhile
                try:
                    return self._read(key, path)
                except (OSError, ValueError):
                    self._discard(path)
        except OSError as e:
            _debug("could not remove cache entry %s: %s", key, e)
        return None

    def put(self, key: str, files: dict[str, bytes], metadata: dict) -> CacheEntry:
        """Write an entry; if a valid one is already there, keep it and return it instead."""
        final = self._path(key)
        for name in files:
            if not _valid_name(name) or name == METADATA:
                raise ValueError(f"invalid cache file name {name!r}")
        self.root.mkdir(parents=True, mode=0o700, exist_ok=True)  # an existing root is left as is
        final.parent.mkdir(mode=0o700, exist_ok=True)
        contents = {**files, METADATA: _json_bytes(metadata)}
        tmp = self.root / f".tmp-{key[:16]}-{os.urandom(8).hex()}"
        tmp.mkdir(mode=0o700)
        try:
            for name, data in sorted(contents.items()):
                _write_synced(tmp / name, data)
            created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            listed = {n: {"sha256": hashlib.sha256(d).hexdigest(), "size": len(d)}
                      for n, d in contents.items()}
            manifest = {"format": FORMAT, "key": key, "files": listed, "created": created}
            _write_synced(tmp / MANIFEST, _json_bytes(manifest))
            _fsync_dir(tmp)
            for _ in range(10):
                try:
                    os.rename(tmp, final)  # the commit point
                except OSError:
                    if not os.path.lexists(final):
                        raise
                    existing = self.get(key)  # a broken entry is removed (under the lock): retry
                    if existing is not None:
                        return existing
                    continue
                _fsync_dir(final.parent)
                return CacheEntry(key, final, dict(files), json.loads(contents[METADATA]))
            raise OSError(f"could not commit cache entry {key}: the path keeps being replaced")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def discard(self, key: str) -> bool:
        """Remove the entry (a valid one its reader found unusable); False if there was none."""
        with self._lock(key):
            return self._discard(self._path(key))

    def get_or_build(self, key: str, build: Callable[[], tuple[dict[str, bytes], dict]]) -> CacheEntry:
        entry = self.get(key)
        if entry is not None:
            return entry
        files, metadata = build()
        return self.put(key, files, metadata)

    def _entry_dirs(self) -> list[tuple[str, Path]]:
        if not self.root.is_dir():
            return []
        shards = [s for s in self.root.iterdir() if _SHARD.fullmatch(s.name) and s.is_dir()]
        return sorted((p.name, p) for shard in shards
                      for p in shard.iterdir() if _KEY.fullmatch(p.name) and p.name[:2] == shard.name)

    def entries(self) -> list[EntryInfo]:
        infos = []
        for key, path in self._entry_dirs():
            size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
            created = name = detail = None
            try:
                created = json.loads((path / MANIFEST).read_bytes()).get("created")
                metadata = json.loads((path / METADATA).read_bytes())
                name, detail = metadata.get("name"), _detail(metadata)
            except (OSError, ValueError, AttributeError, TypeError):
                pass
            infos.append(EntryInfo(key, size, created, name, detail))
        return infos

    def verify(self) -> list[tuple[str, bool, str]]:
        """(key, ok, reason) for every entry; reports only, removes nothing."""
        results = []
        for key, path in self._entry_dirs():
            try:
                self._read(key, path)
                results.append((key, True, "ok"))
            except (OSError, ValueError) as e:
                results.append((key, False, _reason(e)))
        return results

    def clear(self) -> int:
        """Remove every entry (returns how many) and everything else tkjit keeps here (see
        ``clear_all``)."""
        return self.clear_all()["entries"]

    def clear_all(self) -> dict[str, int]:
        """Remove every entry (kernels, native launch builds, @fill_sms choices), the grammars,
        the sync verdicts, the memos, lock files and stale temporary directories; how many of each
        were removed. Files tkjit does not know are left alone."""
        removed = {"entries": sum(self._discard(path) for _, path in self._entry_dirs())}
        if not self.root.is_dir():
            return removed
        for folder, label in _SIDE_FOLDERS.items():
            path = self.root / folder
            if path.is_dir() and not path.is_symlink():
                removed[label] = sum(1 for p in path.iterdir() if not p.name.startswith("."))
                shutil.rmtree(path, ignore_errors=True)
        memos = [p for p in self.root.glob("memo-*.json") if p.is_file()]
        for p in [*memos, *self.root.glob("*.lock"), *self.root.glob(".tmp-memo-*")]:
            p.unlink(missing_ok=True)
        removed["memos"] = len(memos)
        for p in self.root.iterdir():
            stale_tmp = p.name.startswith(".tmp-") and _age(p) > STALE_TMP_SECONDS
            if p.name.startswith(".trash-") or stale_tmp:
                shutil.rmtree(p, ignore_errors=True)
            elif _SHARD.fullmatch(p.name) and p.is_dir():
                for lock in p.glob("*.lock"):
                    lock.unlink(missing_ok=True)
                if not any(p.iterdir()):
                    p.rmdir()
        return removed


_SIDE_FOLDERS = {"grammars": "grammars", "sync-verdicts": "sync verdicts"}
"""Folders of the cache root beside the entries: the compiled lark grammars (lark_cache.py) and
the synchronization checker's verdicts (passes/sync_verdicts.py)."""


def _detail(metadata: dict) -> str | None:
    options = metadata.get("options")
    if isinstance(options, dict):
        constants = " ".join(f"{n}={v}" for n, v in options.get("constants") or [])
        parts = [constants or "default constants"]
        if options.get("pipeline"):
            parts.append(f"pipeline {options['pipeline']}")
        if options.get("unaligned_rows"):
            parts.append("unaligned rows")
        return ", ".join(parts)
    constants = metadata.get("constants")  # a @fill_sms choice
    if isinstance(constants, dict):
        return " ".join(f"{n}={v}" for n, v in constants.items())
    return None


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return 0.0


def _entries(n: int) -> str:
    return "1 entry" if n == 1 else f"{n} entries"


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB" if n < 1024**2 else f"{n / 1024**2:.1f} MiB"


def cache_command(action: str, cache: DiskCache) -> str:
    """The text `tkjit cache ls|verify|clear` prints."""
    return cache_command_status(action, cache)[0]


def cache_command_status(action: str, cache: DiskCache) -> tuple[str, int]:
    """The text `tkjit cache ls|verify|clear` prints, and its exit status (1 when verify finds a
    corrupted entry)."""
    if action == "ls":
        infos = cache.entries()
        lines = [f"{i.key[:16]}  {_size(i.size):>10}  {i.created or '?':<20}  {i.name or '?'}"
                 + (f"  [{i.detail}]" if i.detail else "") for i in infos]
        total = sum(i.size for i in infos)
        return "\n".join(lines + [f"{_entries(len(infos))}, {_size(total)} in {cache.root}"]), 0
    if action == "verify":
        results = cache.verify()
        lines = [f"ok       {key[:16]}" if ok else f"CORRUPT  {key[:16]}  {reason}"
                 for key, ok, reason in results]
        bad = sum(not ok for _, ok, _ in results)
        text = "\n".join(lines + [f"{_entries(len(results))}, {bad} corrupted in {cache.root}"])
        return text, 1 if bad else 0  # a corrupted entry is rebuilt when next used
    if action == "clear":
        removed = cache.clear_all()
        parts = [_entries(removed.pop("entries"))]
        parts += [f"{n} {label if n != 1 else label.rstrip('s')}" for label, n in removed.items() if n]
        return f"removed {', '.join(parts)} from {cache.root}", 0
    raise TkError(f"unknown cache action {action!r} (expected ls, verify or clear)")
