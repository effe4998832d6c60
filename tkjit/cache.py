"""The disk cache of compiled kernels: the cache key, DiskCache, and the `tkjit cache` command.

An entry lives in ``root/<key[:2]>/<key>/``: the caller's files (binaries as bytes),
``metadata.json`` and, written last, ``manifest.json`` with the sha256 and size of every other
file. An entry is written into a temporary directory under ``root`` and committed by one
``os.rename``; a final path therefore only ever holds a complete entry, and anything there that
does not verify is corruption: ``get`` treats it as a miss (logged at debug level on the
"tkjit.cache" logger) and removes it so it is rebuilt. No pickle: JSON and raw bytes only.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import stat
import sys
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


SOURCE_MEMO, ASSEMBLER_MEMO = "memo-source-hash.json", "memo-assembler-version.json"
"""Small JSON files in the cache root: a pre-key → the value it stands for. tkjit's own sources
are no longer memoized (they are hashed by content, about 1 ms per process: a memo keyed by sizes
and mtimes went stale on an edit that kept both, as ``cp -p`` and ``rsync -a`` do); SOURCE_MEMO
is the name older versions wrote."""
_MEMO_ENTRIES = 32
_MEMO_LIMIT = 1 << 20
RACY_SECONDS = 2.0
"""A binary whose mtime or ctime is this recent may still be changing within the clock's
granularity: no memo entry is written for it (git's "racy" rule)."""
_source_hashes: dict[str, str] = {}


def read_regular(path: Path, limit: int) -> bytes | None:
    """The bytes of ``path`` when it is a regular file (not a link, a FIFO or a device) of at most
    ``limit`` bytes, else None; OSError when it cannot be opened. Opened without following a link
    and without blocking, so that a FIFO or a link to /dev/zero in the cache cannot hang or
    exhaust its reader."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        if e.errno == errno.ELOOP:  # a symbolic link (O_NOFOLLOW)
            return None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        return data if len(data) <= limit else None
    finally:
        os.close(fd)


def read_signed(path: Path, limit: int) -> bytes:
    """The body of a file written by ``write_signed`` (the sha256 of the body, a newline, the body)
    once the digest matches: a cached file changed by one number must not load. Only a regular file
    of at most ``limit`` bytes is read. ValueError when it does not verify, OSError when unreadable."""
    data = read_regular(path, limit)
    if data is None:
        raise ValueError(f"{path} is not a regular file of at most {limit} bytes")
    digest, _, body = data.partition(b"\n")
    if hashlib.sha256(body).hexdigest().encode() != digest:
        raise ValueError(f"{path}: sha256 mismatch")
    return body


def write_signed(path: Path, body: bytes) -> None:
    """Write (the sha256 of ``body``, a newline, ``body``) by an atomic rename; a failure (a
    read-only cache) is not an error: the caller builds the file's content again next time."""
    tmp = path.with_name(f".tmp-{path.name}-{os.urandom(6).hex()}")
    try:
        path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
        tmp.write_bytes(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


def _memo_read(path: Path) -> dict:
    """The memo's entries once its sha256 line verifies (``read_signed``); a memo that does not
    (changed by hand, truncated, the unsigned format of older versions) counts as empty and is
    written again."""
    try:
        memo = json.loads(read_signed(path, _MEMO_LIMIT))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        _debug("ignoring %s: %s", path, e)
        return {}
    return memo if isinstance(memo, dict) else {}


def _memo_write(path: Path, key: str, value: str) -> None:
    """Add ``key → value`` (keeping the newest entries), signed, by an atomic replace
    (``write_signed``); a failure (read-only cache, a race with another writer) only costs a
    recomputation later."""
    memo = {k: v for k, v in _memo_read(path).items() if isinstance(v, str) and k != key}
    memo = dict(list(memo.items())[-(_MEMO_ENTRIES - 1):])
    memo[key] = value
    write_signed(path, json.dumps(memo).encode())  # insertion order: the newest last


def _memoized(memo_path: Path, key: str, compute: Callable[[], str], store: bool = True) -> str:
    value = _memo_read(memo_path).get(key)
    if isinstance(value, str) and value:
        return value
    value = compute()
    if store:
        _memo_write(memo_path, key, value)
    return value


def source_hash_of(package_dir: Path, memo_dir: Path | None = None) -> str:
    """The content hash of a package's sources (``memo_dir`` is accepted for old callers and not
    used: see SOURCE_MEMO)."""
    return _hash_source_tree(package_dir)


def tkjit_source_hash(memo_dir: Path | None = None) -> str:
    """sha256 over every .py and .lark file of the installed tkjit package, by content, once per
    process (about 1 ms)."""
    found = _source_hashes.get("tkjit")
    if found is None:
        found = _source_hashes["tkjit"] = _hash_source_tree(Path(tkjit.__file__).parent)
    return found


def file_identity(path: str) -> tuple[str, bool]:
    """A memo's pre-key for a binary: its real path, device, inode, size, mtime and ctime (ns).
    Replacing the file changes the inode or the ctime, and an in-place edit changes the ctime even
    when it puts size and mtime back (the kernel sets the ctime; ``utime`` cannot). The flag says
    whether the file is settled (RACY_SECONDS old) so that a memo entry may be written for it."""
    real = os.path.realpath(path)
    st = os.stat(real)
    key = f"{real}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}"
    return key, time.time() - max(st.st_mtime, st.st_ctime) > RACY_SECONDS


def assembler_version(memo_dir: Path | None = None) -> str:
    """ptxas's version (part of the key). ``ptxas --version`` is a subprocess: with ``memo_dir``,
    its answer is kept in ``memo_dir/memo-assembler-version.json`` under the binary's identity
    (``file_identity``), so a process that finds it there runs no subprocess (nor imports
    toolchain.py). Hashing the binary instead (37 MB) would cost ten times the subprocess."""
    if memo_dir is None:
        return _ptxas_version()
    from .runtime.tool_paths import find_tool
    key, settled = file_identity(find_tool("ptxas"))
    return _memoized(Path(memo_dir) / ASSEMBLER_MEMO, key, _ptxas_version, store=settled)


def _ptxas_version() -> str:
    from .runtime import toolchain
    return toolchain.ptxas_version()


_VERSION_FILES = {"lark": ("__init__.py", r"__version__\s*(?::\s*str\s*)?=\s*[\"']([^\"']+)"),
                  "numpy": ("version.py", r"^version\s*=\s*[\"']([^\"']+)")}
_runtime_versions: dict[str, str] = {}


def runtime_versions() -> dict[str, str]:
    """The versions of what shapes a compiled kernel besides tkjit and ptxas: Python, lark (the
    parse) and numpy (constant folding). Read without importing lark or numpy, which a cached load
    never imports: from the module when it is loaded, else from its version file."""
    if not _runtime_versions:
        found = {"python": f"{sys.implementation.name}-{sys.version.split()[0]}"}
        for name, (file, pattern) in _VERSION_FILES.items():
            found[name] = _library_version(name, file, pattern)
        _runtime_versions.update(found)
    return dict(_runtime_versions)


def _library_version(name: str, file: str, pattern: str) -> str:
    version = getattr(sys.modules.get(name), "__version__", None)
    if isinstance(version, str):
        return version
    try:
        import importlib.util
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin:
            return "absent"
        text = (Path(spec.origin).parent / file).read_text(errors="replace")
    except (ImportError, OSError, ValueError):
        return "unknown"
    match = re.search(pattern, text, re.MULTILINE)
    return match.group(1) if match else "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def cache_key(*, kernel_text: str, options: dict, arch: str, assembler_version: str,
              extra: dict | None = None, source_hash: str | None = None) -> str:
    """The key of everything that changes a compiled kernel. ``options``/``extra`` must be JSON.
    ``source_hash`` is tkjit's (default: ``tkjit_source_hash()``).

    The kernel text goes in exactly as given: a normalization (of newlines, of trailing blanks)
    can disagree with the lexer (a lone carriage return is a blank to it, so a ``#`` comment runs
    on past one), and shifts the line:col that a hit's decision log reports."""
    return hashlib.sha256(_json_bytes({
        "tkjit": tkjit.__version__, "source": source_hash or tkjit_source_hash(),
        "kernel": kernel_text, "options": options, "arch": arch,
        "assembler": assembler_version, "extra": extra or {}, "runtime": runtime_versions(),
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


MAX_FILE = 1 << 30
"""The largest file an entry may list (a cubin is a few MB)."""


def _read_file(path: Path, limit: int, name: str) -> bytes:
    """An entry's file, read only if it is a regular file of at most ``limit`` bytes."""
    data = read_regular(path, limit)
    _check(data is not None, f"{name}: not a regular file of at most {limit} bytes")
    return data


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
        manifest = json.loads(_read_file(path / MANIFEST, _MEMO_LIMIT, MANIFEST))
        _check(isinstance(manifest, dict) and manifest.get("format") == FORMAT, "unknown format")
        _check(manifest.get("key") == key, "manifest names another key")
        listed = manifest.get("files")
        _check(isinstance(listed, dict) and METADATA in listed, "manifest lists no metadata.json")
        files = {}
        for name, info in listed.items():
            _check(_valid_name(name) and isinstance(info, dict), f"bad manifest entry {name!r}")
            size = info.get("size")
            _check(isinstance(size, int) and 0 <= size <= MAX_FILE, f"{name}: bad size {size!r}")
            data = _read_file(path / name, size, name)
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
            size = sum(f.lstat().st_size for f in path.iterdir() if stat.S_ISREG(f.lstat().st_mode))
            created = name = detail = None
            try:
                created = json.loads(_read_file(path / MANIFEST, _MEMO_LIMIT, MANIFEST)).get("created")
                metadata = json.loads(_read_file(path / METADATA, MAX_FILE, METADATA))
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
        if options.get("strided"):
            parts.append("strided")
        if options.get("lowering"):
            parts.append(f"{options['lowering']} lowering")
        if options.get("require_hopper"):
            parts.append("require_hopper")
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
