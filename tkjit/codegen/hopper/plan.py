"""The decisions the warp-specialized GEMM is emitted from: swizzles, consumers, the register
split, stages, the shared-memory map and the block order.

The scheduling passes (layout, warp-spec, pipeline, smem-plan, reg-budget) record these on the
IR, and the default sm_90a pipeline runs them, so the annotations are used as they are ("from
the <pass> pass"); that includes the epilogue's staging, which smem-plan places and sizes (the
store's ``smem``, ``staging`` and ``staging_cols``). Where they are absent (a pipeline without
those passes, e.g. ``-p canonicalize``) the same rule is computed here, locally, and the
decision log says so ("local rule"). Each decision is a ``{"decision", "value", "why"}`` entry.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .match import GemmMatch, NoMatch
from .wgmma import Operand

SMEM_LIMIT = 232_448          # opt-in dynamic shared memory per block (H100/H200)
REGISTER_FILE = 65_536
WARPGROUP = 128
SETMAXNREG_MIN, SETMAXNREG_MAX = 24, 256
SWIZZLE_SPANS = (128, 64, 32)
ALIGN = 1024                  # swizzled tiles start on their pattern's 1024-byte boundary
ALIGN_SLACK = 1024            # the kernel rounds the dynamic shared base up to 1024 at run time
MAX_STAGES = 4                # the local plan's cap (no pipeline pass ran); the pass goes up to 8
PRODUCER_REGS = 40
CONSUMER_OVERHEAD = 32        # registers a consumer needs besides its accumulators
MAX_WGMMA_N = 256
MAX_BOX = 256
TURN_BARRIER = 4
"""Named barriers 4 + c: ping-pong consumer c's turn on the tensor cores (gemm.py)."""


def consumer_rows(g: GemmMatch, consumers: int) -> int:
    """Rows of each tile a consumer computes: all of them with ping-pong consumers (the warp-spec
    pass's ``pingpong``: consumers alternate over whole tiles), else an equal share."""
    return g.bm if g.kernel.attrs.get("pingpong") else g.bm // consumers


def ceil_to(x: int, m: int) -> int:
    return -(-x // m) * m


def entry_registers(threads: int) -> int:
    return min(255, REGISTER_FILE // threads) // 8 * 8


def consumer_registers(consumers: int, producer: int) -> int:
    threads = WARPGROUP * (consumers + 1)
    share = (entry_registers(threads) * threads - WARPGROUP * producer) // (WARPGROUP * consumers)
    return min(SETMAXNREG_MAX, share // 8 * 8)


@dataclass
class Plan:
    """How the GEMM is emitted: operand spans, consumers, registers, stages and shared-memory layout."""

    span_a: int
    span_b: int
    consumers: int
    regs: tuple[int, int]
    maxnreg: int
    stages: int
    a_offset: int
    b_offset: int
    stage_stride: int
    bars: int
    smem_bytes: int
    persistent: bool
    group: int
    wgmma_n: int
    staging: int | None = None
    """Offset of the epilogue's staging tiles (None: registers store straight to C)."""
    staging_cols: int = 0
    """Columns of C each consumer stages per round (a multiple of 64; BN / it rounds a tile)."""
    split: int = 1
    """CTAs (one cluster) sharing each tile's K loop; their partials are added in shared memory."""
    reduce_offset: int = 0
    """Where a split tile's partials land in each CTA (over its drained ring)."""
    multicast: int = 1
    """CTAs per cluster sharing B's stages through TMA multicast (2: pairs of tiles along M,
    multicast.py); 1: none."""
    pingpong: bool = False
    """Consumers alternate over whole tiles and take turns on the tensor cores (warp-spec's
    ``pingpong``): consumer c computes the CTA's tiles c, c + 2, ..."""
    stream_k: bool = False
    """The tail tiles' K loops are split over every CTA of the persistent grid when the tiles
    leave a partial last wave (streamk.py; decided per launch by the kernel)."""
    deferred_epilogue: bool = False
    """A tile's accumulators are packed to 16 bits and stored after the next tile's first wgmma
    group is issued (``_deferred_epilogue``)."""
    decisions: list[dict] = field(default_factory=list)

    @property
    def threads(self) -> int:
        return WARPGROUP * (self.consumers + 1)

    def decide(self, what: str, value, why: str) -> None:
        self.decisions.append({"decision": what, "value": value, "why": why})


def swizzle_of(load, cols: int, elem: int) -> tuple[int, str]:
    """The swizzle span of a shared tile: its ``swizzle`` attribute, else the layout rule."""
    pinned = load.result.type.attr("swizzle")
    if pinned is not None:
        value = str(pinned)
        span = 0 if value in ("none", "0B", "0") else int(value.rstrip("B"))
        return span, "from the layout pass"
    row = cols * elem
    span = next((s for s in SWIZZLE_SPANS if row % s == 0), 0)
    return span, f"local rule (the layout pass's): largest of 128/64/32 B dividing a {row}-byte row"


def make_plan(g: GemmMatch) -> Plan:
    """The plan, or NoMatch naming what the Hopper path cannot do with these tiles."""
    elem = 2
    span_a, why_a = swizzle_of(g.load_a, g.bk, elem)
    b_cols = g.bn if g.b_major == "MN" else g.bk
    span_b, why_b = swizzle_of(g.load_b, b_cols, elem)
    if not span_a or not span_b:
        raise NoMatch("the Hopper GEMM reads swizzled shared tiles, but a tile has swizzle none")
    _check_boxes(g)
    consumers, why_c = _consumers(g)
    regs, maxnreg, why_r = _registers(g, consumers)
    wgmma_n = _wgmma_n(g, span_b)
    stages, a_off, b_off, stride, bars, smem, why_s, why_m, staging, staging_cols, why_e = \
        _memory(g, consumers, wgmma_n)
    blocks = g.blocks
    persistent = blocks.attrs.get("schedule", "grid") == "persistent"
    group = int(blocks.attrs.get("group", 1))
    split = g.split
    if split > 1:
        why_split = _check_split(g, consumers, stages * stride, min(a_off, b_off))
        persistent, staging, staging_cols = False, None, 0
        why_e = "a split tile's partials are added in the owning CTA's registers, which store to C"
    plan = Plan(span_a, span_b, consumers, regs, maxnreg, stages, a_off, b_off, stride, bars, smem,
                persistent, group, wgmma_n, staging, staging_cols, split, min(a_off, b_off))
    plan.pingpong = bool(g.kernel.attrs.get("pingpong"))
    if plan.pingpong and split > 1:
        raise NoMatch("ping-pong consumers alternate over a CTA's tiles; split-K gives a CTA one tile")
    if split > 1:
        plan.decide("split", split, why_split)
    plan.decide("backend", "wgmma", "the kernel is the GEMM pattern: TMA loads into an S-stage ring, "
                "one producer warpgroup, consumer warpgroups issuing wgmma")
    plan.decide("swizzle A", f"{span_a}B", why_a)
    plan.decide("swizzle B", f"{span_b}B", f"{why_b}; B is {g.b_major}-major (tB={int(g.b_major == 'MN')})")
    plan.decide("consumers", consumers, why_c)
    plan.decide("registers", f"producer {regs[0]}, consumers {regs[1]}, {maxnreg} at entry", why_r)
    plan.decide("stages", stages, why_s)
    plan.decide("shared_memory", smem, why_m)
    if staging is not None and (staging_cols // 64) % 2 == 0:
        what = f"stmatrix + TMA store, {staging_cols // 2} columns per round in two halves of the staging"
        why_e += ("; the halves alternate, so a round's stmatrix overlaps the TMA store still reading "
                  "the other half and waits only for the store before last (wait_group.read 1). "
                  "Measured neutral at 4096x4096x64 (ncu, H200: 12.03 us with one buffer and with "
                  "halves), kept as it waits less; that shape's limit is elsewhere")
    elif staging is not None:
        what = f"stmatrix + TMA store, {staging_cols} columns per round"
    else:
        what = "registers to global"
    plan.decide("epilogue", what, why_e)
    plan.decide("consumer schedule", "ping-pong" if plan.pingpong else "cooperative", _why_schedule(g, plan))
    plan.multicast, why_mc = _multicast(g, plan)
    plan.decide("multicast", f"clusters of {plan.multicast}, B multicast" if plan.multicast > 1 else "none",
                why_mc)
    plan.stream_k, why_sk = _stream_k(g, plan)
    plan.decide("stream-K", "the tail wave's K loops over every CTA" if plan.stream_k else "none", why_sk)
    plan.deferred_epilogue, why_d = _deferred_epilogue(g, plan)
    plan.decide("epilogue overlap", "deferred to the next tile's first wgmma group" if plan.deferred_epilogue
                else "none", why_d)
    rows_pc = consumer_rows(g, consumers)
    plan.decide("wgmma", f"m64n{wgmma_n}k16 x {g.bk // 16} k-steps x {rows_pc // 64} slab(s) x "
                f"{g.bn // wgmma_n} piece(s) per trip", "N per instruction is the tile's columns, "
                "split evenly when wider than 256")
    by_grid = "from the grid pass: " if "tile_order" in g.kernel.attrs else ""
    if split > 1:
        plan.decide("schedule", f"grid of clusters of {split}", by_grid + f"one cluster of {split} CTAs "
                    "per tile (`.reqnctapercluster`, so a plain launch forms the clusters)")
    else:
        plan.decide("schedule", "persistent" if persistent else "grid",
                    by_grid + ("one CTA per SM looping over tiles" if persistent else "one CTA per tile"))
    if group > 1:
        plan.decide("block_order", f"grouped by {group}", f"{by_grid}consecutive tiles walk groups of "
                    f"{group} tile rows so A and B tiles are reused from L2")
    return plan


def _deferred_epilogue(g: GemmMatch, plan: Plan) -> tuple[bool, str]:
    """Whether a consumer defers its tile's stores: it packs the accumulators to 16-bit pairs
    (half their registers), and stmatrix + TMA-stores them only once the next tile's first wgmma
    group is issued, so the tensor cores run while the epilogue's shared-memory writes, barriers
    and store waits do (ncu, H200, 4096^3: the consumers' epilogue barriers were the largest
    stall, 8.2 of 19.5 cycles per instruction, while no wgmma was in flight). It takes registers
    for both the accumulators and the packed tile, staging, and a next tile (persistent)."""
    if plan.pingpong:
        return False, ("ping-pong: a consumer's epilogue already runs while the other consumer's "
                       "wgmmas do")
    if plan.split > 1 or plan.staging is None:
        return False, "the epilogue stores from registers (no staging to defer into)"
    if not plan.persistent:
        return False, "one tile per CTA: no next tile's wgmmas to overlap the stores with"
    acc = consumer_rows(g, plan.consumers) * g.bn // WARPGROUP
    need = acc + acc // 2 + CONSUMER_OVERHEAD
    if need > plan.regs[1]:
        return False, (f"the accumulators ({acc}), the packed tile ({acc // 2}) and {CONSUMER_OVERHEAD} "
                       f"more need {need} registers per consumer thread, over its {plan.regs[1]}")
    return True, (f"each consumer thread holds its accumulators ({acc} registers) and the previous "
                  f"tile packed to 16 bits ({acc // 2}): {need} of its {plan.regs[1]} registers with "
                  f"{CONSUMER_OVERHEAD} for the rest; a tile's stores run after the next tile's first "
                  "wgmma group is issued (or after the last tile), under the tensor cores' work. "
                  "Measured against storing at once (H200, 2026-11-21, ratio to cuBLAS, medians of 3): "
                  "4096^3 1.007 -> 1.004, 8192^3 1.024 -> 1.032, M = N = 4096 with K = 64 / 128 / 256 / "
                  "512: 1.06 / 1.12 / 1.06 / 1.05 -> 1.07 / 1.07 / 1.11 / 1.09")


def _multicast(g: GemmMatch, plan: Plan) -> tuple[int, str]:
    """Whether pairs of CTAs share B (multicast.py): each loads half of every B stage and
    multicasts it to both, halving B's L2 -> SM bytes (2/3 of a 128x256 stage's). Asked for by
    the grid pass (``grid{multicast=2}``, kernel attribute ``multicast``); not by default."""
    asked = int(g.kernel.attrs.get("multicast", 0))
    if asked <= 1:
        return 1, ("not asked for (grid{multicast=2}); not the default because it measured neutral to "
                   "worse at every shape (H200, 2026-11-21, ratio to cuBLAS, default -> multicast: 4096^3 "
                   "1.012 -> 1.006, 8192^3 1.046 -> 1.034, 2048^3 1.006 -> 0.966, M = N = 4096 with K = 64 "
                   "1.075 -> 1.016; benchmarks/results/2026-11-21-nvidia-h200-multicast.json): at large K the "
                   "kernel is bound by the tensor cores and the epilogue barrier, not L2 (58% under ncu), "
                   "and at small K the pair's coupled rings cost more than the B bytes saved"
                   if asked == 0 else "turned off by the grid pass (multicast = 1)")
    if asked != 2:
        raise NoMatch(f"multicast = {asked}: only pairs of CTAs share B")
    if plan.split > 1:
        return 1, "split-K already makes each tile a cluster of its own"
    if plan.pingpong:
        return 1, ("not with ping-pong consumers: the pair's walk of tile pairs and the consumers' "
                   "alternation are not built together (multicast measured no gain either)")
    if not plan.persistent:
        return 1, "the pair walks tiles two at a time on a persistent grid only"
    if g.b_major == "MN" and (g.bn // (plan.span_b // 2)) % 2:
        return 1, f"B's {g.bn // (plan.span_b // 2)} panels do not halve"
    if g.b_major == "K" and (g.bn // 2) % 8:
        return 1, f"half of B's {g.bn} rows is not whole 8-row swizzle atoms"
    half = g.bk * g.bn
    return 2, (f"asked for by the grid pass: clusters of 2 CTAs on tiles (2mp, n) and (2mp+1, n); each "
               f"loads its A box and half of B's ({half} of {2 * half} B per stage) with "
               ".multicast::cluster, so each stage reads "
               f"{g.bm * g.bk * 2 + half} instead of {g.bm * g.bk * 2 + 2 * half} B from L2; empty[s] "
               f"counts both CTAs' consumers ({2 * plan.consumers}); an odd last tile row is run "
               "by the pair with the off-edge CTA on zero-filled A (stores clipped)")


def _stream_k(g: GemmMatch, plan: Plan) -> tuple[bool, str]:
    """Whether the persistent walk ends in stream-K (streamk.py): asked for by the grid pass
    (``grid{stream_k=1}``, kernel attribute ``stream_k``)."""
    asked = int(g.kernel.attrs.get("stream_k", 0))
    if asked <= 0:
        return False, ("not asked for (grid{stream_k=1}); not the default because it measured slower at "
                       "most shapes (H200, 2026-11-21, same run, ratio to cuBLAS, default -> stream-K: "
                       "4096^3 1.014 -> 0.934, 8192^3 1.036 -> 1.047, 2048^3 1.007 -> 0.960, 8192x14336x4096 "
                       "1.004 -> 0.990, 8192x4096x14336 1.009 -> 0.974, 8192x4096x4096 1.014 -> 0.982, "
                       "1024x14336x4096 0.965 -> 0.994; benchmarks/results/2026-11-21-nvidia-h200-stream-k-2.jsonl)"
                       if asked == 0
                       else "turned off by the grid pass (stream_k = -1)")
    if not plan.persistent:
        return False, "stream-K splits the tail over a persistent grid's CTAs; this grid is one CTA per tile"
    if plan.split > 1:
        return False, "split-K already shares each tile's K loop within a cluster"
    if plan.pingpong:
        return False, "ping-pong consumers take whole tiles in turn; stream-K units are not built for them"
    if plan.multicast > 1:
        return False, "the multicast pair walks tile pairs; stream-K units are not built for them"
    if plan.consumers == 1 and split_part_registers(g, 1) >= 128:
        return False, (f"one consumer holding {split_part_registers(g, 1)} accumulator registers: "
                       "ptxas 13.0 spills the fix-up's loop (16 B at 64x256)")
    return True, ("asked for by the grid pass: with T tiles on P CTAs and R = T mod P > 0 (and T >= P), "
                  "the first T - R tiles run whole, CTA c taking c, c + P, ...; the last R tiles' "
                  "K trips are numbered in a row and CTA c takes trips [c*R*Kt/P, (c+1)*R*Kt/P), so "
                  "every CTA ends at about the same time instead of P - R SMs idling for the last "
                  "tile. A tile split between CTAs is stored by the CTA holding its first trip, which "
                  "adds the others' f32 partials from a workspace slot per CTA (module .global "
                  f"memory, {g.bm * g.bn * 4} B a slot) once each per-thread flag is set "
                  "(st.release.gpu / ld.acquire.gpu; reset by the reader, so a launch leaves them "
                  "zero). With R = 0 the kernel runs every tile whole, as without it")


def _why_schedule(g: GemmMatch, plan: Plan) -> str:
    if not plan.pingpong:
        return ("from the warp-spec pass: consumers share each tile's rows"
                if "threads" in g.kernel.attrs else "local rule: consumers share each tile's rows")
    why = (f"from the warp-spec pass: consumer c computes whole {g.bm}x{g.bn} tiles, the CTA's tiles "
           "c, c + 2, ... of the persistent walk; the producer fills the ring for both in tile order, each "
           "consumer skips the stages of the other's tiles (empty[s] counts 1 arrival), and named barriers "
           f"{TURN_BARRIER} + c pass the turn on the tensor cores after a tile's wgmmas are issued, so one "
           "consumer's epilogue runs under the other's K loop")
    if not plan.persistent:
        why += "; the grid is not persistent, so a CTA has one tile and consumer 1 none"
    return why


MAX_CLUSTER = 8
"""The portable cluster size: a split tile's CTAs form one cluster."""


def split_part_registers(g: GemmMatch, consumers: int) -> int:
    """f32 accumulator registers per consumer thread (all its slabs and wgmma pieces)."""
    return (consumer_rows(g, consumers)) * g.bn // WARPGROUP


def reduce_bytes(g: GemmMatch, consumers: int) -> int:
    """Shared memory a CTA of a split tile receives: one slot per other CTA of the cluster, each
    holding 1/split of every consumer thread's accumulator registers."""
    return (g.split - 1) * consumers * WARPGROUP * (split_part_registers(g, consumers) // g.split) * 4


def _check_split(g: GemmMatch, consumers: int, ring_bytes: int, ring_start: int) -> str:
    """Why ``split`` works for this tile, or NoMatch naming what does not."""
    s, regs = g.split, split_part_registers(g, consumers)
    if s > MAX_CLUSTER:
        raise NoMatch(f"split = {s}: a split tile is one cluster, at most {MAX_CLUSTER} CTAs")
    if regs % (4 * s):
        raise NoMatch(f"split = {s}: each consumer thread's {regs} accumulator registers do not part "
                      f"into {s} runs of whole 8-column groups")
    need = reduce_bytes(g, consumers)
    if need > ring_bytes:
        raise NoMatch(f"split = {s}: the partials ({need} B) do not fit over the {ring_bytes}-byte ring")
    return (f"a cluster of {s} CTAs per tile, CTA r runs K steps [r*ceil(T/{s}), (r+1)*ceil(T/{s})); "
            f"each sends part r' of its accumulator (the r'-th run of {regs // s} of each consumer "
            f"thread's {regs} registers: whole 8-column groups) to CTA r' through distributed shared memory ({need} B received per CTA, over its drained "
            f"ring at {ring_start}), between two cluster barriers; CTA r adds the partials of its "
            f"part and stores it")


def _check_boxes(g: GemmMatch) -> None:
    outer_b = g.bk if g.b_major == "MN" else g.bn
    for name, n in (("BM", g.bm), ("B's rows", outer_b)):
        if n > MAX_BOX:
            raise NoMatch(f"{name} is {n}; a TMA box has at most {MAX_BOX} rows")
    if g.bm % 64:
        raise NoMatch(f"BM is {g.bm}; wgmma computes 64-row slabs")


def _consumers(g: GemmMatch) -> tuple[int, str]:
    slabs = g.bm // 64
    pinned = g.kernel.attrs.get("consumers")
    if g.kernel.attrs.get("pingpong"):
        return pinned, f"from the warp-spec pass: {pinned} ping-pong consumers, each computing whole tiles"
    if isinstance(pinned, int) and not isinstance(pinned, bool):
        if slabs % pinned:
            raise NoMatch(f"{pinned} consumers cannot share {slabs} 64-row slabs evenly")
        if "threads" in g.kernel.attrs:
            return pinned, f"from the warp-spec pass ({g.kernel.attrs['threads']} threads)"
        return pinned, "pinned by the kernel (@consumers)"
    for n in sorted((d for d in range(1, min(slabs, 7) + 1) if slabs % d == 0), reverse=True):
        need = (g.bm // n) * g.bn // WARPGROUP + CONSUMER_OVERHEAD
        if need <= consumer_registers(n, SETMAXNREG_MIN):
            return n, (f"local rule (warp-spec's): {slabs} slab(s) of 64 rows, the most consumers "
                       f"whose accumulators fit ({need} registers per thread)")
    raise NoMatch(f"a {g.bm}x{g.bn} f32 accumulator does not fit the consumers' registers")


def _registers(g: GemmMatch, consumers: int) -> tuple[tuple[int, int], int, str]:
    threads = WARPGROUP * (consumers + 1)
    entry = g.kernel.attrs.get("maxnreg") or entry_registers(threads)
    pool = entry * threads
    need = (consumer_rows(g, consumers)) * g.bn // WARPGROUP + CONSUMER_OVERHEAD
    pinned = g.kernel.attrs.get("regs")
    if pinned is not None:
        p, c = pinned
        why = ("from the reg-budget pass" if "maxnreg" in g.kernel.attrs
               else "pinned by the kernel (@regs)")
    else:
        p = PRODUCER_REGS
        c = consumer_registers(consumers, p)
        if need > c:
            p, c = SETMAXNREG_MIN, consumer_registers(consumers, SETMAXNREG_MIN)
        why = f"local rule (reg-budget's): the producer keeps {p}, consumers get the rest"
    for r in (p, c):
        if r % 8 or not SETMAXNREG_MIN <= r <= SETMAXNREG_MAX:
            raise NoMatch(f"setmaxnreg takes multiples of 8 in [24, 256], got {r}")
    if WARPGROUP * p + WARPGROUP * consumers * c > pool:
        raise NoMatch(f"registers {p}/{c} exceed the {pool} the {threads} threads get at entry")
    if need > c:
        raise NoMatch(f"each consumer thread needs about {need} registers but gets {c}")
    return (p, c), entry, f"{why}; an accumulator share is {need - CONSUMER_OVERHEAD} registers per thread"


def _wgmma_n(g: GemmMatch, span_b: int) -> int:
    pieces = -(-g.bn // MAX_WGMMA_N)
    n = g.bn // pieces
    if g.bn % pieces or n % 8:
        raise NoMatch(f"BN = {g.bn} does not split into wgmma N of a multiple of 8 up to 256")
    if g.b_major == "MN" and n % (span_b // 2):
        raise NoMatch(f"an MN-major B is read in whole {span_b // 2}-column atoms; N = {n} is not")
    return n


def operand_a(g: GemmMatch, plan: Plan) -> Operand:
    return Operand("K", g.bm, g.bk, plan.span_a)


def operand_b(g: GemmMatch, plan: Plan) -> Operand:
    if g.b_major == "MN":
        return Operand("MN", g.bk, g.bn, plan.span_b)
    return Operand("K", g.bn, g.bk, plan.span_b)


def _memory(g: GemmMatch, consumers: int, wgmma_n: int):
    a_bytes = g.bm * g.bk * 2
    b_bytes = g.bk * g.bn * 2
    loop = g.loop
    a_off, b_off = g.load_a.attrs.get("smem"), g.load_b.attrs.get("smem")
    planned = a_off is not None and b_off is not None and "bars" in loop.attrs \
        and "stage_stride" in loop.attrs and "smem" in g.kernel.attrs
    staging, staging_cols = None, 0
    over_ring = planned and _staging_over_ring(g, min(a_off, b_off) + loop.attrs["stages"] * loop.attrs["stage_stride"])
    if over_ring:  # the emitter has no consumer barrier before writing over the ring: plan locally
        planned = False
    if planned:
        stages, stride, bars = loop.attrs["stages"], loop.attrs["stage_stride"], loop.attrs["bars"]
        smem = g.kernel.attrs["smem"] + ALIGN_SLACK
        why_s = "from the pipeline pass"
        why_m = (f"from the smem-plan pass (+{ALIGN_SLACK} B to round the base up to 1024): A at "
                 f"{a_off}, B at {b_off}, stages {stride} B apart, mbarriers at {bars}")
        staging, staging_cols, why_e = _planned_staging(g, consumers, wgmma_n)
    else:
        a_off, b_off = 0, ceil_to(a_bytes, ALIGN)
        stride = ceil_to(b_off + b_bytes, ALIGN)
        room = SMEM_LIMIT - ALIGN_SLACK
        fit = (room - 128) // stride
        pinned = loop.attrs.get("stages")
        if pinned:
            stages, why_s = pinned, ("from the pipeline pass" if "stage_bytes" in loop.attrs
                                     else "pinned by the kernel (@stages)")
        else:
            stages = min(MAX_STAGES, fit)
            why_s = (f"local rule: {fit} stage(s) of {stride} B fit in "
                     f"{room} B, capped at {MAX_STAGES}")
        ring = stages * stride
        staging_cols, why_e = _staging_cols(g, consumers, wgmma_n, room - ring - 16 * stages)
        if staging_cols:
            staging = ring
            ring += consumers * (consumer_rows(g, consumers)) * staging_cols * 2
        bars = ring
        smem = bars + 16 * stages + ALIGN_SLACK
        why_m = (("the smem-plan pass put C's staging tile over the ring, and this kernel has no "
                  "consumer barrier before writing it there, so: " if over_ring else "")
                 + f"local plan: stage s holds A at s*{stride} and B at s*{stride}+{b_off}"
                 + (f"; staging tiles at {staging}" if staging is not None else "")
                 + f"; full[s] and empty[s] mbarriers at {bars}; +{ALIGN_SLACK} B to round the base up to 1024")
    if stages < 1:
        raise NoMatch(f"one stage of A and B ({a_bytes + b_bytes} B) does not fit in shared memory")
    if smem > SMEM_LIMIT:
        raise NoMatch(f"{stages} stage(s) need {smem} B of shared memory, over {SMEM_LIMIT}")
    for off in (a_off, b_off, stride):
        if off % ALIGN:
            raise NoMatch(f"shared tile offset {off} is not 1024-byte aligned")
    return stages, a_off, b_off, stride, bars, smem, why_s, why_m, staging, staging_cols, why_e


def _staging_over_ring(g: GemmMatch, ring_end: int) -> bool:
    """Whether smem-plan put C's staging tile over the ring (it does for a kernel that is not
    persistent, the ring being dead by then); writing there needs a barrier of all consumers."""
    store = g.store.attrs
    return "smem" in store and store["smem"] < ring_end


def _planned_staging(g: GemmMatch, consumers: int, wgmma_n: int) -> tuple[int | None, int, str]:
    """The staging smem-plan placed for C's store: (offset, columns per round, why), or
    (None, 0, why) when the epilogue must store registers straight to C (no plan, a plan too
    small for a round)."""
    store = g.store.attrs
    form = store.get("staging")
    if form is None or "smem" not in store:
        return None, 0, "the smem-plan pass planned no staging tile for C's store"
    rows = consumer_rows(g, consumers)
    cols = g.bn if form == "tile" else store.get("staging_cols", 64)
    pingpong = bool(g.kernel.attrs.get("pingpong"))  # then each consumer stages all its rows
    copies, chunk_rows = (consumers, rows) if pingpong else (1, 64)
    planned = copies * g.bm * g.bn * 2 if form == "tile" else consumers * chunk_rows * cols * 2
    need = consumers * rows * cols * 2
    if need > planned:
        return None, 0, (f"the smem-plan pass's staging tile ({planned} B) is smaller than {consumers} "
                         f"consumer(s) x {rows} rows x {cols} columns of C ({need} B)")
    if store["smem"] % ALIGN:
        return None, 0, f"the smem-plan pass put the staging tile at {store['smem']}, not 1024-byte aligned"
    cols, why = _staging_cols(g, consumers, wgmma_n, need, cols, "planned for it")
    if not cols:
        return None, 0, why
    shape = "the whole tile" if form == "tile" else f"chunks of {cols} columns"
    return store["smem"], cols, (f"from the smem-plan pass: {shape} at {store['smem']}; {why}")


def _staging_cols(g: GemmMatch, consumers: int, wgmma_n: int, room: int,
                  widest: int | None = None, room_is: str = "left beside the ring") -> tuple[int, str]:
    """The widest slice of its rows (a multiple of 64 columns dividing BN) each consumer can
    stage in ``room`` bytes, or 0 (then the epilogue stores registers straight to C)."""
    if g.c_dtype not in ("bf16", "f16"):
        return 0, f"C is {g.c_dtype}: stmatrix stages 16-bit values only, so registers store to C"
    if g.bn % 64 or wgmma_n % 16:
        return 0, f"BN = {g.bn} is not a whole number of 64-column TMA boxes"
    rows = consumer_rows(g, consumers)
    for cols in range(widest or g.bn, 0, -64):
        if g.bn % cols == 0 and consumers * rows * cols * 2 <= room:
            return cols, (f"each consumer stages {rows} x {cols} of its rows in 128B-swizzled 64-column "
                          f"panels ({room} B {room_is}), one TMA store per panel that runs "
                          "while the next tile's wgmmas do; C rows that TMA cannot address "
                          "(not a multiple of 16 bytes) take the register stores")
    return 0, f"no 64-column staging slice fits in the {room} B {room_is}"
