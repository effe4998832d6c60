"""The disk cache: keys, entry integrity, corruption as a miss, concurrency, and `tkjit cache`."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import tkjit
from tkjit import cache as C
from tkjit.cache import DiskCache, cache_command, cache_key
from tkjit.config import reset_config
from tkjit.errors import TkError

REPO = Path(tkjit.__file__).resolve().parent.parent
BASE = dict(kernel_text="kernel k(a: gl<f32, M>):\n    x = load(a)\n", options={"stages": 4, "warps": 8},
            arch="sm_90a", assembler_version="ptxas 13.0.88")
KEY = cache_key(**BASE)
FILES = {"kernel.cubin": bytes(range(256)) * 4, "kernel.ptx": b".version 8.7\n.target sm_90a\n"}
META = {"name": "gemm", "block": 384, "params": [{"kind": "gl", "name": "a", "dtype": "f32"}]}


@pytest.fixture(autouse=True)
def _no_user_cache(tmp_path, monkeypatch):
    """No test may touch the user's real cache directory."""
    monkeypatch.setenv("TKJIT_CACHE_DIR", str(tmp_path / "env-cache"))
    reset_config()
    yield
    reset_config()


@pytest.fixture
def cache(tmp_path) -> DiskCache:
    return DiskCache(tmp_path / "cache")


def entry_dir(cache: DiskCache, key: str = KEY) -> Path:
    return cache.root / key[:2] / key


def leftovers(root: Path) -> list[str]:
    return [p.name for p in root.iterdir() if p.name.startswith((".tmp-", ".trash-"))]


# --- keys ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("change", [
    {"options": {"stages": 3, "warps": 8}}, {"options": {"stages": 4, "warps": 8, "debug": True}},
    {"arch": "sm_100a"}, {"assembler_version": "ptxas 12.8"}, {"extra": {"torch": "2.5"}},
    {"kernel_text": BASE["kernel_text"].replace("load", "tma_load")},
    {"kernel_text": BASE["kernel_text"].replace("    x", "  x")},           # indentation is kept
    {"kernel_text": BASE["kernel_text"] + "# a comment\n"},                 # comments are kept
])
def test_key_changes_with_what_changes_output(change):
    assert cache_key(**{**BASE, **change}) != KEY


@pytest.mark.parametrize("text", [
    "kernel k(a: gl<f32, M>):   \n    x = load(a)\t\n",                     # trailing whitespace
    "kernel k(a: gl<f32, M>):\r\n    x = load(a)\r\n",                      # CRLF
    "\n\n  \nkernel k(a: gl<f32, M>):\n    x = load(a)\n\n   \n",           # blank lines around
    "kernel k(a: gl<f32, M>):\n    x = load(a)",                            # no final newline
    "kernel k(a: gl<f32, M>):\r    x = load(a)\n",                         # a lone CR: a blank
])
def test_key_is_the_text_exactly_as_the_lexer_sees_it(text):
    """No normalization: one that disagrees with the lexer gives two kernels one key, and a
    shifted text's hit would report the first text's line:col."""
    assert cache_key(**{**BASE, "kernel_text": text}) != KEY


def test_a_lone_carriage_return_in_a_comment_is_another_kernel():
    """The lexer reads a lone CR as a blank, so the comment runs on over the store."""
    stored = "y = x * 2.0 # note\n    Y.tile(i, 0) = y\n"
    commented_out = stored.replace("# note\n", "# note\r")
    assert cache_key(**{**BASE, "kernel_text": stored}) != cache_key(**{**BASE, "kernel_text": commented_out})


def test_key_has_the_python_lark_and_numpy_versions(monkeypatch):
    versions = C.runtime_versions()
    assert set(versions) == {"python", "lark", "numpy"} and sys.version.split()[0] in versions["python"]
    import lark
    import numpy
    assert versions["lark"] == lark.__version__ and versions["numpy"] == numpy.__version__
    monkeypatch.setattr(C, "_runtime_versions", {**versions, "numpy": "0.0.1"})
    assert cache_key(**BASE) != KEY


def test_library_versions_are_read_without_importing(monkeypatch):
    monkeypatch.delitem(sys.modules, "lark")
    import lark as real_lark
    monkeypatch.delitem(sys.modules, "lark")
    assert C._library_version("lark", *C._VERSION_FILES["lark"]) == real_lark.__version__
    assert "lark" not in sys.modules
    monkeypatch.setitem(sys.modules, "lark", real_lark)


def test_key_ignores_option_order():
    assert cache_key(**{**BASE, "options": {"warps": 8, "stages": 4}}) == KEY


def test_key_changes_with_tkjit_version_and_source(monkeypatch):
    monkeypatch.setattr(C, "tkjit_source_hash", lambda: "0" * 64)
    other_source = cache_key(**BASE)
    assert other_source != KEY
    monkeypatch.setattr(tkjit, "__version__", "9.9.9")
    assert cache_key(**BASE) != other_source


def test_source_hash_covers_py_and_lark_files_by_path_and_contents(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "frontend").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "frontend" / "grammar.lark").write_text("start: NAME\n")
    h = C._hash_source_tree(pkg)
    (pkg / "notes.txt").write_text("ignored")
    (pkg / "a.pyc").write_bytes(b"ignored")
    assert C._hash_source_tree(pkg) == h
    (pkg / "frontend" / "grammar.lark").write_text("start: NUMBER\n")
    assert C._hash_source_tree(pkg) != h
    (pkg / "frontend" / "grammar.lark").write_text("start: NAME\n")
    (pkg / "a.py").rename(pkg / "b.py")
    assert C._hash_source_tree(pkg) != h


def test_source_hash_is_of_the_tkjit_package_once_per_process(monkeypatch):
    monkeypatch.setattr(C, "_source_hashes", {})  # this process's: the checkout may have changed since
    assert C.tkjit_source_hash() == C._hash_source_tree(REPO / "tkjit")

    def rehash(package_dir):
        raise AssertionError("hashed the sources twice in one process")
    monkeypatch.setattr(C, "_hash_source_tree", rehash)
    assert C.tkjit_source_hash() == C._source_hashes["tkjit"]


def _package(root: Path) -> Path:
    pkg = root / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "sub" / "grammar.lark").write_text("start: NAME\n")
    return pkg


def test_source_hash_sees_an_edit_that_keeps_size_and_mtime(tmp_path):
    """`cp -p`, `rsync -a` or a same-size fix: the hash is of the contents, across processes too
    (the memo directory that used to key it by size and mtime is not consulted)."""
    pkg, memo = _package(tmp_path), tmp_path / "memo"
    before = C.source_hash_of(pkg, memo)
    a = pkg / "a.py"
    st = a.stat()
    a.write_text("x = 2\n")
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert a.stat().st_size == st.st_size and a.stat().st_mtime_ns == st.st_mtime_ns
    after = C.source_hash_of(pkg, memo)
    assert after != before and after == C._hash_source_tree(pkg)
    assert not memo.exists() or not (memo / C.SOURCE_MEMO).exists()


FAKE_PTXAS = """#!/bin/sh
echo run >> "{runs}"
echo "ptxas: NVIDIA (R) Ptx optimizing assembler"
echo "Cuda compilation tools, release 13.0, {version}"
"""


def _fake_ptxas(tmp_path, monkeypatch):
    from tkjit.runtime import toolchain
    runs, ptxas = tmp_path / "runs", tmp_path / "ptxas"
    ptxas.write_text(FAKE_PTXAS.format(runs=runs, version="V13.0.88"))
    ptxas.chmod(0o755)
    monkeypatch.setenv("TKJIT_PTXAS", str(ptxas))
    reset_config()  # the environment is read once, into the Config
    toolchain._tool_version.cache_clear()
    return runs, ptxas, toolchain._tool_version.cache_clear


def test_assembler_version_runs_ptxas_once_per_binary(tmp_path, monkeypatch):
    runs, ptxas, fresh_process = _fake_ptxas(tmp_path, monkeypatch)
    monkeypatch.setattr(C, "RACY_SECONDS", 0.0)  # the binary counts as settled at once
    memo = tmp_path / "memo"
    assert C.assembler_version(memo) == "13.0.88"
    fresh_process()
    assert C.assembler_version(memo) == "13.0.88"
    assert runs.read_text().count("run") == 1
    time.sleep(0.05)  # past the clock's granularity (the racy rule keeps this out of real use)
    st = ptxas.stat()
    ptxas.write_text(FAKE_PTXAS.format(runs=runs, version="V13.0.89"))  # an edit in place ...
    os.utime(ptxas, ns=(st.st_atime_ns, st.st_mtime_ns))                # ... keeping size and mtime
    assert ptxas.stat().st_size == st.st_size and ptxas.stat().st_mtime_ns == st.st_mtime_ns
    fresh_process()
    assert C.assembler_version(memo) == "13.0.89"
    assert runs.read_text().count("run") == 2
    fresh_process()


def test_assembler_version_is_not_memoized_for_a_binary_that_just_changed(tmp_path, monkeypatch):
    runs, ptxas, fresh_process = _fake_ptxas(tmp_path, monkeypatch)
    memo = tmp_path / "memo"
    assert C.assembler_version(memo) == "13.0.88"
    fresh_process()
    assert C.assembler_version(memo) == "13.0.88"
    assert runs.read_text().count("run") == 2 and not (memo / C.ASSEMBLER_MEMO).exists()
    fresh_process()


def test_a_changed_assembler_memo_is_not_believed(tmp_path, monkeypatch):
    """The ptxas-version memo is signed like the parser tables (``write_signed``): a version
    changed in the file by hand does not verify, so ptxas runs again and the memo is rewritten."""
    runs, ptxas, fresh_process = _fake_ptxas(tmp_path, monkeypatch)
    monkeypatch.setattr(C, "RACY_SECONDS", 0.0)
    memo = tmp_path / "memo"
    assert C.assembler_version(memo) == "13.0.88"
    path = memo / C.ASSEMBLER_MEMO
    digest, body = path.read_bytes().split(b"\n", 1)
    assert C.hashlib.sha256(body).hexdigest().encode() == digest
    path.write_bytes(digest + b"\n" + body.replace(b"13.0.88", b"13.0.99"))  # a forged version
    fresh_process()
    assert C.assembler_version(memo) == "13.0.88"
    assert runs.read_text().count("run") == 2
    assert C.read_signed(path, 1 << 20).count(b"13.0.88") == 1  # rewritten, signed
    path.write_bytes(b'{"x": "13.0.99"}')  # the unsigned format of older versions: not read
    assert C._memo_read(path) == {}
    fresh_process()


# --- put / get ----------------------------------------------------------------------------------

def test_put_then_get_round_trips(cache):
    put = cache.put(KEY, FILES, META)
    got = cache.get(KEY)
    assert got == put and got.files == FILES and got.metadata == META
    assert got.path == entry_dir(cache) and got.key == KEY
    assert repr(got) == f"CacheEntry(key={KEY!r}, path={got.path!r}, metadata={got.metadata!r})"  # no binaries
    with pytest.raises(AttributeError):
        got.key = "other"  # type: ignore[misc]
    manifest = json.loads((got.path / "manifest.json").read_bytes())
    assert manifest["format"] == 1 and manifest["key"] == KEY and manifest["created"]
    assert set(manifest["files"]) == {*FILES, "metadata.json"}
    for name, info in manifest["files"].items():
        data = (got.path / name).read_bytes()
        assert info == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    assert leftovers(cache.root) == []


def test_get_of_an_absent_key_is_a_miss_and_creates_nothing(cache):
    assert cache.get(KEY) is None
    assert not cache.root.exists()


def test_entry_files_are_byte_identical_across_puts(tmp_path):
    a, b = DiskCache(tmp_path / "a"), DiskCache(tmp_path / "b")
    ea = a.put(KEY, FILES, META)
    eb = b.put(KEY, dict(reversed(FILES.items())), dict(reversed(META.items())))
    names = sorted(p.name for p in ea.path.iterdir())
    assert names == sorted(p.name for p in eb.path.iterdir())
    for name in names:
        if name != "manifest.json":
            assert (ea.path / name).read_bytes() == (eb.path / name).read_bytes(), name
    ma, mb = (json.loads((e.path / "manifest.json").read_bytes()) for e in (ea, eb))
    assert ma.pop("created") and mb.pop("created")
    assert ma == mb


def test_put_keeps_a_valid_existing_entry(cache):
    cache.put(KEY, FILES, META)
    second = cache.put(KEY, {"kernel.cubin": b"other"}, {"name": "other"})
    assert second.files == FILES and second.metadata == META
    assert cache.get(KEY).files == FILES
    assert leftovers(cache.root) == []


def test_fresh_root_is_private(tmp_path):
    old = os.umask(0o022)
    try:
        cache = DiskCache(tmp_path / "deep" / "cache")
        cache.put(KEY, FILES, META)
    finally:
        os.umask(old)
    assert (cache.root.stat().st_mode & 0o777) == 0o700


def test_existing_root_keeps_its_permissions(tmp_path):
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o755)
    DiskCache(root).put(KEY, FILES, META)
    assert (root.stat().st_mode & 0o777) == 0o755
    assert DiskCache(root).get(KEY).files == FILES


@pytest.mark.parametrize("name", ["metadata.json", "manifest.json", "../x", "a/b", ".hidden", ""])
def test_put_refuses_file_names_that_are_not_plain(cache, name):
    with pytest.raises(ValueError):
        cache.put(KEY, {name: b"x"}, META)


def test_keys_must_be_cache_keys(cache):
    with pytest.raises(ValueError):
        cache.get("../../etc")


def test_default_uses_the_configured_cache_dir(tmp_path):
    assert DiskCache.default().root == tmp_path / "env-cache"


# --- corruption is a miss, removed and rebuilt -------------------------------------------------

def _rewrite_manifest(path: Path, edit) -> None:
    manifest = json.loads((path / "manifest.json").read_bytes())
    edit(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))


def _garble(path: Path) -> None:
    data = bytearray((path / "kernel.cubin").read_bytes())
    data[100] ^= 0x01
    (path / "kernel.cubin").write_bytes(bytes(data))


def _listed(name: str, data: bytes) -> dict:
    """A manifest edit listing ``name`` with the right hash, so only other checks can catch it."""
    info = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    return lambda m: m["files"].update({name: info})


def _bad_metadata(data: bytes):
    def corrupt(path: Path) -> None:
        (path / "metadata.json").write_bytes(data)
        _rewrite_manifest(path, _listed("metadata.json", data))
    return corrupt


def _escaping_path(path: Path) -> None:
    """The manifest names a real file outside the entry, with its right hash."""
    outside = path.parent.parent / "outside.bin"
    outside.write_bytes(b"secret")
    _rewrite_manifest(path, _listed("../../outside.bin", b"secret"))


_metadata_not_json = _bad_metadata(b"{not json")


def _unreadable(path: Path) -> None:
    (path / "kernel.cubin").unlink()
    (path / "kernel.cubin").mkdir()  # reading it fails even as root


CORRUPTIONS = {
    "truncated file": lambda p: (p / "kernel.cubin").write_bytes((p / "kernel.cubin").read_bytes()[:-7]),
    "garbled byte": _garble,
    "deleted file": lambda p: (p / "kernel.ptx").unlink(),
    "unreadable file": _unreadable,
    "deleted manifest": lambda p: (p / "manifest.json").unlink(),
    "manifest bad JSON": lambda p: (p / "manifest.json").write_text('{"format": 1, "files": {'),
    "manifest not an object": lambda p: (p / "manifest.json").write_text("[1, 2]"),
    "manifest names a missing file": lambda p: _rewrite_manifest(p, _listed("ghost.bin", b"")),
    "manifest of another key": lambda p: _rewrite_manifest(p, lambda m: m.update(key="f" * 64)),
    "manifest path escapes": _escaping_path,
    "metadata.json not JSON": _metadata_not_json,
    "metadata.json not an object": _bad_metadata(b"[1,2]"),
    "entry is a file": lambda p: (__import__("shutil").rmtree(p), p.write_bytes(b"junk")),
}


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_corrupted_entry_is_a_logged_miss_and_is_rebuilt(cache, corrupt, caplog):
    cache.put(KEY, FILES, META)
    corrupt(entry_dir(cache))
    with caplog.at_level(logging.DEBUG, logger="tkjit.cache"):
        assert cache.get(KEY) is None
    assert any(r.name == "tkjit.cache" and KEY in r.getMessage() for r in caplog.records)
    assert not os.path.lexists(entry_dir(cache))  # removed, so it is rebuilt

    corrupt_again = cache.put(KEY, FILES, META)
    corrupt(corrupt_again.path)
    builds = []
    entry = cache.get_or_build(KEY, lambda: (builds.append(1), (FILES, META))[1])
    assert builds == [1] and entry.files == FILES and entry.metadata == META
    assert cache.get(KEY) == entry
    assert cache.get_or_build(KEY, lambda: pytest.fail("a valid entry must not be rebuilt")) == entry
    assert leftovers(cache.root) == []


@pytest.mark.parametrize("corrupt", [_garble, CORRUPTIONS["deleted manifest"], _metadata_not_json])
def test_put_replaces_a_corrupted_entry(cache, corrupt):
    cache.put(KEY, FILES, META)
    corrupt(entry_dir(cache))
    entry = cache.put(KEY, {"kernel.cubin": b"new"}, {"name": "new"})
    assert entry.files == {"kernel.cubin": b"new"}
    assert cache.get(KEY).metadata == {"name": "new"}
    assert leftovers(cache.root) == []


# --- many processes at once --------------------------------------------------------------------

WORKER = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from tkjit.cache import DiskCache
    root, key, meeting, n = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    built = []
    def build():
        # Wait until every process is building, so all of them race to put the same key.
        (meeting / str(os.getpid())).touch()
        deadline = time.time() + 30
        while len(os.listdir(meeting)) < n and time.time() < deadline:
            time.sleep(0.005)
        time.sleep(0.001 * (os.getpid() % 20))
        built.append(1)
        return {"kernel.cubin": b"cubin" * 1000, "kernel.ptx": b"ptx"}, {"name": "gemm"}
    entry = DiskCache(root).get_or_build(key, build)
    again = DiskCache(root).get(key)
    print(json.dumps({"built": len(built), "files": sorted(entry.files), "meta": entry.metadata,
                      "again": again is not None and again.files == entry.files}))
""")


@pytest.mark.parametrize("start", ["empty", "corrupted"])
def test_eight_processes_get_or_build_the_same_key(tmp_path, start):
    cache, meeting, n = DiskCache(tmp_path / "cache"), tmp_path / "meeting", 8
    meeting.mkdir()
    if start == "corrupted":
        _garble(cache.put(KEY, FILES, META).path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(cache.root), KEY, str(meeting), str(n)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for _ in range(n)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
        results.append(json.loads(out))
    assert all(r["built"] == 1 for r in results)  # all raced: every process built and put
    assert all(r["files"] == ["kernel.cubin", "kernel.ptx"] and r["meta"] == {"name": "gemm"}
               and r["again"] for r in results)
    assert [key for key, ok, _ in cache.verify() if ok] == [KEY] and len(cache.verify()) == 1
    assert cache.get(KEY).files["kernel.cubin"] == b"cubin" * 1000
    assert leftovers(cache.root) == []


# --- listing, verifying, clearing, and the CLI text --------------------------------------------

def _three_entries(cache: DiskCache) -> list[str]:
    keys = [cache_key(**{**BASE, "arch": arch}) for arch in ("sm_80", "sm_90", "sm_90a")]
    for i, key in enumerate(keys):
        cache.put(key, {"kernel.cubin": b"x" * (1000 * (i + 1))}, {"name": f"kernel{i}"})
    return keys


def test_entries_lists_key_size_created_and_name(cache):
    assert cache.entries() == []
    keys = _three_entries(cache)
    infos = cache.entries()
    assert [i.key for i in infos] == sorted(keys)
    by_key = {i.key: i for i in infos}
    for n, key in enumerate(keys):
        info = by_key[key]
        assert info.name == f"kernel{n}" and info.created
        assert info.size == sum(f.stat().st_size for f in entry_dir(cache, key).iterdir())
        assert info.size > 1000 * (n + 1)


def test_verify_reports_corrupted_entries_with_a_reason_and_keeps_them(cache):
    keys = _three_entries(cache)
    assert cache.verify() == [(key, True, "ok") for key in sorted(keys)]
    garbled, truncated = entry_dir(cache, keys[1]), entry_dir(cache, keys[2])
    (garbled / "kernel.cubin").write_bytes(b"y" * 2000)
    (truncated / "kernel.cubin").write_bytes(b"x" * 2999)
    report = {key: (ok, reason) for key, ok, reason in cache.verify()}
    assert report[keys[0]] == (True, "ok")
    assert report[keys[1]] == (False, "kernel.cubin: sha256 mismatch")
    assert report[keys[2]] == (False, "kernel.cubin: 2999 bytes, expected 3000")
    assert garbled.exists() and truncated.exists()


def test_clear_removes_entries_locks_and_stale_temporaries(cache):
    keys = _three_entries(cache)
    stale, fresh = cache.root / ".tmp-crashed", cache.root / ".tmp-writing"
    stale.mkdir(), fresh.mkdir()
    os.utime(stale, (time.time() - 3600,) * 2)
    (cache.root / ".trash-leftover").mkdir()
    _garble(entry_dir(cache, keys[0]))
    assert cache.get(keys[0]) is None  # removed under its lock
    assert (cache.root / keys[0][:2] / f"{keys[0]}.lock").exists()
    assert cache.clear() == 2
    assert cache.entries() == [] and cache.verify() == []
    assert sorted(p.name for p in cache.root.iterdir()) == [".tmp-writing"]  # a live writer's
    assert cache.clear() == 0


def test_cache_command_text(cache):
    assert cache_command("ls", cache).endswith(f"0 entries, 0 B in {cache.root}")
    keys = _three_entries(cache)
    ls = cache_command("ls", cache).splitlines()
    assert len(ls) == 4 and ls[-1].startswith("3 entries, ")
    assert any(keys[0][:16] in line and "kernel0" in line for line in ls)
    (entry_dir(cache, keys[2]) / "manifest.json").write_text("{")
    verify = cache_command("verify", cache).splitlines()
    assert verify[-1] == f"3 entries, 1 corrupted in {cache.root}"
    assert [line.split()[0] for line in verify[:-1]].count("CORRUPT") == 1
    assert any(line.startswith("CORRUPT") and keys[2][:16] in line for line in verify)
    assert cache_command("clear", cache) == f"removed 3 entries from {cache.root}"
    assert cache_command("ls", cache).startswith("0 entries")
    with pytest.raises(TkError, match="unknown cache action 'rm'"):
        cache_command("rm", cache)
