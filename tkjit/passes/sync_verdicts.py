"""Verdicts of the synchronization checker, kept on disk: a protocol that passed on this machine
is not explored again.

The check is a pure function of the protocol (its complete dataclass ``repr``), the trip-count
cases and the checker's own code (tkjit's source hash), so a verdict keyed by all three is as good
as exploring again; it is kept beside the parser tables in tkjit's cache directory and costs a
file read instead of tens of milliseconds of state search on a cold compile. Only passing verdicts
are kept (a violation is always found again and reported); nothing is read or written when the
cache is off (``TKJIT_NO_CACHE``) or in debug mode, which always explores.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable

from .sync_report import CaseResult, CheckReport
from .sync_protocol import Protocol

Check = Callable[[Protocol, list[tuple[int, ...]]], CheckReport]


def checked(proto: Protocol, cases: tuple[tuple[int, ...], ...], check: Check, *, explore: bool = False) -> CheckReport:
    """``check(proto, cases)``, or its verdict from an earlier check of this exact protocol."""
    from ..config import get_config
    config = get_config()
    if explore or config.no_cache:
        return check(proto, list(cases))
    path = _path(config.cache_dir, proto, cases)
    try:
        data = json.loads(_verified(path))
        return CheckReport(proto, [CaseResult(tuple(e if isinstance(e, int) else tuple(e) for e in r["case"]),
                                              r["states"], r["exhaustive"])
                                   for r in data["results"]])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # missing or damaged: explore (and write it again)
    report = check(proto, list(cases))
    _save(path, {"protocol": proto.text(), "results": [
        {"case": list(r.case), "states": r.states, "exhaustive": r.exhaustive} for r in report.results]})
    return report


def _path(cache_dir: Path, proto: Protocol, cases: tuple[tuple[int, ...], ...]) -> Path:
    from ..cache import tkjit_source_hash
    described = json.dumps([repr(proto), [list(c) for c in cases], tkjit_source_hash(cache_dir)])
    return Path(cache_dir) / "sync-verdicts" / f"{hashlib.sha256(described.encode()).hexdigest()}.json"


def _verified(path: Path) -> bytes:
    """The verdict's JSON once the sha256 on the file's first line matches it (only a regular
    file of at most 1 MiB is read); ValueError when it does not verify, OSError when unreadable."""
    from ..cache import read_regular
    data = read_regular(path, 1 << 20)
    if data is None:
        raise ValueError(f"{path} is not a regular file of at most 1 MiB")
    digest, _, body = data.partition(b"\n")
    if hashlib.sha256(body).hexdigest().encode() != digest:
        raise ValueError(f"{path}: sha256 mismatch")
    return body


def _save(path: Path, verdict: dict) -> None:
    """Written (the sha256 of the JSON, a newline, the JSON) by an atomic rename; a failure (a
    read-only cache) only means exploring next time."""
    tmp = path.with_name(f".tmp-{path.name}-{os.urandom(6).hex()}")
    body = json.dumps(verdict, sort_keys=True).encode()
    try:
        path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
        tmp.write_bytes(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
