"""warp-spec: one producer warpgroup (it issues the TMA loads) and N consumer warpgroups (they
run the wgmmas and everything else), the block-level register tiles split across consumers by
64-row slabs.

N is the number of 64-row slabs of the tallest mma accumulator -- one slab per consumer --
lowered to a divisor of it until every consumer's live register fragments fit what setmaxnreg
can give a consumer (at most 7 consumers: 1,024 threads). ``consumers`` on the kernel
(``@consumers(N)``) or the pass option pins N. A kernel that loads no shared tile has nothing
for a producer to do: it gets no producer warpgroup. Records ``consumers``, ``producer`` and
``threads`` on the kernel.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import PassError
from ..ir.core import Kernel
from ..ir.ops import MMA_OPS
from ..ir.types import TileType
from .decisions import subject_of
from .hopper import (MAX_THREADS, SETMAXNREG_MIN, WARPGROUP, consumer_registers, has_producer,
                     threads_for)
from .liveness import CONSUMER_OVERHEAD, consumer_pressure
from .manager import Pass, PassContext, register_pass

MAX_CONSUMERS = MAX_THREADS // WARPGROUP - 1


@register_pass
@dataclass(frozen=True)
class WarpSpec(Pass):
    name = "warp-spec"
    summary = "producer warpgroup + N consumer warpgroups; register tiles split by 64-row slabs"
    target_specific = True
    consumers: int = 0
    """Pin the number of consumer warpgroups (0: the kernel's pin, else decide)."""

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        accs = [op.result for op in kernel.walk() if isinstance(op, MMA_OPS)]
        tallest = max(accs, key=lambda v: v.type.rows, default=None)
        slabs = tallest.type.rows // 64 if tallest is not None else 1
        pinned = self.consumers or kernel.attrs.get("consumers")
        if pinned:
            n = self.check_pin(kernel, pinned, slabs, tallest)
            how = "pinned by the pass option" if self.consumers else "pinned by the kernel"
            why = f"{how}; {self.split_text(tallest, n)}"
        else:
            n, why = self.choose(kernel, slabs, tallest)
        producer = has_producer(kernel)
        threads = threads_for(n, producer)
        kernel.attrs["consumers"] = n
        kernel.attrs["producer"] = producer
        kernel.attrs["threads"] = threads
        pressure = consumer_pressure(kernel, n)
        if not producer:
            why += "; no shared-tile loads, so no producer warpgroup: consumers load for themselves"
        roles = f"{'1 producer + ' if producer else ''}{n} consumer warpgroup{'s' * (n > 1)}"
        ctx.decide(f"@{kernel.name}", f"{roles} = {threads} threads",
                   f"{why}; peak live fragments per consumer thread: {pressure.summary()}",
                   consumers=n, producer=producer, threads=threads, peak_registers=pressure.peak)
        return kernel

    def check_pin(self, kernel: Kernel, pinned, slabs: int, tallest) -> int:
        if not isinstance(pinned, int) or isinstance(pinned, bool) or not 1 <= pinned <= MAX_CONSUMERS:
            raise PassError(f"@{kernel.name}: consumers must be 1 to {MAX_CONSUMERS} (at most "
                            f"{MAX_THREADS} threads), got {pinned!r}", kernel.span)
        if slabs % pinned:
            raise PassError(f"@{kernel.name}: {pinned} consumers cannot share the {slabs} "
                            f"64-row slab(s) of {subject_of(tallest)} ({tallest.type}) evenly",
                            kernel.span)
        return pinned

    def choose(self, kernel: Kernel, slabs: int, tallest) -> tuple[int, str]:
        if tallest is None:
            return 1, "no tensor-core accumulator to split: one consumer warpgroup"
        tried = []
        for n in sorted((d for d in range(1, slabs + 1) if slabs % d == 0), reverse=True):
            if n > MAX_CONSUMERS:
                tried.append(f"{n} (more than {MAX_THREADS} threads)")
                continue
            need = consumer_pressure(kernel, n).peak + CONSUMER_OVERHEAD
            room = consumer_registers(n, SETMAXNREG_MIN)
            if need <= room:
                lowered = f" (not {', '.join(tried)})" if tried else ""
                return n, (f"{self.split_text(tallest, n)}{lowered}; a consumer needs about "
                           f"{need} registers per thread and can get {room}")
            tried.append(f"{n}: {need} registers needed > {room}")
        raise PassError(f"@{kernel.name}: the register tiles do not fit any consumer split of "
                        f"{subject_of(tallest)} ({tallest.type}): {'; '.join(tried)}; use "
                        "smaller tiles", kernel.span)

    @staticmethod
    def split_text(tallest, n: int) -> str:
        if tallest is None:
            return "no tensor-core accumulator"
        t: TileType = tallest.type
        return (f"the tallest accumulator {subject_of(tallest)} is {t.rows} rows = "
                f"{t.rows // 64} slab(s) of 64, so each of {n} consumers owns "
                f"{t.rows // n} rows of every {t.rows}-row register tile")
