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
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import PassError
from ..ir.core import Kernel
from ..ir.ops import For
from .decisions import subject_of
from .hopper import (MBARRIER_BYTES, SMEM_LIMIT, ceil_to, check_supported_loads, nbytes,
                     one_shot_loads, pipelined_loops, shared_loads, stores_of_register_tiles)
from .manager import Pass, PassContext, register_pass
from .smem_buffers import buffers, stage_data_bytes, stage_stride

MAX_PINNABLE = 8


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

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        for name, value in (("stages", self.stages), ("max-stages", self.max_stages)):
            if not 0 <= value <= MAX_PINNABLE or (name == "max-stages" and value == 0):
                raise PassError(f"pipeline: {name} must be 1 to {MAX_PINNABLE}, got {value}")
        check_supported_loads(kernel)
        loops = pipelined_loops(kernel)
        decided = {loop: self.stages or loop.attrs.get("stages", 1) for loop in loops}
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

    def choose(self, kernel: Kernel, loop: For, decided: dict[For, int]) -> tuple[int, str]:
        if self.stages:
            return self.stages, "forced by the pass option"
        if "stages" in loop.attrs:
            return loop.attrs["stages"], "pinned by the kernel"
        consumers = kernel.attrs.get("consumers", 1)
        staging = {store: "chunks" for store in stores_of_register_tiles(kernel)}
        bufs = buffers(kernel, decided, staging, consumers)
        ring = next(b for b in bufs if b.kind == "ring" and b.op is loop)
        beside = [b for b in bufs if b is not ring and b.overlaps_in_time(ring)]
        reserved = sum(ceil_to(b.size, b.align) for b in beside)
        stride = stage_stride(loop)
        fit = 0
        while reserved + self.barrier_bytes(kernel, loop, decided, fit + 1) + (fit + 1) * stride <= SMEM_LIMIT:
            fit += 1
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
        later = [b for b in bufs if b is not ring and not b.overlaps_in_time(ring)]
        if later:
            why += "; " + ", ".join(b.name for b in later) + " can reuse the ring after the loop"
        return n, why

    def barrier_bytes(self, kernel: Kernel, loop: For, decided: dict[For, int], n: int) -> int:
        """The mbarrier words (128-byte rounded) with ``n`` stages on ``loop``: a full/empty pair
        per stage of every ring (a loop not decided yet counts as max-stages) and per tile loaded
        once per tile."""
        pairs = len(one_shot_loads(kernel))
        for other in decided:
            if other is loop:
                pairs += n
            elif self.stages or "stages" in other.attrs:  # forced, pinned or decided already
                pairs += decided[other]
            else:
                pairs += self.max_stages
        return ceil_to(MBARRIER_BYTES * 2 * pairs, 128)
