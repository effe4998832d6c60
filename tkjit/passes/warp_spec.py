"""warp-spec: one producer warpgroup (it issues the TMA loads) and N consumer warpgroups (they
run the wgmmas and everything else), the block-level register tiles split across consumers by
64-row slabs.

N is the number of 64-row slabs of the tallest mma accumulator -- one slab per consumer --
lowered to a divisor of it until every consumer's live register fragments fit what setmaxnreg
can give a consumer (at most 7 consumers: 1,024 threads). ``consumers`` on the kernel
(``@consumers(N)``) or the pass option pins N. A kernel that loads no shared tile has nothing
for a producer to do: it gets no producer warpgroup. Records ``consumers``, ``producer``,
``threads`` and, for ping-pong consumers, ``pingpong = true`` on the kernel.

``mode``: how consumers share the work. ``cooperative``: every consumer owns a share of each
tile's rows (above). ``pingpong`` (CUTLASS's schedule): two consumers each compute whole tiles,
the CTA's tiles alternating between them on a persistent grid, taking turns on the tensor cores
so one's epilogue runs under the other's wgmmas; it needs the whole accumulator in one
consumer's registers, one accumulator (the GEMM pattern), a persistent block loop and no
split-K, and where one of these fails the kernel stays cooperative and the log says why.
``auto`` picks by ``pingpong_by_default``.

``fill``: who fills a row block kept in shared memory in a kernel with no matrix product (the
stream-cols cache read by ``copy_cols``). ``tma``: the producer warp's TMA load, a one-shot ring.
``cp.async``: the consumers themselves, each thread copying its 16-byte pieces with cp.async, then
meeting on their named barrier (the protocol's ``CopyFill`` step): no producer, no mbarrier, no
tensor map, as the register-tile backend fills it. ``auto`` picks by ``fill_by_default``; a kernel
``consumer_fill`` refuses keeps the producer (the log says why).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import PassError
from ..ir.core import Kernel
from ..ir.ops import MMA_OPS, Load
from ..ir.types import TileType
from .decisions import subject_of
from .epilogue_cost import PLAIN, epilogue_cost
from .hopper import (MAX_THREADS, SETMAXNREG_MIN, WARPGROUP, block_loop, consumer_registers, is_shared,
                     depends_on, has_producer, one_shot_loads, pipelined_loops, threads_for)
from .liveness import CONSUMER_OVERHEAD, consumer_pressure
from .manager import Pass, PassContext, register_pass

MAX_CONSUMERS = MAX_THREADS // WARPGROUP - 1
MODES = ("auto", "cooperative", "pingpong")
FILLS = ("auto", "tma", "cp.async")
PINGPONG_CONSUMERS = 2
PINGPONG_MIN_COLS = 128


MEASURED = ("H200, 2026-11-21, same-run A/B at 128x128 tiles, ratio to cuBLAS, cooperative -> ping-pong: "
            "4096^3 1.000 -> 1.025, 2048^3 1.011 -> 1.019, M = N = 4096 with K = 64 / 256 / 1024: 1.019 / "
            "1.060 / 1.019 -> 1.129 / 1.188 / 1.089, 8192x14336x4096 1.029 -> 1.064, 8192^3 1.048 -> 1.043; "
            "benchmarks/results/2026-11-21-nvidia-h200-pingpong.json")


def pingpong_by_default(kernel: Kernel, accs) -> tuple[bool, str]:
    """Whether ``auto`` chooses ping-pong for a kernel that can run it: when cooperative
    consumers would split a tile that one consumer can hold whole (128 x 128: two shares of 64
    rows, or one consumer with all 128 accumulator registers). Measured there; 64-row tiles
    (one cooperative consumer, ping-pong would add a second warpgroup) and tiles narrower than
    128 columns were not compared, so they stay cooperative."""
    rows, cols = accs[0].type.rows, accs[0].type.cols
    if rows // 64 < PINGPONG_CONSUMERS:
        return False, (f"auto: a {rows}-row tile is one cooperative consumer's; ping-pong there (a second "
                       "warpgroup) was not measured against it (warp-spec{mode=pingpong} asks for it)")
    if cols < PINGPONG_MIN_COLS:
        return False, (f"auto: {cols}-column tiles carry half the wgmma work per stage of the measured "
                       f"{PINGPONG_MIN_COLS}; ping-pong there was not measured (warp-spec{{mode=pingpong}} asks for it)")
    return True, ("auto: one consumer holds the whole tile, so the two take whole tiles in turn and "
                  f"each one's epilogue runs under the other's wgmmas ({MEASURED})")


@register_pass
@dataclass(frozen=True)
class WarpSpec(Pass):
    """The ``warp-spec`` pass: producer warpgroup + N consumer warpgroups; register tiles split by
    64-row slabs."""

    name = "warp-spec"
    summary = "producer warpgroup + N consumer warpgroups; register tiles split by 64-row slabs"
    target_specific = True
    consumers: int = 0
    """Pin the number of consumer warpgroups (0: the kernel's pin, else decide)."""
    mode: str = "auto"
    """auto, cooperative (consumers share each tile's rows) or pingpong (alternate whole tiles)."""
    fill: str = "auto"
    """Who fills a no-product kernel's row block in shared memory: auto, tma (the producer) or
    cp.async (the consumers; module docstring)."""

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        if self.mode not in MODES:
            raise PassError(f"warp-spec: mode must be {', '.join(MODES)}, got '{self.mode}'")
        if self.fill not in FILLS:
            raise PassError(f"warp-spec: fill must be {', '.join(FILLS)}, got '{self.fill}'")
        fill_why = self.choose_fill(kernel, ctx)
        accs = [op.result for op in kernel.walk() if isinstance(op, MMA_OPS)]
        tallest = max(accs, key=lambda v: v.type.rows, default=None)
        slabs = tallest.type.rows // 64 if tallest is not None else 1
        pingpong, why_pp = self.choose_mode(kernel, accs)
        pinned = self.consumers or kernel.attrs.get("consumers")
        if pingpong:
            if self.consumers and self.consumers != PINGPONG_CONSUMERS:
                raise PassError(f"@{kernel.name}: ping-pong runs {PINGPONG_CONSUMERS} consumers, the "
                                f"pass option pins {self.consumers}", kernel.span)
            n = PINGPONG_CONSUMERS
            why = (f"ping-pong: {n} consumers, each computing whole {tallest.type.rows}x"
                   f"{tallest.type.cols} tiles of {subject_of(tallest)} ({why_pp})")
        elif pinned:
            n = self.check_pin(kernel, pinned, slabs, tallest)
            how = "pinned by the pass option" if self.consumers else "pinned by the kernel"
            why = f"{how}; {self.split_text(tallest, n)}"
        else:
            n, why = self.choose(kernel, slabs, tallest)
        if not pingpong and why_pp:
            why += f"; cooperative, not ping-pong: {why_pp}"
        why += self.epilogue_text(kernel, pingpong)
        once = one_shot_loads(kernel)
        if once and all(ld.attrs.get("fill") == "cp.async" for ld in once) and not pipelined_loops(kernel):
            producer = False  # the consumers fill every shared tile themselves
        else:
            producer = has_producer(kernel)
        threads = threads_for(n, producer)
        warp = producer and not accs  # no product: no setmaxnreg, so the producer needs one warp only
        if warp:
            threads -= WARPGROUP - 32
            kernel.attrs["producer_warp"] = True
        else:  # absent: a producer warpgroup (every other kernel's IR prints as before)
            kernel.attrs.pop("producer_warp", None)
        kernel.attrs["consumers"] = n
        kernel.attrs["producer"] = producer
        kernel.attrs["threads"] = threads
        if pingpong:  # absent: cooperative (every other kernel's IR prints as before)
            kernel.attrs["pingpong"] = True
        else:
            kernel.attrs.pop("pingpong", None)
        pressure = consumer_pressure(kernel, 1 if pingpong else n)
        if fill_why:
            why += f"; {fill_why}"
        elif not producer:
            why += "; no shared-tile loads, so no producer warpgroup: consumers load for themselves"
            if not accs:
                why += self.straight_loads(kernel)
        if warp:
            why += ("; no matrix product, so no setmaxnreg (reg-budget) and no warpgroup-wide wgmma: the "
                    "producer is one warp (its elected thread issues the TMA loads), not an idle "
                    "warpgroup holding registers a memory-bound kernel wants for more CTAs an SM")
        first = "1 producer warp + " if warp else "1 producer + " if producer else ""
        roles = f"{first}{n} consumer warpgroup{'s' * (n > 1)}"
        ctx.decide(f"@{kernel.name}", f"{roles} = {threads} threads",
                   f"{why}; peak live fragments per consumer thread: {pressure.summary()}",
                   consumers=n, producer=producer, threads=threads, peak_registers=pressure.peak,
                   pingpong=pingpong)
        return kernel

    def choose_fill(self, kernel: Kernel, ctx: PassContext) -> str:
        """Mark the row blocks the consumers fill (``fill = "cp.async"`` on each load) where
        ``fill`` asks for it or ``auto`` chooses it; log the decision; the words for the roles'
        decision ('' where the kernel has no such row block)."""
        for op in one_shot_loads(kernel):
            op.attrs.pop("fill", None)
        loads, blocker = consumer_fill(kernel)
        if not loads and not blocker:
            return ""
        where = ", ".join(f"%{ld.result.hint}" for ld in loads) or "the row block"
        if self.fill == "tma" or blocker:
            why = ("warp-spec{fill=tma}" if self.fill == "tma" and not blocker else
                   f"the consumers cannot fill it: {blocker}")
            ctx.decide(f"@{kernel.name}", f"row block {where}: filled by the producer's TMA", why, fill="tma")
            return ""
        if self.fill == "auto":
            take, why = fill_by_default(kernel)
            if not take:
                ctx.decide(f"@{kernel.name}", f"row block {where}: filled by the producer's TMA", why, fill="tma")
                return ""
        else:
            why = "warp-spec{fill=cp.async}"
        for ld in loads:
            ld.attrs["fill"] = "cp.async"
            swizzle = ld.result.type.attr("swizzle")
            ctx.decide(f"%{ld.result.hint}", "laid out in the register-tile backend's row-XOR layout, "
                       f"not the layout pass's swizzle {swizzle}",
                       "the consumers fill it with cp.async and copy_cols reads it with the register-tile "
                       "backend's emitter, both in that backend's layout (smem.Geometry); the swizzle on its "
                       "type is a TMA's, and no TMA touches this tile", layout="row-xor")
        deferred = [f"%{ld.result.hint}" for ld in loads if ld.attrs.get("wait") == "deferred"]
        if deferred:  # (stream-cols' wait = deferred is the register-tile backend's)
            why += (f"; {', '.join(deferred)} (wait = deferred) leaves its copies in flight beside the next "
                    "block's copies and the work that does not read it: its copy_fill step only issues them, "
                    "and a fill_wait step before its first reader waits and meets, as the register-tile "
                    "backend waits for its deferred loads")
        ctx.decide(f"@{kernel.name}", f"row block {where}: filled by the consumers with cp.async",
                   f"{why}. Each consumer thread copies its 16-byte pieces of the block (cp.async.cg, "
                   "zero-filled past the tensor) in the register-tile backend's row-XOR layout, not the "
                   "layout pass's TMA swizzle, commits and waits for them, and the consumers meet on their "
                   "named barrier (the protocol's copy_fill step); copy_cols then reads the block with "
                   "the register-tile backend's emitter, with no barrier of its own", fill="cp.async")
        return ("the row block is filled by the consumers (cp.async), so no producer: no TMA, no "
                "mbarrier, no tensor map")

    @staticmethod
    def straight_loads(kernel: Kernel) -> str:
        """A kernel with no product and no producer (rotary): its consumers load their register tiles
        straight from global memory, which in the mma fragment's column order is one 2- or 4-byte
        load per element pair (no cp.async staging in this lowering), in the contiguous order one
        16-byte load a lane (``column_order = contiguous``, which ``layout.contiguous_columns``
        still checks; the register-tile backend's IR is the one from before this pass)."""
        kernel.attrs["column_order"] = "contiguous"
        return ("; no matrix product and no producer: the consumers' register tiles take the contiguous "
                "column order where it applies (16 bytes a lane, ld/st.global.v4), not the fragment order's "
                "2- and 4-byte loads")

    @staticmethod
    def epilogue_text(kernel: Kernel, pingpong: bool) -> str:
        """The epilogue's cost (epilogue_cost.py) where it does more than convert and store: what
        ping-pong consumers hide, and what ``@fill_sms`` weighs against the K loop."""
        loops = [op for op in pipelined_loops(kernel) if len(op.results) == 1 and isinstance(op.results[0].type, TileType)]
        cost = epilogue_cost(kernel, loops[0]) if len(loops) == 1 else None
        if cost is None or cost.cycles <= PLAIN:
            return ""
        hidden = ("it runs beside the other consumer's wgmmas, which hide only part of it (H200, "
                  "2026-11-27, ncu, 128x128 ping-pong at 4096^3: bias + gelu 298 K SM cycles against "
                  "the plain GEMM's 280 K, about a cycle a warp instruction of the epilogue, MUFU "
                  "ones no dearer than FMA ones; benchmarks/results/2026-11-27-nvidia-h200-s16-gelu-"
                  "rcp.json)" if pingpong else
                  "with cooperative consumers the tensor cores wait for it at every tile; @fill_sms "
                  "launches a half-width tile with ping-pong consumers where it is a large share of the tile "
                  "(fill_sms.SHORT_K_TRIPS scaled by it)")
        return f"; {cost.text()}: {hidden}"

    def choose_mode(self, kernel: Kernel, accs) -> tuple[bool, str]:
        """(ping-pong?, why): asked for or chosen by ``auto``, and possible for this kernel."""
        if self.mode == "cooperative":
            return False, ""
        blocker = self.pingpong_blocker(kernel, accs)
        if blocker:
            return False, (f"ping-pong asked for, but {blocker}" if self.mode == "pingpong"
                           else ("" if len(accs) != 1 else f"ping-pong cannot run: {blocker}"))
        if self.mode == "pingpong":
            return True, "asked for by the pass option mode=pingpong"
        return pingpong_by_default(kernel, accs)

    @staticmethod
    def pingpong_blocker(kernel: Kernel, accs) -> str:
        """What keeps this kernel from ping-pong consumers, or ''."""
        if len(accs) != 1:
            return f"it has {len(accs)} tensor-core accumulators (ping-pong is for one, the GEMM pattern)"
        if not has_producer(kernel):
            return "it loads no shared tile (no producer to fill a ring for both consumers)"
        blocks = block_loop(kernel)
        if blocks.attrs.get("schedule", "grid") != "persistent":
            return "the block loop is not persistent (a CTA has one tile, nothing to alternate)"
        if int(blocks.attrs.get("split", 1)) > 1:
            return "split-K gives each tile a cluster of its own (one tile per CTA)"
        loops = pipelined_loops(kernel)
        if len(loops) != 1 or any(isinstance(op, Load) and is_shared(op.result) for op in blocks.regions[0].ops):
            return ("ping-pong consumers alternate over one streamed loop per tile and nothing else the "
                    "producer fills (here: tiles loaded once per tile, or no such loop)")
        indices = set(blocks.regions[0].args)
        for loop in loops:
            if any(depends_on(v, indices) for v in loop.operands[:3]):
                return ("a streamed loop's trip count depends on the block indices (a consumer skips "
                        "the other's trips by its own count, so every tile must have the same)")
        from .mbarrier import is_tile_write
        written = next((op for op in blocks.walk() if is_tile_write(op)), None)
        if written is not None:
            where = f" ({written.NAME} at {written.span.location()})" if written.span else ""
            return ("it writes a shared tile from registers" + where + ": the consumers meet around that "
                    "write, and ping-pong consumers run alternate tiles")
        need, room = pingpong_fit(kernel)
        if need > room:
            return (f"a whole {accs[0].type.rows}x{accs[0].type.cols} accumulator needs about {need} "
                    f"registers per consumer thread, over the {room} two consumers can get")
        return ""

    def check_pin(self, kernel: Kernel, pinned, slabs: int, tallest) -> int:
        if not isinstance(pinned, int) or isinstance(pinned, bool) or not 1 <= pinned <= MAX_CONSUMERS:
            raise PassError(f"@{kernel.name}: consumers must be 1 to {MAX_CONSUMERS} (at most "
                            f"{MAX_THREADS} threads), got {pinned!r}", kernel.span)
        if tallest is None and pinned > 1:
            raise PassError(f"@{kernel.name}: {pinned} consumers are pinned, but the kernel has no "
                            "matrix product (mma) whose accumulator they could share; pin 1 or "
                            "drop @consumers", kernel.span)
        if slabs % pinned:
            raise PassError(f"@{kernel.name}: {pinned} consumers cannot share the {slabs} "
                            f"64-row slab(s) of {subject_of(tallest)} ({tallest.type}) evenly",
                            kernel.span)
        return pinned

    def choose(self, kernel: Kernel, slabs: int, tallest) -> tuple[int, str]:
        if tallest is None:  # as many warps as the register-tile backend would spread the tiles over
            from ..codegen.layout import choose_warp_grid
            grid, why = choose_warp_grid(kernel, {})
            if grid.warps > 4 and grid.warps % 4 == 0 and grid.warps <= 4 * MAX_CONSUMERS:
                return grid.warps // 4, (f"no tensor-core accumulator; {grid.warps} warps, as the register-tile "
                                         f"backend's layout would take ({why[0]['why']}): "
                                         f"{grid.warps // 4} consumer warpgroups")
            return 1, "no tensor-core accumulator to split: one consumer warpgroup"
        n, tried, need, room = fitting_split(kernel, slabs)
        if n is not None:
            lowered = f" (not {', '.join(tried)})" if tried else ""
            return n, (f"{self.split_text(tallest, n)}{lowered}; a consumer needs about "
                       f"{need} registers per thread and can get {room}")
        most = max((d for d in range(1, slabs + 1) if slabs % d == 0 and d <= MAX_CONSUMERS), default=1)
        peak = consumer_pressure(kernel, most).where()
        owner = tallest.owner
        what = (subject_of(tallest) if tallest.hint or owner.span is None
                else f"the {owner.NAME} at {owner.span.location()}")
        raise PassError(f"@{kernel.name}: the register tiles do not fit any consumer split of "
                        f"{what} ({tallest.type}): {'; '.join(tried)}; with {most} "
                        f"consumer(s) the peak is {peak}; use smaller tiles, or fewer tiles live at "
                        "once", kernel.span)

    @staticmethod
    def split_text(tallest, n: int) -> str:
        if tallest is None:
            return "no tensor-core accumulator"
        t: TileType = tallest.type
        return (f"the tallest accumulator {subject_of(tallest)} is {t.rows} rows = "
                f"{t.rows // 64} slab(s) of 64, so each of {n} consumers owns "
                f"{t.rows // n} rows of every {t.rows}-row register tile")


FILL_MEASURED = ("; measured (H200, 2026-11-27, session 16, three same runs of benchmarks/no_product_ab.py, "
                 "benchmarks/results/2026-11-27-nvidia-h200-s16-cpfill-{1,2,3}.json), over the register-tile "
                 "backend: the consumers' cp.async fill 0.959-1.052x on RMSNorm, residual + LayerNorm, LayerNorm "
                 "and softmax at D = 1024 and 2048, the producer's TMA fill 0.919-0.978x on the same rows")
"""What ``fill_by_default`` rests on (the A/B of benchmarks/no_product_ab.py's ``--variant``)."""


def fill_by_default(kernel: Kernel) -> tuple[bool, str]:
    """Whether ``fill=auto`` lets the consumers fill a row block they can fill (``consumer_fill``):
    always, by the measurements of ``FILL_MEASURED`` (faster than the TMA fill on every row
    measured), a row block split over a cluster (stream-cols' ``cluster``) included
    (``CLUSTER_FILL_MEASURED``)."""
    if int(block_loop(kernel).attrs.get("cluster", 1)) > 1:
        return True, ("auto: the consumers fill their CTA's slice of the row block themselves"
                      + CLUSTER_FILL_MEASURED)
    return True, ("auto: the consumers fill the block themselves, as the register-tile backend does "
                  "(with the producer's TMA fill the consumers waited twice as long for the block: "
                  "ncu, H200, session 15, 34% against 17% of the stall samples)" + FILL_MEASURED)


CLUSTER_FILL_MEASURED = (
    "; measured over a cluster (H200, 2026-11-27, session 16, same run, benchmarks/no_product_ab.py "
    "--variant, benchmarks/results/2026-11-27-nvidia-h200-s16-cluster-cpfill.json), over the "
    "producer's TMA fill at D = 4096 / 8192: faster on every row (RMSNorm 0.993 / 0.993 against 0.962 / "
    "0.938 of the register-tile backend, residual + LayerNorm 0.927 / 0.899 against 0.868 / 0.845, "
    "LayerNorm 0.972 / 0.932 against 0.895 / 0.866, softmax 0.963 / 0.971 against 0.937 / 0.929); since "
    "session 18 the cp.async fill runs at 0.98-1.04x the register-tile backend there "
    "(codegen/hopper/lower_layout.FILL_MEASURED), and lowering=auto takes it; warp-spec{fill=tma} pins "
    "the producer")
"""What ``fill_by_default`` rests on for a row block split over a cluster."""


def consumer_fill(kernel: Kernel) -> tuple[list[Load], str]:
    """The row blocks the consumers can fill themselves with cp.async (``fill``), and '' -- or
    [] and why not, for a kernel with a shared tile loaded once per tile and no matrix product
    ([] and '' for any other kernel). They can where the kernel has no product, no ring loop, a
    block loop of one tile per CTA on one CTA (the fill step ends in one meeting; nothing refills
    the block within a CTA), and every shared tile is a 16-bit one loaded once per tile that only
    ``copy_cols`` reads (the register-tile backend's reader of its own layout)."""
    from ..ir.ops import CopyCols
    loads = one_shot_loads(kernel)
    if not loads or any(isinstance(op, MMA_OPS) for op in kernel.walk()):
        return [], ""
    if pipelined_loops(kernel):
        return [], "a ring loop streams shared tiles (the producer fills its stages)"
    blocks = block_loop(kernel)
    if blocks.attrs.get("schedule", "grid") == "persistent":  # (a cluster split: one tile per CTA too)
        return [], ("a persistent block loop (a CTA refills the block tile after tile: "
                    "not built for consumer fills)")
    for ld in loads:
        readers = [op for op in kernel.walk() if ld.result in op.operands]
        if ld.result.type.dtype.nbytes != 2 or not readers or \
                not all(isinstance(op, CopyCols) for op in readers):
            return [], f"%{ld.result.hint} is not a 16-bit row block read by copy_cols only"
    return loads, ""


def pingpong_fit(kernel: Kernel) -> tuple[int, int]:
    """(the registers a ping-pong consumer thread needs to hold a whole tile: live fragments +
    CONSUMER_OVERHEAD, the registers each of the two can get beside the smallest producer)."""
    return (consumer_pressure(kernel, 1).peak + CONSUMER_OVERHEAD,
            consumer_registers(PINGPONG_CONSUMERS, SETMAXNREG_MIN))


def fitting_split(kernel: Kernel, slabs: int) -> tuple[int | None, list[str], int, int]:
    """(the most cooperative consumers, dividing ``slabs``, whose threads hold their share of the
    register tiles, or None; the counts tried before it and why each did not fit; that split's
    registers needed and available)."""
    tried: list[str] = []
    for n in sorted((d for d in range(1, slabs + 1) if slabs % d == 0), reverse=True):
        if n > MAX_CONSUMERS:
            tried.append(f"{n} (more than {MAX_THREADS} threads)")
            continue
        need, room = consumer_fit(kernel, n)
        if need <= room:
            return n, tried, need, room
        tried.append(f"{n}: {need} registers needed > {room}")
    return None, tried, 0, 0


def consumer_fit(kernel: Kernel, n: int) -> tuple[int, int]:
    """(the registers a thread of ``n`` cooperative consumers needs: live fragments +
    CONSUMER_OVERHEAD, the registers it can get beside the smallest producer)."""
    return consumer_pressure(kernel, n).peak + CONSUMER_OVERHEAD, consumer_registers(n, SETMAXNREG_MIN)


def planned_consumers(kernel: Kernel) -> int | None:
    """The cooperative consumer count this pass would give ``kernel`` (the pin, else ``choose``),
    for a pass that runs before it and weighs registers (grid: a persistent tile loop's state);
    None where no split fits (this pass then says why)."""
    pinned = kernel.attrs.get("consumers")
    if isinstance(pinned, int) and not isinstance(pinned, bool):
        return pinned
    accs = [op.result for op in kernel.walk() if isinstance(op, MMA_OPS)]
    tallest = max(accs, key=lambda v: v.type.rows, default=None)
    if tallest is None:
        return None
    try:
        return WarpSpec().choose(kernel, tallest.type.rows // 64, tallest)[0]
    except PassError:
        return None

