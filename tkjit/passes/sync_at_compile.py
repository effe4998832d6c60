"""The compile-time synchronization check: which trip-count cases, the verdict cache, the decision.

Not a pass: the ``async-schedule`` pass calls ``check`` once, at its end, on the protocol it reads
back from the IR it made (``async_schedule.protocol_from_ir``) -- the programs the general
lowering walks and prints, step by step -- or, where the schedule could not be written as IR,
on the ``mbarrier`` pass's protocol object, which the emitter then follows (logged).

Modes: ``quick`` (trip counts 0, 1 and stages+1, a persistent run of 3 tiles, consumers' own trips),
``full`` (every case of ``sync_report.default_cases``), ``off``, or ``auto``: quick, and full when
compiling in debug mode. A violation raises ``sync_check.SyncError``, which names the ring, the
stage, the step and the interleaving.
"""
from __future__ import annotations

import functools

from ..errors import PassError
from .manager import PassContext
from .sync_protocol import Protocol
from .sync_report import CheckReport, default_cases, own_trip_cases
from . import sync_verdicts

CHECKS = ("auto", "off", "quick", "full")


def quick_cases(proto: Protocol) -> list[tuple[int, ...]]:
    s = max((r.stages for r in proto.rings if not r.one_shot), default=1)
    cases = [(0,), (1,), (s + 1,)]
    if proto.persistent:
        cases.append((s + 1, 1, 2 * s + 1))
    if proto.own_trips:  # consumers' own trips differ, down to none (sync_report.own_trip_cases)
        cases += own_trip_cases(proto, [1, 2, s + 1])
    return cases


@functools.lru_cache(maxsize=256)
def _checked(proto: Protocol, cases: tuple[tuple[int, ...], ...], explore: bool) -> CheckReport:
    """Checking is a pure function of the protocol: kernels of one shape share the result (in this
    process, and through the verdicts kept on disk unless ``explore``). The key is the protocol's
    value (its fields, read back from the IR: equal protocols are one entry, whatever object or
    IR text they came from)."""
    return sync_verdicts.checked(proto, cases, _explore, explore=explore)


def _explore(proto: Protocol, cases: list[tuple[int, ...]]) -> CheckReport:
    from .sync_check import check_protocol  # the state machine: only when there is no cached verdict
    return check_protocol(proto, cases)


def check(proto: Protocol, mode: str, ctx: PassContext, source: str) -> None:
    """Check ``proto`` (``mode``: one of ``CHECKS``) and log the verdict with the protocol's text;
    ``source`` says which protocol it is (the IR read back, or the mbarrier pass's object)."""
    if mode not in CHECKS:
        raise PassError(f"async-schedule: check must be {', '.join(CHECKS)}, got '{mode}'")
    if mode == "auto":
        mode = "full" if ctx.options.debug else "quick"
    if mode == "off":
        ctx.decide(f"@{proto.kernel}", "sync protocol not checked", f"check=off ({source})",
                   protocol=proto.text())
        return
    cases = quick_cases(proto) if mode == "quick" else default_cases(proto)
    report = _checked(proto, tuple(cases), bool(ctx.options.debug))
    exhaustive = all(r.exhaustive for r in report.results)
    ctx.decide(f"@{proto.kernel}", f"sync protocol checked: {len(report.results)} trip-count "
               f"case(s), {'every interleaving' if exhaustive else 'bounded search'}",
               f"{source}: no deadlock, no stage overwritten before every consumer released it, no "
               "read before its bytes landed, no wait passing on a wrong phase",
               cases=[list(r.case) for r in report.results],
               states=[r.states for r in report.results], protocol=proto.text())
