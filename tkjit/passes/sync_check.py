"""The synchronization checker: explore a protocol's interleavings on the CPU, before any PTX.

    check_protocol(proto)            -> CheckReport, or raises SyncError on the first violation
    find_violation(proto, case)      -> Violation | None, for one case

For every case (trip counts per tile; see ``default_cases``) the producer, each consumer and
every TMA in flight are interleaved by a breadth-first search over ``sync_machine`` states with
a visited set: exhaustive up to ``max_states`` states per case, so the first violation found
comes with a shortest interleaving. Past the bound the search goes on as seeded random walks
(and the report says the case was sampled, not proven).

Cases: loop trip counts 0, 1, stages-1, stages, stages+1 and 2*stages+1 in one tile, and for a
persistent kernel three tiles of each (barrier phases carry on from tile to tile while every
tile restarts its loops), plus tiles of mixed trip counts.
"""
from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

from ..errors import PassError
from .sync_machine import Found, Machine, State
from .sync_protocol import Protocol
from .sync_report import CaseResult, CheckReport, case_text, default_cases  # noqa: F401 - re-exported

MAX_STATES = 60_000
RANDOM_WALKS = 400
TRACE_LINES = 14


@dataclass(frozen=True)
class Violation:
    kind: str
    ring: str
    stage: str
    case: tuple[int, ...]
    why: str
    trace: tuple[str, ...]
    at: str = ""
    blocked: tuple[str, ...] = ()

    def message(self, proto: Protocol) -> str:
        ring = proto.ring(self.ring) if self.ring else None
        shape = f" ({ring.stages} stages, {proto.consumers} consumers)" if ring else ""
        tiles = case_text(self.case)
        plural = "s" if len(self.case) != 1 else ""
        lines = [f"sync check of {proto.kernel}: {self.kind} in ring {self.ring or '?'}{shape}, "
                 f"stage {self.stage or '?'}, loop trip count(s) {tiles} ({len(self.case)} "
                 f"tile{plural}): {self.why}"]
        if self.at:
            lines.append(f"  at {self.at}")
        lines += [f"  {b}" for b in self.blocked]
        if not self.trace:
            lines.append("interleaving: none (stuck in the initial state)")
            return "\n".join(lines)
        shown = self.trace[-TRACE_LINES:]
        skipped = len(self.trace) - len(shown)
        lines.append(f"interleaving ({len(self.trace)} moves"
                     f"{f', the first {skipped} not shown' if skipped else ''}):")
        lines += [f"  {skipped + i + 1:3d}. {m}" for i, m in enumerate(shown)]
        return "\n".join(lines)


class SyncError(PassError):
    """The protocol can deadlock or corrupt a stage; ``violation`` says how and when."""

    def __init__(self, violation: Violation, proto: Protocol):
        super().__init__(violation.message(proto))
        self.violation = violation


def find_violation(proto: Protocol, case: tuple[int, ...], max_states: int = MAX_STATES,
                   seed: int = 0) -> tuple[Violation | None, CaseResult]:
    if not proto.persistent and len(case) != 1:
        raise ValueError(f"{proto.kernel} is not persistent: a CTA handles one tile, got {case}")
    m = Machine(proto, case)
    found, states, exhaustive = _bfs(m, max_states)
    if found is None and not exhaustive:
        found = _random_walks(m, random.Random(seed))
    return found, CaseResult(case, states, exhaustive)


def pair_violation(proto: Protocol) -> Violation | None:
    """A multicast pair's programs (a ring shared by ``cluster`` CTAs) must open with
    ``ClusterSync("start")`` -- each CTA initializes its own barriers and the peer arrives on them
    and multicasts into them -- and the consumers' must meet on ``ClusterSync("exit")`` after their
    tiles (drains of their own stores may follow it). The
    search explores one CTA with its peer mirroring it, so it cannot see this; checked here, by
    structure (session 16: a ping-pong pair without them hung on an H200, pairs.py)."""
    from .sync_protocol import ClusterSync
    shared = [r.name for r in proto.rings if r.cluster > 1]
    if not shared:
        return None
    start, exit_ = ClusterSync("start"), ClusterSync("exit")
    missing = [what for what, ok in (
        ("the producer does not open with the pair's cluster barrier", proto.producer[:1] == (start,)),
        ("the consumers do not open with the pair's cluster barrier", proto.consumer[:1] == (start,)),
        ("the consumers do not close with the pair's cluster barrier", exit_ in proto.consumer[1:])) if not ok]
    if not missing:
        return None
    return Violation("unordered-pair", shared[0], "", (), "; ".join(missing) + " (a CTA could arrive on or "
                     "multicast into its peer's barriers before the peer initialized them, or after it exited)", ())


def check_protocol(proto: Protocol, cases: list[tuple[int, ...]] | None = None,
                   max_states: int = MAX_STATES) -> CheckReport:
    violation = pair_violation(proto)
    if violation is not None:
        raise SyncError(violation, proto)
    report = CheckReport(proto)
    for case in cases if cases is not None else default_cases(proto):
        violation, result = find_violation(proto, case, max_states)
        if violation is not None:
            raise SyncError(violation, proto)
        report.results.append(result)
    return report


# -- search ---------------------------------------------------------------------------------
def _violation(m: Machine, found: Found, trace: list[str], blocked: list[str] = ()) -> Violation:
    stage = m.layout.stage_name(found.stage) if found.stage is not None else ""
    ring = m.layout.stage_ring[found.stage] if found.stage is not None else ""
    return Violation(found.kind, ring, stage, m.case, found.why, tuple(trace), found.at,
                     tuple(blocked))


def _deadlock(m: Machine, st: State, trace: list[str]) -> Violation:
    stuck = [r for r, (pc, prog) in enumerate(zip(st.pcs, m.programs)) if pc < len(prog)]
    bar = m.programs[stuck[0]][st.pcs[stuck[0]]].arg
    names = ", ".join(m.role_name(r) for r in stuck)
    stage = bar // 2 if bar < m.layout.sync_bar else None  # not a named barrier
    found = Found("deadlock", stage, f"no role can move and {names} "
                  f"{'has' if len(stuck) == 1 else 'have'} not finished")
    return _violation(m, found, trace, m.blocked(st))


def _path(parents: dict[State, tuple[State, str] | None], st: State) -> list[str]:
    out: list[str] = []
    while parents[st] is not None:
        st, label = parents[st]
        out.append(label)
    return out[::-1]


def _bfs(m: Machine, max_states: int) -> tuple[Violation | None, int, bool]:
    start = m.initial()
    parents: dict[State, tuple[State, str] | None] = {start: None}
    queue = deque([start])
    while queue:
        st = queue.popleft()
        moves = m.moves(st)
        if not moves:
            problem = _end(m, st, lambda: _path(parents, st))
            if problem is not None:
                return problem, len(parents), True
            continue
        for move in moves:
            try:
                nxt = m.step(st, move)
            except Found as f:
                trace = _path(parents, st) + [m.describe_move(st, move)]
                return _violation(m, f, trace), len(parents), True
            if nxt not in parents:
                if len(parents) >= max_states:
                    return None, len(parents), False
                parents[nxt] = (st, m.describe_move(st, move))
                queue.append(nxt)
    return None, len(parents), True


def _end(m: Machine, st: State, trace) -> Violation | None:
    if not m.finished(st):
        return _deadlock(m, st, trace())
    try:
        m.check_end(st)
    except Found as f:
        return _violation(m, f, trace())
    return None


def _random_walks(m: Machine, rng: random.Random) -> Violation | None:
    for _ in range(RANDOM_WALKS):
        st, trace = m.initial(), []
        while True:
            moves = m.moves(st)
            if not moves:
                problem = _end(m, st, lambda: trace)
                if problem is not None:
                    return problem
                break
            move = rng.choice(moves)
            label = m.describe_move(st, move)
            try:
                st = m.step(st, move)
            except Found as f:
                return _violation(m, f, trace + [label])
            trace.append(label)
    return None
