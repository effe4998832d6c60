"""The synchronization checker's report and the cases it explores: what the mbarrier pass and the
verdict cache need without loading the checker's state machine (sync_check imports it only
when a protocol is explored, not when its verdict is cached)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .sync_protocol import Protocol


@dataclass
class CaseResult:
    case: tuple[int, ...]
    states: int
    exhaustive: bool


@dataclass
class CheckReport:
    protocol: Protocol
    results: list[CaseResult] = field(default_factory=list)

    def text(self) -> str:
        lines = [f"sync check of {self.protocol.kernel}: {len(self.results)} cases, no violation"]
        for r in self.results:
            how = "exhaustive" if r.exhaustive else "bounded, then random walks"
            lines.append(f"  trips {', '.join(map(str, r.case)) or '-'}: {r.states} states ({how})")
        return "\n".join(lines)


def default_cases(proto: Protocol) -> list[tuple[int, ...]]:
    loop_stages = [r.stages for r in proto.rings if not r.one_shot] or [1]
    trips: list[int] = []
    for s in sorted(set(loop_stages)):
        for t in (0, 1, s - 1, s, s + 1, 2 * s + 1):
            if t not in trips:
                trips.append(t)
    cases = [(t,) for t in trips]
    if proto.persistent:
        cases += [(t,) * 3 for t in trips]
        s = max(loop_stages)
        cases += [(s + 1, 1, 0, 2 * s + 1), (s - 1, s, s + 1)]
        if proto.pingpong:  # consumers alternate: odd and even tile counts, skips over 0-trip tiles
            cases += [(s + 1,) * 4, (1,) * 5, (0, 1, 0, 1, 2)]
    return cases
