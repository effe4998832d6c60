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
    """The file's JSON once its sha256 line matches (``cache.read_signed``)."""
    from ..cache import read_signed
    return read_signed(path, 1 << 20)


def _save(path: Path, verdict: dict) -> None:
    """Written signed by an atomic rename (``cache.write_signed``); a read-only cache only means
    doing the work again next time."""
    from ..cache import write_signed
    write_signed(path, json.dumps(verdict, sort_keys=True).encode())