"""reg-budget: the setmaxnreg split between the producer and the consumer warpgroups.

At launch every thread gets ``.maxnreg`` = 65,536 / threads rounded down to a multiple of 8
(168 for 384 threads). The producer then gives registers back (``setmaxnreg.dec``) and the
consumers take them (``setmaxnreg.inc``): P for the producer and C for each consumer thread,
multiples of 8 in [24, 256], with 128·P + 128·N·C within what the CTA got at launch (so also
within 65,536). The producer keeps 40 -- what CUTLASS and ThunderKittens give it -- unless the
consumers' estimated need (``liveness``: live fragments + an allowance) does not fit beside
it, then 24 (FA3, fast.cu); consumers get the rest. ``regs`` on the kernel (``@regs(P, C)``)
or the pass options pin the split. Records ``regs = [P, C]`` and ``maxnreg`` on the kernel.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import PassError
from ..ir.core import Kernel
from ..ir.ops import Load
from .hopper import (REGISTER_FILE, SETMAXNREG_MAX, SETMAXNREG_MIN, WARPGROUP, consumer_registers,
                     entry_registers, register_pool, threads_for)
from .liveness import CONSUMER_OVERHEAD, PRODUCER_NEED, consumer_pressure
from .manager import Pass, PassContext, register_pass
from .mbarrier import level2_needs

PRODUCER_DEFAULT = 40
SMEM_PER_SM = 233_472
"""Shared memory an SM gives its CTAs (228 KB), each CTA also taking SMEM_RESERVED."""
SMEM_RESERVED = 1024
FRAGMENT_SLACK = 16
"""Registers beside the live fragments a lowered ``.maxnreg`` must still leave (half the estimate's
CONSUMER_OVERHEAD). Measured with ptxas on the no-product examples: RMSNorm's 49 live fragment
registers fit 63 registers, LayerNorm's 66 fit 94 under a cap of 96 and spilled 20 B under 80."""
OCCUPANCY_MEASURED = ("H200, session 15, general/auto same run at D = 1024 (benchmarks/results/"
                      "2026-11-27-nvidia-h200-s15-noprod-1.json): LayerNorm .maxnreg 104 -> 96 (3 -> 4 CTAs an "
                      "SM) 0.88 -> 0.93; RMSNorm 88 -> 64 (5 -> 6) 0.971 -> 0.978")


FREE_WHY = ("the estimate is not a bound worth giving: with no setmaxnreg the kernel needs no "
            ".maxnreg, and under .maxnreg with .minnctapersm 1 ptxas took as many or more registers "
            "than its own choice gives (ptxas 13.0 on the 16 norm and softmax example rows at D = 1024 "
            "to 8192, the occupancy cap included: RMSNorm 48 against 40 and softmax 56 against 40 at "
            "D = 4096, one or two CTAs an SM fewer, LayerNorm 64 against 54, never fewer CTAs an SM "
            "left to ptxas), so ptxas chooses, as for the register-tile backend; "
            "reg-budget{bound=estimate} gives the estimate's bound")
"""Why a kernel with no setmaxnreg and no occupancy cap gets no ``.maxnreg`` (``bound = auto``)."""
SINGLE_ROLE_MEASURED = ("rotary (consumers only, no shared memory) left to ptxas took 96 registers against 127 "
                        "and ran 1.036 against 1.060 of the register-tile backend in the same run (H200, "
                        "session 18, benchmarks/results/2026-11-28-nvidia-h200-s18-noprod-rotary.json)")
"""Why ``bound = auto`` frees only the row-block kernels (``no_product``), not consumers-only ones."""


def ctas_by_smem(smem: int, threads: int) -> int:
    """CTAs an SM that shared memory (``smem`` bytes a CTA) and the thread slots hold."""
    return min(SMEM_PER_SM // (smem + SMEM_RESERVED), 2048 // threads, 32)


def occupancy_cap(kernel: Kernel, threads: int, entry: int, peak: int):
    """(.maxnreg, CTAs an SM, why) lowered so that registers hold as many CTAs an SM as shared
    memory allows, or fewer but more than ``entry`` holds, where the cap still leaves the live
    fragments FRAGMENT_SLACK registers; None where no such cap is below ``entry``."""
    smem = kernel.attrs.get("smem")
    if not isinstance(smem, int):
        return None
    warps = -(-threads // 32)
    at_entry = REGISTER_FILE // (warps * 32 * entry)
    by_smem = ctas_by_smem(smem, warps * 32)
    for k in range(by_smem, at_entry, -1):
        cap = min(255, REGISTER_FILE // (k * warps * 32)) // 8 * 8
        if peak + FRAGMENT_SLACK <= cap < entry:
            return cap, k, (f"; lowered to {cap} so that registers hold {k} CTAs an SM (shared memory "
                            f"holds {by_smem}: {smem:,} B each), still {cap - peak} beside the live fragments "
                            f"(at least {FRAGMENT_SLACK}; {OCCUPANCY_MEASURED})")
    return None


def has_product(kernel: Kernel) -> bool:
    from ..ir.ops import MMA_OPS
    return any(isinstance(op, MMA_OPS) for op in kernel.walk())


@register_pass
@dataclass(frozen=True)
class RegBudget(Pass):
    """The ``reg-budget`` pass: setmaxnreg split between producer and consumers from a live-register
    estimate."""

    name = "reg-budget"
    summary = "setmaxnreg split between producer and consumers from a live-register estimate"
    target_specific = True
    producer: int = 0
    """Pin the producer's registers per thread (0: the kernel's pin, else decide); with consumer."""
    consumer: int = 0
    """Pin each consumer thread's registers (0: the kernel's pin, else decide)."""
    maxnreg: int = 0
    """Pin ``.maxnreg`` of a kernel with no matrix product (a multiple of 8, 32 to 248; 0: decide):
    its threads all get the same count, no setmaxnreg (for same-run A/Bs of CTAs an SM)."""
    bound: str = "auto"
    """A kernel with a row block in shared memory and no matrix product (``no_product``): ``auto``
    leaves its register count to ptxas (no ``.maxnreg`` and no ``.minnctapersm``; FREE_WHY);
    ``estimate``: ``.maxnreg`` from the liveness estimate with ``.minnctapersm 1`` and
    ``occupancy_cap`` (the bound before session 18). A consumers-only kernel keeps its bound
    either way (SINGLE_ROLE_MEASURED)."""

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        if self.bound not in ("auto", "estimate"):
            raise PassError(f"reg-budget: bound must be auto or estimate, got {self.bound!r}")
        n = kernel.attrs.get("consumers")
        if not isinstance(n, int):
            raise PassError("reg-budget: the kernel has no consumer count; run warp-spec first")
        pressure = consumer_pressure(kernel, 1 if kernel.attrs.get("pingpong") else n)  # ping-pong: whole tiles
        need = pressure.peak + CONSUMER_OVERHEAD
        pin = self.pinned(kernel)
        if self.maxnreg or (kernel.attrs.get("register_cap") and not has_product(kernel)):  # (stream-cols{maxnreg})
            return self.pinned_entry(kernel, ctx, need)
        filled = any(op.attrs.get("fill") == "cp.async" for op in kernel.walk() if isinstance(op, Load))
        if not kernel.attrs.get("producer", True) and not (filled and pin is None):
            return self.single_role(kernel, ctx, n, need, pressure, pin)
        if pin is None and not has_product(kernel):
            return self.no_product(kernel, ctx, n, need, pressure)
        threads = threads_for(n)
        entry = entry_registers(threads)
        pool = register_pool(n)
        if pin is not None:
            p, c = pin
            self.check(kernel, p, c, n, pool)
            how = "pinned by the pass options" if self.producer or self.consumer else "pinned by the kernel"
        else:
            p = PRODUCER_DEFAULT
            c = consumer_registers(n, p)
            how = f"the producer keeps {p} (its elected thread needs about {PRODUCER_NEED})"
            level2 = [(loop, x) for loop, x in level2_needs(kernel) if x > c]
            if need > c:
                p, c = SETMAXNREG_MIN, consumer_registers(n, SETMAXNREG_MIN)
                how = (f"tight: consumers need about {need} > {consumer_registers(n, PRODUCER_DEFAULT)}"
                       f" beside a producer of {PRODUCER_DEFAULT}, so the producer keeps only {p}")
            elif level2:
                loop, x = level2[0]
                where = loop.span.location() if loop.span else "a loop"
                p, c = SETMAXNREG_MIN, consumer_registers(n, SETMAXNREG_MIN)
                how = (f"tight: level 2 of the loop at {where} holds about {x} (the first product's "
                       f"result, the in-flight product's register A, its accumulator, + 32) > "
                       f"{consumer_registers(n, PRODUCER_DEFAULT)} beside a producer of "
                       f"{PRODUCER_DEFAULT}, so the producer keeps only {p}")
        kernel.attrs["regs"] = (p, c)
        kernel.attrs["maxnreg"] = entry
        used = WARPGROUP * p + WARPGROUP * n * c
        arithmetic = (f"{threads} threads start at {entry} = 65,536 / {threads} rounded down to a "
                      f"multiple of 8; 128·{p} + {n}·128·{c} = {used:,} <= {threads}·{entry} = "
                      f"{pool:,} <= 65,536")
        estimate = (f"a consumer thread needs about {need} = {pressure.peak} live fragment "
                    f"registers ({pressure.summary()}) + {CONSUMER_OVERHEAD} for addresses and "
                    "loop state")
        verdict = "" if need <= c else f"; {need} > {c}: expect ptxas to spill"
        ctx.decide(f"@{kernel.name}", f"setmaxnreg: producer {p}, consumers {c}; .maxnreg {entry} "
                   "at entry", f"{how}; {estimate}; {arithmetic}{verdict}",
                   producer=p, consumer=c, maxnreg=entry, consumer_need=need, pool=pool)
        return kernel

    def single_role(self, kernel: Kernel, ctx: PassContext, n: int, need: int, pressure,
                    pin) -> Kernel:
        """Without a producer every warpgroup does the same work: no setmaxnreg, only .maxnreg."""
        if pin is not None:
            raise PassError(f"@{kernel.name}: regs pins a producer/consumer split, but the kernel "
                            "loads no shared tile and so has no producer warpgroup", kernel.span)
        threads = threads_for(n, producer=False)
        entry = entry_registers(threads)
        kernel.attrs["maxnreg"] = entry
        verdict = "" if need <= entry else f"; {need} > {entry}: expect ptxas to spill"
        ctx.decide(f"@{kernel.name}", f"no setmaxnreg; .maxnreg {entry} for all {threads} threads",
                   f"one role only (no producer); a thread needs about {need} = {pressure.peak} "
                   f"live fragment registers ({pressure.summary()}) + {CONSUMER_OVERHEAD}; "
                   f"{threads} threads get {entry} = 65,536 / {threads} rounded down to a multiple "
                   f"of 8 (at most 255){verdict}; kept under bound=auto too: {SINGLE_ROLE_MEASURED}",
                   maxnreg=entry, consumer_need=need, registers="bound")
        return kernel

    def no_product(self, kernel: Kernel, ctx: PassContext, n: int, need: int, pressure) -> Kernel:
        """A row block in shared memory but no matrix product (filled by a producer's TMA, or by
        the consumers themselves: warp-spec's ``fill``): no accumulator for
        setmaxnreg to feed, and the kernel is bound by memory bandwidth, which wants several CTAs
        on an SM: no setmaxnreg, and ``.maxnreg`` the consumers' estimated need (a multiple of 8,
        at least 32) for every thread, instead of the register file split over one CTA's threads
        (measured on an H200, session 13: 256 threads at 248 registers, one CTA an SM, ran the
        norms at 0.42-0.71x of the register-tile backend; benchmarks/no_product_ab.py)."""
        threads = kernel.attrs.get("threads", threads_for(n))  # (warp-spec: a producer warp)
        entry = min(entry_registers(threads), max(32, -(-need // 8) * 8))
        ctas = REGISTER_FILE // (threads * entry)
        start = (f"no matrix product: no accumulator to give the consumers registers for, and a "
                 f"memory-bound kernel wants several CTAs an SM; a consumer thread needs about "
                 f"{need} = {pressure.peak} live fragment registers ({pressure.summary()}) + "
                 f"{CONSUMER_OVERHEAD}")
        if self.bound == "auto":  # the estimate binds nothing ptxas would not do better
            kernel.attrs["maxnreg"] = entry
            kernel.attrs["registers"] = "ptxas"
            ctx.decide(f"@{kernel.name}", f"no setmaxnreg; no .maxnreg: ptxas chooses for all {threads} threads",
                       f"{start}; {FREE_WHY}", maxnreg=entry, consumer_need=need, registers="ptxas")
            return kernel
        lowered = occupancy_cap(kernel, threads, entry, pressure.peak)
        why = ""
        if lowered is not None:
            entry, ctas, why = lowered
        kernel.attrs["maxnreg"] = entry
        ctx.decide(f"@{kernel.name}", f"no setmaxnreg; .maxnreg {entry} for all {threads} threads",
                   f"{start}, rounded up to a multiple of 8{why}: {threads} threads x {entry} "
                   f"leave room for {ctas} CTA(s) an SM by registers", maxnreg=entry, consumer_need=need,
                   registers="bound")
        return kernel

    def pinned_entry(self, kernel: Kernel, ctx: PassContext, need: int) -> Kernel:
        """``.maxnreg`` pinned by the pass option (kernels with no matrix product only)."""
        if has_product(kernel):
            raise PassError(f"@{kernel.name}: reg-budget{{maxnreg}} pins kernels with no matrix product; "
                            "this one has one (pin its setmaxnreg split with producer and consumer)",
                            kernel.span)
        cap, who = ((self.maxnreg, "the pass option maxnreg") if self.maxnreg else
                    (kernel.attrs["register_cap"], "stream-cols{maxnreg} (the kernel's register_cap)"))
        if self.maxnreg and (self.maxnreg % 8 or not 32 <= self.maxnreg <= 248):
            raise PassError(f"reg-budget: maxnreg must be a multiple of 8 from 32 to 248, got {self.maxnreg}")
        threads = kernel.attrs.get("threads", threads_for(kernel.attrs["consumers"]))
        kernel.attrs["maxnreg"] = cap
        ctas = REGISTER_FILE // (-(-threads // 32) * 32 * cap)
        ctx.decide(f"@{kernel.name}", f"no setmaxnreg; .maxnreg {cap} for all {threads} threads",
                   f"pinned by {who} (the estimate: about {need}); {threads} threads x "
                   f"{cap} leave room for {ctas} CTA(s) an SM by registers",
                   maxnreg=cap, consumer_need=need)
        return kernel

    def pinned(self, kernel: Kernel) -> tuple[int, int] | None:
        if self.producer or self.consumer:
            if not (self.producer and self.consumer):
                raise PassError("reg-budget: pin both producer and consumer, or neither")
            return self.producer, self.consumer
        regs = kernel.attrs.get("regs")
        if regs is None:
            return None
        if not (isinstance(regs, tuple) and len(regs) == 2 and all(isinstance(r, int) for r in regs)):
            raise PassError(f"@{kernel.name}: regs must be [producer, consumer], got {regs!r}",
                            kernel.span)
        return regs

    @staticmethod
    def check(kernel: Kernel, p: int, c: int, n: int, pool: int) -> None:
        for role, r in (("producer", p), ("consumer", c)):
            if r % 8 or not SETMAXNREG_MIN <= r <= SETMAXNREG_MAX:
                raise PassError(f"@{kernel.name}: setmaxnreg takes multiples of 8 from "
                                f"{SETMAXNREG_MIN} to {SETMAXNREG_MAX}; the {role} count is {r}",
                                kernel.span)
        if p > c:  # ptxas refuses the PTX otherwise (C7406), with no location in the kernel
            raise PassError(f"@{kernel.name}: registers {p}/{c}: setmaxnreg lowers the producer's "
                            f"count and raises the consumers', so the producer's ({p}) must not "
                            f"exceed the consumers' ({c})", kernel.span)
        used = WARPGROUP * p + WARPGROUP * n * c
        if used > pool:
            raise PassError(f"@{kernel.name}: registers {p}/{c} need 128·{p} + {n}·128·{c} = "
                            f"{used:,}, more than the {pool:,} the {threads_for(n)} threads get "
                            f"at launch; at most {consumer_registers(n, p)} per consumer beside "
                            f"a producer of {p}", kernel.span)
