"""The synchronization checker's report and the cases it explores: what the mbarrier pass and the
verdict cache need without loading the checker's state machine (sync_check imports it only
when a protocol is explored, not when its verdict is cached)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .sync_protocol import Protocol


@dataclass
class CaseResult:
    """One trip-count case the checker explored: the states it visited and whether it saw all of them."""

    case: tuple[int, ...]
    states: int
    exhaustive: bool


@dataclass
class CheckReport:
    """A protocol that passed the check, with its cases."""

    protocol: Protocol
    results: list[CaseResult] = field(default_factory=list)

    def text(self) -> str:
        lines = [f"sync check of {self.protocol.kernel}: {len(self.results)} cases, no violation"]
        for r in self.results:
            how = "exhaustive" if r.exhaustive else "bounded, then random walks"
            lines.append(f"  trips {case_text(r.case) or '-'}: {r.states} states ({how})")
        return "\n".join(lines)


def case_text(case) -> str:
    """"5, 5" or, with consumers' own trips, "5 (own 4/4/5), 5"."""
    return ", ".join(str(e) if isinstance(e, int) else f"{e[0]} (own {'/'.join(map(str, e[1:]))})"
                     for e in case)


def own_trip_cases(proto: Protocol, trips: list[int]) -> list[tuple]:
    """Cases for consumers that loop over their own trips: consumer 0 one short, all but the last
    one short, consumer 0 with one or none of its own (the rest idle), all but consumer 0 with none
    (their rows past the end: own-trips{past_end}), per tile and, persistent, over tiles of mixed
    counts (the phases carry on through the idle trips)."""
    n = proto.consumers
    def entry(total: int, short: list[int]) -> tuple[int, ...]:
        return (total, *(max(0, min(total, total - d)) for d in short + [0] * (n - len(short))))
    tiles = []
    for t in (x for x in trips if x > 0):
        tiles += [entry(t, [1]), entry(t, [1] * (n - 1)), entry(t, [t - 1]), entry(t, [t]),
                  entry(t, [0] + [t] * (n - 1))]
    tiles = list(dict.fromkeys(tiles))
    cases = [(e,) for e in tiles]
    if proto.persistent and tiles:
        s = max(trips)
        cases += [(entry(s, [1] * (n - 1)), entry(1, [1]), s, entry(s, [s - 1] * (n - 1))),
                  tuple(tiles[:3]), (entry(2, [1]),) * 3]
    return cases


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
    if proto.own_trips:
        cases += own_trip_cases(proto, trips)
    return cases
