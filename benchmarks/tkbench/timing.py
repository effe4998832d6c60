"""Timing callables: device events around each call, warm-up first, the median of many runs.

On a GPU with Triton, ``triton.testing.do_bench`` does it (events per call, and it clears the L2
between calls); without Triton, CUDA events directly. On the CPU (the dry run) a host clock
times a few calls: those numbers only show that the script works.

``measure_pair`` times tkjit and its reference in alternating rounds (A B, B A, A B, ...). A GPU
running one heavy kernel for a second heats up and lowers its clock (on an H200, tkjit's D=128
attention read 3-8% slower when timed again after cuDNN, in the same row of the session-6 run),
so whichever side is timed second would be handicapped; alternating puts the drift on both sides.

``Rotation`` holds several independent input sets when one set fits in L2, so that consecutive
calls do not find their inputs in the cache.
"""
from __future__ import annotations

import itertools
import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable

MAX_SETS = 16
ROTATION_MEMORY_FRACTION = 0.25   # rotation never takes more than this share of free memory


@dataclass(frozen=True)
class Timing:
    """Milliseconds per call: the median, the 20th and 80th percentiles (the spread), and how."""
    median_ms: float
    p20_ms: float | None
    p80_ms: float | None
    runs: int
    method: str

    def to_json(self) -> dict:
        return {"median_ms": self.median_ms, "p20_ms": self.p20_ms, "p80_ms": self.p80_ms,
                "runs": self.runs, "method": self.method}


def measure(fn: Callable[[], object], ctx) -> Timing:
    """Time ``fn`` the way the context says (see the module docstring)."""
    if not ctx.cuda:
        return _host_clock(fn)
    if ctx.have_triton:
        return _do_bench(fn, ctx.warmup_ms, ctx.rep_ms)
    return _cuda_events(fn, ctx.warmup_ms, ctx.rep_ms)


PAIR_ROUNDS = 8
"""Rounds of ``measure_pair``: each side gets ``rep_ms / PAIR_ROUNDS`` per round."""


def measure_pair(fn_a: Callable[[], object], fn_b: Callable[[], object], ctx) -> tuple[Timing, Timing]:
    """Time ``fn_a`` and ``fn_b`` in alternating rounds, each side warmed up once first; the
    medians are over all of a side's calls. An exception from either propagates."""
    if not ctx.cuda:
        return _host_clock(fn_a), _host_clock(fn_b)
    timer = _do_bench_all if ctx.have_triton else _cuda_events_times
    fns = (fn_a, fn_b)
    for fn in fns:
        timer(fn, ctx.warmup_ms, 0.0)
    times: tuple[list[float], list[float]] = ([], [])
    share = ctx.rep_ms / PAIR_ROUNDS
    for r in range(PAIR_ROUNDS):
        for side in ((0, 1) if r % 2 == 0 else (1, 0)):
            times[side].extend(timer(fns[side], 0.0, share))
    method = ("triton.testing.do_bench" if ctx.have_triton else "torch.cuda.Event") + \
        f", interleaved with the other side in {PAIR_ROUNDS} rounds"
    return _summary(times[0], method), _summary(times[1], method)


def _do_bench_all(fn, warmup_ms: float, rep_ms: float) -> list[float]:
    """Every call's time, or (an older Triton without return_mode="all") the round's median."""
    from triton.testing import do_bench
    rep_ms = max(rep_ms, 1e-3)
    try:
        return [float(t) for t in do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="all")]
    except (AssertionError, TypeError, ValueError):
        return [float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))]


def _summary(times_ms: list[float], method: str) -> Timing:
    ordered = sorted(times_ms)
    if len(ordered) >= 5:
        p20, _, p80 = _quantiles(ordered, (0.2, 0.5, 0.8))
    else:
        p20, p80 = ordered[0], ordered[-1]
    return Timing(statistics.median(ordered), p20, p80, len(ordered), method)


def _quantiles(ordered: list[float], qs: tuple[float, ...]) -> list[float]:
    last = len(ordered) - 1
    return [ordered[min(last, max(0, round(q * last)))] for q in qs]


def _do_bench(fn, warmup_ms: float, rep_ms: float) -> Timing:
    from triton.testing import do_bench
    try:
        times = do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="all")
    except (AssertionError, TypeError, ValueError):   # an older Triton without return_mode="all"
        median = do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")
        return Timing(float(median), None, None, 0, "triton.testing.do_bench(median)")
    return _summary([float(t) for t in times], "triton.testing.do_bench")


def _cuda_events(fn, warmup_ms: float, rep_ms: float) -> Timing:
    return _summary(_cuda_events_times(fn, warmup_ms, rep_ms), "torch.cuda.Event")


def _cuda_events_times(fn, warmup_ms: float, rep_ms: float) -> list[float]:
    import torch
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 5, 1e-3)
    for _ in range(max(1, int(warmup_ms / estimate))):
        fn()
    runs = min(1000, max(5, int(rep_ms / estimate)))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    for begin, finish in zip(starts, ends):
        begin.record()
        fn()
        finish.record()
    torch.cuda.synchronize()
    return [b.elapsed_time(f) for b, f in zip(starts, ends)]


def _host_clock(fn, runs: int = 3) -> Timing:
    fn()
    times = []
    for _ in range(runs):
        begin = time.perf_counter()
        fn()
        times.append((time.perf_counter() - begin) * 1000)
    return _summary(times, "host clock (CPU dry run)")


class Rotation:
    """Input sets taken in turn: enough that together they are at least twice the L2, when the
    device memory allows; one set when a set alone is already twice the L2."""

    def __init__(self, make_set: Callable[[], tuple], set_bytes: int, ctx):
        wanted = 1 if set_bytes >= 2 * ctx.l2_bytes else math.ceil(2 * ctx.l2_bytes / set_bytes) + 1
        affordable = max(1, int(ctx.free_bytes * ROTATION_MEMORY_FRACTION) // max(1, set_bytes))
        self.sets = [make_set() for _ in range(max(1, min(wanted, affordable, MAX_SETS)))]
        self._cycle = itertools.cycle(self.sets)

    def __len__(self) -> int:
        return len(self.sets)

    def next(self) -> tuple:
        return next(self._cycle)
