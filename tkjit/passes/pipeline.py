"""pipeline: how many stages each loop's shared-tile loads get, from the shared-memory budget.

A loop that loads shared tiles becomes a ring: while consumers compute on stage s, the producer
fills the next stages. The stage count is as many stages as fit in 232,448 bytes next to every
buffer that is in use while the loop runs (tiles loaded once per tile, the other rings, epilogue
staging tiles in their smallest form, the mbarrier words), capped at ``max-stages`` (8). The
count follows the tile size: ThunderKittens measured 1 -> 4 stages as 260 -> 760 TFLOPS on its
128x256 GEMM, where 4 is also all that fits; with small tiles a stage carries little work, and
more of them in flight is what hides the load latency (an H200 gemm at M = 128, N = K = 4096
with 64x64 tiles: 4 stages 0.63x of cuBLAS, 8 stages 0.89x). A ``stages`` attribute on the loop
(``@stages(N)``) pins it; the ``stages`` option forces every loop.
Records ``stages`` and ``stage_bytes`` (what one stage's loads bring: its expect-tx bytes).

Tiles loaded once per tile (outside any loop) of a persistent block loop get two *slots* (the
load's ``slots`` attribute) where every ring loop still keeps ``SLOT_MIN_STAGES`` stages beside
them: the mbarrier pass makes them a ring of two stages used tile after tile, so the producer
loads the next tile's copy while the consumers read this one's (the attention template's second
Q slot, as a schedule option of any kernel). Decided before the stage counts, which then count
both slots.

``staging=slot`` (off by default until measured; ``auto``: where it gives a ring loop a stage):
in a persistent block loop a staging tile is in use all tile long beside the rings, so it costs
them its bytes; a tile loaded once per tile with one slot whose every reader comes before the
staged store is dead from its last product until the producer loads the next tile's copy, which
it does only once the consumers released the slot. The store's staging then goes in that slot's
bytes (``staging_in``; smem-plan places it there, the mbarrier pass releases the slot at the end
of the tile, after the TMA store has read the staging), and the stage fit no longer counts it
(FlashAttention-3 keeps O's staging in Q's shared memory so).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import PassError
from ..ir.core import Kernel
from ..ir.ops import For
from .decisions import subject_of
from .hopper import (MBARRIER_BYTES, SMEM_LIMIT, block_loop, ceil_to, check_supported_loads, nbytes,
                     one_shot_loads, pipelined_loops, shared_loads, stores_of_register_tiles)
from .manager import Pass, PassContext, register_pass
from .smem_buffers import buffers, fits_in, stage_data_bytes, stage_stride, staging_sizes

MAX_PINNABLE = 8
STAGINGS = ("keep", "drop", "slot", "auto")
SLOT_MIN_STAGES = 3
"""The fewest stages a ring loop keeps beside two slots of the tiles loaded once per tile (the
attention template's Q2_MIN_STAGES: at D = 128 a second Q slot left 2 stages and lost)."""


@register_pass
@dataclass(frozen=True)
class PipelineStages(Pass):
    """The ``pipeline`` pass: stage count of every loop's loads from the shared-memory budget."""

    name = "pipeline"
    summary = "stage count of every loop's loads from the shared-memory budget"
    target_specific = True
    stages: int = 0
    """Force this many stages on every loop (0: pins, else decide)."""
    max_stages: int = MAX_PINNABLE
    """The most stages to choose (pins may exceed it, up to 8)."""
    slots: int = 0
    """Slots of each tile loaded once per tile in a persistent block loop: 0 decide (two where
    every ring keeps SLOT_MIN_STAGES stages), 1 one, 2 two where the rings keep theirs."""

    staging: str = "auto"
    """Register-tile stores of a persistent block loop: keep (staged where the staging fits),
    drop (from registers, no staging planned, wherever that gives a ring loop a stage), slot (the
    staging in the one slot of a tile loaded once per tile that is dead by the store, wherever it
    fits: ``choose_slot_staging``) or auto (the default: slot where a ring loop would otherwise
    keep a single stage, so that every trip's load waits for the previous trip's products).
    Measured (H200, 2026-11-27, same run, benchmarks/lowering_ab.py --pipeline): slot took
    attention_nol D = 256 (1 -> 2 stages) from 0.54x to 0.97x of one CTA per tile, but
    examples/attention.tk D = 128 causal (2 -> 3 stages) from 1.04/0.99/1.01x of the template to
    0.99/0.96/0.98x at N = 1k/4k/16k (its Q is released later, after the store's reads), so auto
    takes it only out of a one-stage ring. Measured
    (H200, 2026-11-27, examples/attention.tk against its template, same run, N = 1k..16k): D = 128
    causal, drop (3 stages) 0.91/0.93/0.96/0.94/1.00, keep (2 stages) 1.10/1.00/0.98/0.94/0.98
    with Q released early; D = 64, drop (5 stages) 0.96/0.97/1.01/1.02/1.03, keep (4 stages)
    1.05/1.05/1.04/1.04/1.05: the general lowering's stores from registers cost more than the
    stage gains, so drop is off."""

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        if self.staging not in STAGINGS:
            raise PassError(f"pipeline: staging must be {', '.join(STAGINGS)}, got '{self.staging}'")
        if self.slots not in (0, 1, 2):
            raise PassError(f"pipeline: slots must be 0 (decide), 1 or 2, got {self.slots}")
        for name, value in (("stages", self.stages), ("max-stages", self.max_stages)):
            if not 0 <= value <= MAX_PINNABLE or (name == "max-stages" and value == 0):
                raise PassError(f"pipeline: {name} must be 1 to {MAX_PINNABLE}, got {value}")
        check_supported_loads(kernel)
        loops = pipelined_loops(kernel)
        decided = {loop: self.stages or loop.attrs.get("stages", 1) for loop in loops}
        self.no_wide_staging(kernel, ctx)
        self.choose_slots(kernel, ctx, loops, decided)
        self.choose_staging(kernel, ctx, loops, decided)
        for loop in loops:
            decided[loop], why = self.choose(kernel, loop, decided)
            loop.attrs["stages"] = decided[loop]
            loop.attrs["stage_bytes"] = stage_data_bytes(loop)
            loads = " + ".join(f"{subject_of(ld.result)} {nbytes(ld.result.type.nbytes)}"
                               for ld in shared_loads(loop.regions[0]))
            ctx.decide(subject_of(loop), f"{decided[loop]} stage(s) of "
                       f"{nbytes(stage_data_bytes(loop))} ({loads}), "
                       f"{nbytes(stage_stride(loop))} apart", why, stages=decided[loop],
                       stage_bytes=stage_data_bytes(loop), stage_stride=stage_stride(loop))
        return kernel

    def choose_slots(self, kernel: Kernel, ctx: PassContext, loops: list[For],
                     decided: dict[For, int]) -> None:
        """Two slots for the tiles loaded once per tile of a persistent block loop, where every
        ring loop still gets at least ``SLOT_MIN_STAGES`` stages (or its pinned count) beside
        them: the producer then fills the next tile's slot while the consumers read this one's,
        so a tile starts with its one-shot tiles already landed (its first wgmma waits only for
        its ring's first stage). Option ``slots``: 1 keeps one, 2 asks for two wherever they fit."""
        once = one_shot_loads(kernel)
        if not once:
            return
        where = f"@{kernel.name}"
        names = ", ".join(subject_of(ld.result) for ld in once)
        if block_loop(kernel).attrs.get("schedule") != "persistent" or \
                block_loop(kernel).attrs.get("split", 1) > 1:
            return  # one tile per CTA: nothing to load ahead
        if self.slots == 1:
            ctx.decide(where, f"{names}: one slot", "pipeline{slots=1}")
            return
        for ld in once:
            ld.attrs["slots"] = 2
        short = []
        for loop in loops:
            need = decided[loop] if (self.stages or "stages" in loop.attrs) else SLOT_MIN_STAGES
            fit = self.fit(kernel, loop, decided)[0]
            if fit < need:
                short.append(f"the ring of {subject_of(loop)} would keep {fit} stage(s) (< {need})")
        if short:
            for ld in once:
                del ld.attrs["slots"]
            ctx.decide(where, f"{names}: one slot", "loaded once per tile in a persistent loop, but "
                       f"with a second slot {'; '.join(short)}: a ring that short starves the "
                       "loop (measured on the attention template: 2 stages with two Q slots "
                       "0.59-0.65x of 3 with one, H200)", slots=1)
            return
        ctx.decide(where, f"{names}: 2 slots", "loaded once per tile in a persistent loop: the "
                   "producer fills the next tile's slot while the consumers read this one's (the "
                   "slots used in turn, a ring of two stages released at the end of each tile), "
                   f"so the next tile's copy lands under this tile's work; every ring loop keeps "
                   f"at least {SLOT_MIN_STAGES} stages beside them (measured, H200, 2026-11-27, "
                   "examples/attention.tk D = 64 against its template, same run, N = 1k..16k: one "
                   "slot 0.92/0.98/1.01/1.03/1.04, two 1.04/1.04/1.04/1.04/1.05)", slots=2)

    @staticmethod
    def no_wide_staging(kernel: Kernel, ctx: PassContext) -> None:
        """A register-tile store to a tensor that is not 16-bit (an f32 output) is never staged:
        the staging is written with stmatrix, which moves 16-bit pairs, so the epilogue stores it
        from the accumulator fragments whatever is planned. Marked ``unstaged`` here, before the
        rings are sized, its bytes go to the rings instead of an unused staging tile."""
        from ..ir.types import BF16, F16
        for st in stores_of_register_tiles(kernel):
            g = st.operands[0].type
            if g.dtype not in (BF16, F16):
                st.attrs["unstaged"] = True
                ctx.decide(subject_of(st), "from registers: no staging tile",
                           f"it stores to {g.dtype.name}: the staging is written with stmatrix, which "
                           "moves 16-bit pairs, so the epilogue stores from the accumulator fragments "
                           "and the bytes a staging tile would take go to the rings", staging="registers")

    def choose_staging(self, kernel: Kernel, ctx: PassContext, loops: list[For],
                       decided: dict[For, int]) -> None:
        """``staging=drop`` (off by default): in a persistent block loop a staging tile is in use
        all tile long beside the rings (the producer fills the next tile's stages while the
        epilogue stores), so it costs them its bytes. Where a ring loop gains a stage without
        it, the register-tile stores go from registers (marked ``unstaged``: no staging
        planned, the epilogue pass stores them from the accumulator fragments)."""
        stores = stores_of_register_tiles(kernel)
        if self.staging == "keep" or self.stages or not stores or \
                block_loop(kernel).attrs.get("schedule") != "persistent":
            return
        if self.staging in ("slot", "auto"):
            self.choose_slot_staging(kernel, ctx, loops, decided, stores)
            return
        gains = []
        for loop in (lp for lp in loops if "stages" not in lp.attrs):
            staged = min(self.fit(kernel, loop, decided)[0], self.max_stages)
            for st in stores:
                st.attrs["unstaged"] = True
            bare = min(self.fit(kernel, loop, decided)[0], self.max_stages)
            for st in stores:
                del st.attrs["unstaged"]
            if bare > staged:
                gains.append(f"the ring of {subject_of(loop)} {staged} -> {bare} stages")
        if not gains:
            return
        for st in stores:
            st.attrs["unstaged"] = True
            ctx.decide(subject_of(st), "from registers: no staging tile",
                       "pipeline{staging=drop}: a persistent loop's staging tile is in use all tile "
                       f"long beside the rings, and without it {', '.join(gains)}", staging="registers")

    def choose_slot_staging(self, kernel: Kernel, ctx: PassContext, loops: list[For],
                            decided: dict[For, int], stores: list) -> None:
        """``staging=slot``/``auto``: a store's staging in the one slot of a tile loaded once per
        tile (``slot_host``), marked ``staging_in`` (the tile's index among the block body's
        one-shot loads) so that the stage fit no longer counts it beside the rings; ``auto``
        keeps it only where a ring loop gains a stage."""
        if block_loop(kernel).attrs.get("split", 1) > 1:
            return  # split-K: each CTA stores its part from registers
        once = one_shot_loads(kernel)
        if not once and self.staging == "auto":
            return  # nothing to weigh (a GEMM): no log line
        taken: set = set()
        for store in stores:
            host, why = self.slot_host(kernel, store, once, taken)
            if host is None:
                ctx.decide(subject_of(store), "staging beside the rings",
                           f"pipeline{{staging={self.staging}}}: {why}", staging="own")
                continue
            free = [lp for lp in loops if "stages" not in lp.attrs]
            before = {lp: min(self.fit(kernel, lp, decided)[0], self.max_stages) for lp in free}
            store.attrs["staging_in"] = once.index(host)
            after = {lp: min(self.fit(kernel, lp, decided)[0], self.max_stages) for lp in free}
            gains = [f"the ring of {subject_of(lp)} {before[lp]} -> {after[lp]} stages"
                     for lp in free if after[lp] > before[lp]]
            starved = [lp for lp in free if before[lp] < 2 <= after[lp]]
            if self.staging == "auto" and not starved:
                del store.attrs["staging_in"]
                ctx.decide(subject_of(store), "staging beside the rings", "pipeline{staging=auto}: "
                           f"every ring keeps 2 or more stages beside it ({', '.join(gains) or 'no ring loop would gain a stage'} "
                           f"in the slot of tile {subject_of(host.result)}; measured slower where a "
                           "ring already had 2: the slot is released only after the store's reads)",
                           staging="own")
                continue
            taken.add(host)
            ctx.decide(subject_of(store), f"staging in the bytes of tile {subject_of(host.result)}",
                       f"pipeline{{staging={self.staging}}}: a persistent loop's staging is in use all "
                       f"tile long beside the rings; {subject_of(host.result)} has one slot and every "
                       "reader of it comes before the store, so its bytes are dead from its last "
                       "product until the consumers release the slot (at the end of the tile, once "
                       "the TMA store has read the staging) and the producer loads the next tile's "
                       f"copy; {', '.join(gains) if gains else 'no ring loop gains a stage'}",
                       staging="slot", gain=len(gains))

    @staticmethod
    def slot_host(kernel: Kernel, store, once: list, taken: set):
        """(the one-shot load whose one slot can hold ``store``'s staging, '') or (None, why):
        the store stands directly in the tile body, the tile has one slot, every op reading it
        comes before the store in the tile body, and the staging in its smallest form (one
        128-byte panel of 64 rows per consumer) fits its bytes and alignment."""
        body = block_loop(kernel).regions[0]
        if store.parent is not body:
            return None, "the store is inside a loop: it would write the slot while later trips read it"
        consumers = kernel.attrs.get("consumers", 1)
        size, align = staging_sizes(store, consumers, None, bool(kernel.attrs.get("pingpong")))["chunks"]
        at = body.ops.index(store)
        why = "no tile is loaded once per tile"
        for ld in once:
            name = subject_of(ld.result)
            if ld in taken:
                why = f"{name} already holds a staging"
            elif ld.attrs.get("slots", 1) != 1:
                why = f"{name} has {ld.attrs['slots']} slots (the next tile's copy lands while this one stores)"
            elif not fits_in(ld, size, align):
                why = f"the staging ({size:,} B, {align}-byte aligned) does not fit {name}'s one slot"
            elif not _read_before(body, ld, at):
                why = f"{name} is read at or after the store"
            else:
                return ld, ""
        return None, why

    def fit(self, kernel: Kernel, loop: For, decided: dict[For, int]):
        """How many stages of ``loop`` fit beside every buffer in use while it runs, with those
        buffers and the bytes they reserve."""
        consumers = kernel.attrs.get("consumers", 1)
        staging = {store: "chunks" for store in stores_of_register_tiles(kernel)}
        bufs = buffers(kernel, decided, staging, consumers)
        ring = next(b for b in bufs if b.kind == "ring" and b.op is loop)
        beside = [b for b in bufs if b is not ring and b.within is None and b.overlaps_in_time(ring)]
        reserved = sum(ceil_to(b.size, b.align) for b in beside)
        stride = stage_stride(loop)
        fit = 0
        while reserved + self.barrier_bytes(kernel, loop, decided, fit + 1) + (fit + 1) * stride <= SMEM_LIMIT:
            fit += 1
        return fit, reserved, beside, bufs, ring

    def choose(self, kernel: Kernel, loop: For, decided: dict[For, int]) -> tuple[int, str]:
        if self.stages:
            return self.stages, "forced by the pass option"
        if "stages" in loop.attrs:
            return loop.attrs["stages"], "pinned by the kernel"
        fit, reserved, beside, bufs, ring = self.fit(kernel, loop, decided)
        stride = stage_stride(loop)
        if fit < 1:
            others = ", ".join(f"the {b.name} ({nbytes(b.size)})" for b in beside) or "nothing else"
            left = SMEM_LIMIT - reserved - self.barrier_bytes(kernel, loop, decided, 1)
            raise PassError(f"one stage of this loop's loads needs {nbytes(stride)} but only "
                            f"{nbytes(left)} of shared memory are left beside "
                            f"{others}; use smaller tiles", loop.span)
        n = min(fit, self.max_stages)
        parts = [f"{nbytes(SMEM_LIMIT)}"]
        parts += [f"{nbytes(ceil_to(b.size, b.align))} for the {b.name}" for b in beside]
        parts.append(f"{nbytes(self.barrier_bytes(kernel, loop, decided, n))} for mbarriers")
        why = (f"{' - '.join(parts)} leave room for {fit} stage(s) of {nbytes(stride)}"
               + (f", capped at max-stages {self.max_stages}" if n < fit else ""))
        later = [b for b in bufs if b is not ring and b.within is None and not b.overlaps_in_time(ring)]
        if later:
            why += "; " + ", ".join(b.name for b in later) + " can reuse the ring after the loop"
        return n, why

    def barrier_bytes(self, kernel: Kernel, loop: For, decided: dict[For, int], n: int) -> int:
        """The mbarrier words (128-byte rounded) with ``n`` stages on ``loop``: a full/empty pair
        per stage of every ring (a loop not decided yet counts as max-stages) and per tile loaded
        once per tile."""
        pairs = sum(ld.attrs.get("slots", 1) for ld in one_shot_loads(kernel))
        for other in decided:
            if other is loop:
                pairs += n
            elif self.stages or "stages" in other.attrs:  # forced, pinned or decided already
                pairs += decided[other]
            else:
                pairs += self.max_stages
        return ceil_to(MBARRIER_BYTES * 2 * pairs, 128)


def _read_before(body, load, at: int) -> bool:
    """Whether every op reading ``load``'s tile sits in a tile-body op before index ``at``."""
    for i, top in enumerate(body.ops):
        if any(load.result in op.operands for op in top.walk()) and i >= at:
            return False
    return True


def staging_in_the_slot(kernel: Kernel, consumers: int) -> str:
    """Where a persistent block loop of ``kernel`` would starve a ring loop unless a store's staging
    took the one slot of a tile loaded once per tile (what ``staging=auto`` then does,
    ``choose_slot_staging``): that ring loop, its stages beside the staging, and the tile; else ''.
    For the grid pass, which runs before warp-spec and this pass: the block loop is asked as
    persistent with ``consumers`` consumers (both attributes restored). A ring short of 2 stages
    beside a staging kept in one slot would be shorter still beside two slots, so the one-shot tiles
    keep one slot there (``choose_slots``)."""
    blocks = block_loop(kernel)
    once, stores = one_shot_loads(kernel), stores_of_register_tiles(kernel)
    if not once or not stores:
        return ""
    saved = blocks.attrs.get("schedule"), kernel.attrs.get("consumers")
    blocks.attrs["schedule"], kernel.attrs["consumers"] = "persistent", consumers
    try:
        loops = pipelined_loops(kernel)
        decided = {loop: loop.attrs.get("stages", 1) for loop in loops}
        free = [lp for lp in loops if "stages" not in lp.attrs]
        plan = PipelineStages()
        for store in stores:
            host, _ = PipelineStages.slot_host(kernel, store, once, set())
            if host is None:
                continue
            for loop in free:
                fit = plan.fit(kernel, loop, decided)[0]
                if fit < 2:
                    return (f"the ring of {subject_of(loop)} would keep {fit} stage(s) beside the "
                            f"staging of {subject_of(store)} unless that staging took the one slot "
                            f"of {subject_of(host.result)}")
        return ""
    finally:
        for attrs, key, value in ((blocks.attrs, "schedule", saved[0]), (kernel.attrs, "consumers", saved[1])):
            if value is None:
                attrs.pop(key, None)
            else:
                attrs[key] = value
