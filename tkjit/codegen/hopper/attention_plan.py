"""The decisions the warp-specialized attention kernel is emitted from, read from the scheduling
passes' annotations (layout: swizzles; warp-spec: consumers; pipeline: stages; smem-plan: where
Q, the K/V ring and the barriers lie; reg-budget: the setmaxnreg split) and the few this
backend takes itself (the block order, the epilogue). A kernel without those annotations (a
pipeline that skips the passes) is refused with the reason and goes to mma.sync.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...ir.ops.elementwise import Mul
from ...ir.types import ScalarType
from .attention_match import AttentionMatch, NoMatch, const_value
from ...passes.hopper import SMEM_LIMIT, consumer_registers
from ...passes.reg_budget import PRODUCER_DEFAULT
from .scalars import UnsupportedScalar, supported
from .wgmma import Operand

ALIGN_SLACK = 1024
"""The kernel rounds the dynamic shared base up to 1024 at run time."""
L2_BUDGET = 24 << 20
"""Bytes of K and V the causal block order keeps in flight at once (H100 L2 50 MB, H200 60 MB)."""
PERSISTENT_CAUSAL: bool | None = None
"""Non-causal kernels are persistent: min(tiles, SMs) CTAs walk the tiles. Causal ones (tiles of
unequal length, heaviest first): None, the default, compiles the tile loop too and chooses the grid
at launch (``launch_grid``): min(tiles, SMs) CTAs when the longest key loop is short (at most
SHORT_CAUSAL_TRIPS trips), else one CTA per tile, its loop running once. True: always min(tiles,
SMs); False: no tile loop, one CTA per tile (the round-4 kernel)."""
SHORT_CAUSAL_TRIPS = 8
"""Causal key loops of at most this many trips (N <= 1024 at BKV = 128) launch min(tiles, SMs)
persistent CTAs: each tile is short, so its start (Q's load, the first S that nothing overlaps)
is a large share and a persistent CTA hides it under the previous tile's work; with longer loops
the hardware's handing of the next tile to whichever SM frees first balances the unequal tiles
better than a fixed stride. H200 2026-11-21, same-run A/B (benchmarks/results/2026-11-21-nvidia-
h200-s4-causal-grid.json), ratio to cuDNN, one CTA per tile -> min(tiles, SMs) CTAs: D=64 N=1024
(8 trips) 0.753 -> 0.875, N=2048 (16) 0.938 -> 0.895, 4096 1.023 -> 0.907, 8192 1.123 -> 0.979;
D=128 N=1024 0.798 -> 0.857, N=4096 1.034 -> 0.945. The persistent kernel launched with one CTA
per tile measured as the kernel without a tile loop (0.754/0.937/1.023/1.122; 0.799/1.033)."""
CONSUMER_OVERHEAD = 32
"""Registers a consumer thread needs besides O, S and P (addresses, row state, loop): ptxas 13
fits three D = 64 consumers (O 32 + S 64 + P 32) in 160 without spilling and spills 48 B at 152."""
SMALL_PRODUCER = 24
"""The producer's registers when the consumers need more than the reg-budget pass's split gives
them (FA3's split for three MMA warpgroups: its one elected thread needs about 24)."""
SPLIT_KV_BARRIERS: bool | None = None
"""K and V of a stage on their own full/empty barriers (two rings of the same stages): S_j waits
for K_j only, V_j lands while S_j and the softmax run, K_j is released once S_j retired. None:
only where the ring has 2 stages (a second Q slot took the third, or the key block is large:
BKV = 176 at D = 128); at D=64, 6 -> 5, split measured -0.8..-1.1% against one pair (H200
2026-11-21 same-run A/B: alone neutral, -2..+3%; with 2 stages it is what keeps them fed: D=128
0.62x cuDNN with one barrier per stage, 0.93-0.97x split, docs/hopper-codegen.md round 5; BKV =
176: 0.66-0.68x with one pair, 0.96-1.04x split, benchmarks/results/2026-11-21-nvidia-h200-s4-
d128-bkv.json)."""
Q_SLOTS = 2
"""Q buffers of a persistent kernel: with 2 the next tile's Q loads while this one runs, and the
producer goes on to the next tile's K/V without waiting for this tile's Q to be released. The
second slot takes the place of the ring's last stage when both do not fit, and only where the ring
keeps Q2_MIN_STAGES: D=64 (three consumers, 6 -> 5 stages) takes it, D=128 (3 stages) does not.
H200 2026-11-21, same-run A/B x2 with the turns per slot (benchmarks/results/2026-11-21-nvidia-
h200-attention-ab-q2-turns.json), D=64 non-causal N=1024..16384: 0.927/1.032/1.049/1.059/1.057
-> 0.998/1.072/1.068/1.065/1.063x cuDNN (second run 0.926/1.033/1.050/1.056/1.056 -> 0.994/1.071/
1.068/1.066/1.057). Causal kernels have the slots too where they are compiled persistent (D=64,
6 -> 5 stages: measured as one slot without the loop, see SHORT_CAUSAL_TRIPS). 1 is the round-4
kernel."""
Q2_MAX_CONSUMERS = 3
"""Two Q slots only with up to this many consumers. With three (D=64, BQ=192) the kernel hung on
the H200 (2026-11-21: tests/gpu/test_hopper_attention_gpu.py::test_persistent_many_tiles_per_cta
at D=64, 384 tiles over 132 persistent CTAs, never returned) while the consumers' turns at the
tensor cores restarted with every tile on one set of named barriers (see ``AttentionPlan.turns``);
with two slots they no longer do, so the bound is the consumers there are (3)."""
Q2_TURNS = "per slot"
"""How the consumers' ping-pong turns go on from tile to tile with two Q slots (see
``AttentionPlan.turns``): "per slot" (each Q slot's tiles on their own named barriers) or
"across tiles" (one rotation that runs on over the CTA's tiles)."""
CROSS_TILE = False
"""Cross-tile overlap (needs two Q slots, so persistent non-causal kernels; K/V barriers split): a
persistent consumer runs its key loops as one pipeline over the CTA's tiles. The next tile's first
S' = Q'·K'_0ᵀ is issued in the same turn as this tile's last P·V, its softmax runs while that P·V
drains, and this tile's O / l and L are stored after it (before P' is packed), so no tile starts
with a wgmma that overlaps nothing or ends with one that nothing overlaps. The consumers' turns run
on in one rotation over the CTA's tiles; the CTA's last P·V and epilogue follow its tile loop.
A pin, off by default: H200 2026-11-21 same-run A/B (benchmarks/results/2026-11-21-nvidia-h200-
attention-ab-cross-tile.json), D=128 non-causal N=1024..16384 vs cuDNN: default (one Q slot, 3
stages) 0.906/0.953/0.981/0.994/0.989, two slots (2 stages, split) 0.880/0.957/0.979/0.988/0.985,
cross-tile on two slots 0.842/0.962/0.987/0.994/0.992 (+0.5..+0.9% at N >= 2048, within noise;
-7% at N=1024); D=64 N=2048/8192 1.072/1.071 -> 1.073/1.064. Correct on the H200 (tails, GQA,
scales, many tiles per CTA: tests/gpu/test_hopper_attention_gpu.py, "cross-tile")."""
IDLE_COPY: bool | None = None
"""A consumer whose 64 query rows of a tile all lie past N runs an idle copy of the tile body (the
same barriers and turns, no math: ``attention.Consumer.busy_or_idle``); otherwise it computes on
the zero-filled rows like the others (the round-7 kernel). None: causal kernels only. H200
2026-11-21, two same-run A/Bs at D=64 (benchmarks/results/2026-11-21-nvidia-h200-s4-idle-ab*.json),
ratio to cuDNN, without -> with: causal N=1024 0.865 -> 0.920 and 0.868 -> 0.921 (the last,
heaviest query block of each head is one third full), 2048 0.933 -> 0.939, 4096 1.021 -> 1.029,
8192 1.127 -> 1.104, 16384 1.130 -> 1.114; non-causal N=1024/2048/4096 1.015/1.082/1.063 ->
0.983/1.039/1.033 and 1.019/1.099 -> 0.990/1.067. The non-causal loss is not understood: the
busy copy's math is the same instructions (SASS: HGMMA, MUFU, FMNMX, FFMA counts equal) but ptxas
schedules the whole kernel differently once the tile body is emitted twice."""
OWN_TRIPS: bool | None = None
"""Causal tiles whose consumers' rows reach different key blocks (D=64: BQ = 192 over BKV = 128, so
a tile's first 64 rows can end a key block before its last ones): each consumer computes only the
blocks some of its rows see and takes the tile's later ones as idle trips (the stage's fill awaited,
its turn at the tensor cores taken and handed on, the stage released; no wgmma or softmax). The
skipped blocks are wholly masked for it, so they add nothing to its rows: O, l and the maxima are
the same. None: wherever it can happen (causal, the mask's key offset j·BKV with the query offset
not depending on j, BKV not a multiple of BQ, K and V on one barrier pair). At D=64 the skipped
work is 10% / 5% / 3% of S and P·V at N = 1024 / 2048 / 4096 (docs/hopper-codegen.md round 9).
H200 2026-11-21, same-run A/B (benchmarks/results/2026-11-21-nvidia-h200-s6-own-trips-ab.json),
D=64 causal N=1024..16384, ratio to cuDNN, False -> None: 0.968/0.941/1.028/1.096/1.118 ->
0.989/0.951/1.034/1.098/1.118."""
Q2_MIN_STAGES = 3
"""The stages the ring must keep for the second Q slot to take one. D=128 would go 3 -> 2 (with
split K/V barriers): +2.9% at N=1024 in two same-run A/Bs, but -0.5..-2% at N >= 4096 in the
second, so it stays a pin (Q2_MIN_STAGES=2)."""


@dataclass
class AttentionPlan:
    consumers: int
    regs: tuple[int, int]
    maxnreg: int
    stages: int
    q_offset: int
    q_bars: int
    k_offset: int
    v_offset: int
    stage_stride: int
    bars: int
    smem_bytes: int
    swizzle: int
    heavy_first: bool
    """Causal: the longest query blocks go first, heads chunked so their K/V fit in L2."""
    persistent: bool = True
    """The CTAs walk the tiles (ctaid, += nctaid) in the block order."""
    grid: str = "sms"
    """How many CTAs a persistent kernel launches (``launch_grid``): "sms" (min(tiles, SMs)) or
    "by trips" (causal: that where the longest key loop is short, else one per tile)."""
    split_kv: bool = False
    """K and V on separate barriers (two rings; see SPLIT_KV_BARRIERS)."""
    v_bars: int = 0
    """The V ring's full[stages] then empty[stages] (split_kv)."""
    q_slots: int = 1
    q_offset2: int = 0
    """Q's second slot (q_slots = 2); Q's barriers are full[2] then empty[2] at q_bars."""
    turns: str = "per tile"
    """How the consumers' ping-pong turns (named barriers, 4 + c) go from one tile to the next.
    "per tile": each tile's rotation starts afresh (consumer 0 opens it without waiting, the last
    consumer's last turn hands nothing on); safe with one Q slot only, where the next tile's Q
    loads after every consumer released this one's. With two slots consumer 0 can open the next
    tile first and arrive a second time on consumer 1's barrier before consumer 1 took its last
    turn of this tile: the named barrier completes on consumer 0's arrivals alone and the rotation
    deadlocks (the 2026-11-21 hang, D = 64, three consumers). So with two slots either
    "per slot": the tiles of Q slot s take their turns on barriers 4 + c + consumers·s, two
    rotations that cannot meet (a slot's next tile starts only after every consumer released its
    last one), consumer 0 still opening each tile at once; or
    "across tiles": one rotation over all of the CTA's tiles (consumer 0 waits for its first turn
    but in the CTA's first tile, the last consumer hands on but in its last)."""
    cross_tile: bool = False
    """The key loops of a persistent CTA's tiles run as one pipeline (see CROSS_TILE)."""
    idle_copy: bool = False
    """A consumer whose rows of the tile all lie past N takes an idle copy of the tile body."""
    own_trips: bool = False
    """Causal: each consumer computes the key blocks its rows see, idle trips for the tile's rest."""
    decisions: list[dict] = field(default_factory=list)

    @property
    def threads(self) -> int:
        return 128 * (self.consumers + 1)

    def decide(self, what: str, value, why: str) -> None:
        self.decisions.append({"decision": what, "value": value, "why": why})


def operand_q(m: AttentionMatch, plan: AttentionPlan) -> Operand:
    """Q as the K-major A of S = Q·Kᵀ (panels of 64 head-dim columns)."""
    return Operand("K", m.bq, m.d, plan.swizzle)


def operand_k(m: AttentionMatch, plan: AttentionPlan) -> Operand:
    """K as the K-major B of S = Q·Kᵀ."""
    return Operand("K", m.bkv, m.d, plan.swizzle)


def operand_v(m: AttentionMatch, plan: AttentionPlan) -> Operand:
    """V ([BKV, D] row-major) as the MN-major B of O += P·V (tB = 1)."""
    return Operand("MN", m.bkv, m.d, plan.swizzle)


def _attr(op, name: str, what: str):
    value = op.attrs.get(name)
    if value is None:
        raise NoMatch(f"{what} has no '{name}' annotation: the attention path follows the scheduling "
                      "passes (the default sm_90a pipeline runs them)")
    return value


def make_attention_plan(m: AttentionMatch) -> AttentionPlan:
    k = m.kernel
    consumers = int(_attr(k, "consumers", "the kernel"))
    regs = tuple(int(r) for r in _attr(k, "regs", "the kernel"))
    maxnreg = int(_attr(k, "maxnreg", "the kernel"))
    smem = int(_attr(k, "smem", "the kernel"))
    stages = int(_attr(m.loop, "stages", "the key loop"))
    stride = int(_attr(m.loop, "stage_stride", "the key loop"))
    bars = int(_attr(m.loop, "bars", "the key loop"))
    q_off, q_bars = int(_attr(m.q_load, "smem", "Q's load")), int(_attr(m.q_load, "bars", "Q's load"))
    k_off, v_off = int(_attr(m.k_load, "smem", "K's load")), int(_attr(m.v_load, "smem", "V's load"))
    swizzles = {str(ld.result.type.attr("swizzle")) for ld in (m.q_load, m.k_load, m.v_load)}
    if swizzles != {"128B"}:
        raise NoMatch(f"Q, K and V tiles are swizzled {sorted(swizzles)}; this path reads 128B-swizzled "
                      "tiles (head dims 64 and 128)")
    if consumers * 64 != m.bq:
        raise NoMatch(f"{consumers} consumer warpgroups for {m.bq} query rows: each consumer owns one "
                      "64-row wgmma slab")
    if m.bkv % 16 or not 16 <= m.bkv <= 256:
        raise NoMatch(f"a key block of {m.bkv} rows: wgmma's N (and P·V's K) needs a multiple of 16 up "
                      "to 256")
    need = m.d // 2 + m.bkv // 2 + m.bkv // 4 + CONSUMER_OVERHEAD
    held = (f"O ({m.d // 2}), S ({m.bkv // 2}) and P ({m.bkv // 4}) per thread plus about "
            f"{CONSUMER_OVERHEAD}: {need}")
    passed = regs
    derived = {(p, consumer_registers(consumers, p)) for p in (PRODUCER_DEFAULT, SMALL_PRODUCER)}
    pinned = regs not in derived  # a split the reg-budget pass would not have chosen: @regs or its options
    if regs[1] < need and not pinned:
        regs = (SMALL_PRODUCER, consumer_registers(consumers, SMALL_PRODUCER))
        if regs[1] < need:
            raise NoMatch(f"{consumers} consumers get at most {regs[1]} registers but hold {held}")
    plan = AttentionPlan(consumers, regs, maxnreg, stages, q_off, q_bars, k_off, v_off, stride, bars,
                         smem + ALIGN_SLACK, 128, m.causal,
                         PERSISTENT_CAUSAL is not False or not m.causal)
    if m.causal and PERSISTENT_CAUSAL is None:
        plan.grid = "by trips"
    _buffers(m, plan)
    _own_trips(m, plan)
    plan.decide("backend", "wgmma", "the kernel is the attention pattern: Q once per tile and K/V "
                "through an mbarrier ring by TMA, one producer warpgroup, consumer warpgroups issuing "
                "S = Q·Kᵀ (SS) and O += P·V with P from registers (RS)")
    plan.decide("consumers", consumers, f"from the warp-spec pass: {m.bq} query rows = {consumers} "
                f"slabs of 64, one per consumer warpgroup")
    plan.decide("registers", f"producer {regs[0]}, consumers {regs[1]}, {maxnreg} at entry",
                (f"pinned ({regs[0]}/{regs[1]}: @regs or the reg-budget options), kept although a "
                 f"consumer thread holds {held}: expect ptxas to spill") if pinned and regs[1] < need else
                f"from the reg-budget pass; a consumer thread holds {held}" if regs == passed else
                f"the reg-budget pass's {passed[0]}/{passed[1]} leaves a consumer less than it holds, "
                f"{held} (its estimate counts fewer live fragments), so the producer keeps "
                f"{SMALL_PRODUCER}: 128·{regs[0]} + {consumers}·128·{regs[1]} registers")
    plan.decide("stages", plan.stages, f"from the pipeline pass: K and V ({m.bkv}x{m.d} each, "
                f"{stride} B per stage) double-buffered while the consumers compute" + (
                    f"; the pass's {stages} -> {plan.stages}: Q's second slot lies over the ring's last "
                    "stage (see Q slots)" if plan.stages != stages else ""))
    plan.decide("block size", f"BQ {m.bq}, BKV {m.bkv}", f"the kernel's tiles: S is m64n{m.bkv}k16 x "
                f"{m.d // 16} k-steps, P·V m64n{m.d}k16 x {m.bkv // 16}")
    plan.decide("shared_memory", smem + ALIGN_SLACK, f"from the smem-plan pass (+{ALIGN_SLACK} B to "
                f"round the base up to 1024): ring at {k_off} (K) / {v_off} (V) + "
                f"s x {stride}, Q at {q_off}, barriers at {q_bars} (Q) and {bars} (ring)")
    plan.decide("epilogue", "registers to global", "O (bf16 pairs) and L stored from the accumulator "
                "fragments under row < N predicates; the staging smem-plan reserved over the ring is "
                "not used")
    walk = ("the K/V ring and the barriers carry on from tile to tile: the producer loads the next "
            "tile's Q and first K/V blocks while the consumers store this tile's O and L (from "
            "registers, so the staging smem-plan reserved is not needed and the ring keeps its stages)")
    by_hardware = ("tiles differ in length (heaviest first), and the hardware hands the next tile to "
                   "whichever SM frees first, where a persistent CTA walks a fixed stride of them")
    if plan.grid == "by trips":
        plan.decide("grid", f"at launch: min(tiles, SMs) CTAs when cdiv(N, {m.bkv}) <= "
                    f"{SHORT_CAUSAL_TRIPS} key blocks, else one CTA per tile",
                    f"causal: with short key loops {walk}, which hides each short tile's start; with "
                    f"longer ones {by_hardware} (H200 2026-11-21: D=64 N=1024 0.75 -> 0.88x cuDNN "
                    f"persistent, N=4096 1.02x one CTA per tile, 0.91x persistent; SHORT_CAUSAL_TRIPS)")
    else:
        plan.decide("grid", "persistent: min(tiles, SMs) CTAs" if plan.persistent else "one CTA per tile",
                    f"{walk}; H200 2026-11-21: D=128 N=1024 0.88 -> 0.95x cuDNN, D=64 N=4096 0.93 -> "
                    "0.95x" if plan.persistent else f"causal: {by_hardware} (H200 2026-11-21, D=128 "
                    "N=8192: 1.06x cuDNN with one CTA per tile, 0.95x persistent)")
    plan.decide("softmax scale", "folded into one FFMA per score when scale > 0",
                "row maxima of the raw scores, then 2^(s·c - m·c) (fma + ex2) and the scale applied "
                "to the maxima only; a tile whose scale is not positive (max of c·s is not c·max s) "
                "takes the unfolded form, chosen at run time by a uniform branch")
    plan.decide("block order", "heaviest first, heads chunked for L2" if m.causal else "row-major",
                f"causal: the query blocks with the most key blocks start first (the tail of the grid "
                f"is short blocks), over chunks of heads whose K and V fit in {L2_BUDGET >> 20} MB of "
                f"L2" if m.causal else "consecutive CTAs are the query blocks of one head: they "
                "share its K and V in L2")
    return plan


def launch_grid(m: AttentionMatch, plan: AttentionPlan, tiles: list) -> list:
    """The grid expression (tkjit/runtime/launcher.py) of ``plan``: ``tiles`` CTAs, or min(tiles,
    SMs) for a persistent kernel, or (grid "by trips") the latter only where the key loop is at
    most SHORT_CAUSAL_TRIPS blocks long: min(tiles, max(SMs, tiles·[cdiv(N, BKV) > trips]))."""
    if not plan.persistent:
        return tiles
    if plan.grid != "by trips":
        return ["min", tiles, ["num_sms"]]
    rows = m.params[m.k].type.dims[-2]
    trips = ["cdiv", ["dim", rows] if isinstance(rows, str) else rows, m.bkv]
    return ["min", tiles, ["max", ["num_sms"], ["mul", tiles, ["gt", trips, SHORT_CAUSAL_TRIPS]]]]


def _buffers(m: AttentionMatch, plan: AttentionPlan) -> None:
    """Separate K/V barriers and a second Q slot (module pins), placed after what smem-plan laid
    out: the barriers at its end; Q's second slot there too if it fits, else over the ring's last
    stage (one stage fewer)."""
    end = plan.smem_bytes - ALIGN_SLACK
    q_bytes = m.bq * m.d * 2
    want_q2 = Q_SLOTS == 2 and plan.persistent
    took_stage = False
    if Q_SLOTS != 2 and plan.persistent:
        plan.decide("Q slots", 1, "pinned (Q_SLOTS = 1)")
    if want_q2 and plan.consumers > Q2_MAX_CONSUMERS:
        want_q2 = False
        plan.decide("Q slots", 1, f"{plan.consumers} consumers keep one Q slot (Q2_MAX_CONSUMERS = "
                    f"{Q2_MAX_CONSUMERS})")
    if want_q2:
        fits = ceil(end, 1024) + q_bytes + 32 + 16 * plan.stages + ALIGN_SLACK <= SMEM_LIMIT
        ring = min(plan.k_offset, plan.v_offset)
        if fits:
            plan.q_offset2 = ceil(end, 1024)
            end = plan.q_offset2 + q_bytes
            how = f"at {plan.q_offset2}, after what smem-plan placed ({plan.stages} stages kept)"
        elif plan.stage_stride >= q_bytes and plan.stages > Q2_MIN_STAGES:
            plan.stages -= 1
            took_stage = True
            plan.q_offset2 = ring + plan.stages * plan.stage_stride
            how = (f"over the ring's last stage ({plan.stages + 1} -> {plan.stages} stages): two Q "
                   f"slots and {plan.stages + 1} stages exceed {SMEM_LIMIT} B")
        else:
            want_q2, how = False, ""
            plan.decide("Q slots", 1, f"a second {q_bytes} B Q slot fits neither beside the ring "
                        f"nor over one of its {plan.stages} stages (it keeps at least {Q2_MIN_STAGES}: "
                        f"at D=128 3 -> 2 stages measured -0.5..-2% at N >= 4096)")
        if want_q2:
            plan.q_slots, plan.q_bars = 2, end
            end += 32
            plan.decide("Q slots", 2, f"persistent: the next tile's Q ({q_bytes} B) loads while this "
                        f"tile runs, and the producer goes on to its K/V without waiting for this "
                        f"tile's Q to be released; second slot {how}")
            if plan.consumers > 1:
                plan.turns = Q2_TURNS
                plan.decide("consumer turns", Q2_TURNS, "with two Q slots a consumer may open the "
                            "next tile before the others finished this one, and turns restarted per "
                            "tile let consumer 0 arrive twice on a named barrier before its partner "
                            "waited (the H200 hang with three consumers, 2026-11-21); " + (
                                f"the two slots' tiles take turns on their own barriers (4 .. "
                                f"{3 + 2 * plan.consumers}), so consumer 0 still opens a tile at "
                                f"once" if Q2_TURNS == "per slot" else "one rotation runs on over the "
                                "CTA's tiles (consumer 0 waits for its turn but in the first tile)"))
    starved = plan.stages == 2
    split = starved if SPLIT_KV_BARRIERS is None else SPLIT_KV_BARRIERS
    if CROSS_TILE and plan.persistent:
        if plan.q_slots == 2 and not m.causal:
            plan.cross_tile, split = True, True
            if plan.consumers > 1:  # the per-slot rotations would meet at the tile boundary's turn
                plan.turns = "across tiles"
                plan.decisions = [d for d in plan.decisions if d["decision"] != "consumer turns"]
            plan.decide("cross-tile overlap", "on", "pinned (CROSS_TILE): the CTA's key loops run as "
                        "one pipeline over its tiles: the next tile's first S' = Q'·K'_0ᵀ (Q' already in "
                        "the other slot) goes in the turn of this tile's last P·V, its softmax runs "
                        "while that P·V drains, and this tile's O and L are stored after it; K/V "
                        "barriers split (the last V is released a tile later than its K), one "
                        "rotation of turns over the CTA's tiles, the last P·V and epilogue after the "
                        "tile loop")
        else:
            plan.decide("cross-tile overlap", "off", "pinned (CROSS_TILE) but "
                        + ("causal tiles may have no key block" if m.causal else
                           "the next tile's Q needs a second Q slot"))
    if split:
        plan.split_kv, plan.v_bars = True, end
        end += 16 * plan.stages
    why = ("K and V of a stage complete their own full and empty barriers (two rings of the same "
           "stages): S_j = Q·K_jᵀ waits for K_j only, V_j lands while S_j and the softmax run, K_j "
           "is released once S_j retired")
    plan.decide("K/V barriers", "separate" if split else "one pair per stage",
                (f"cross-tile overlap: {why}" if plan.cross_tile and not SPLIT_KV_BARRIERS else
                 f"pinned: {why}" if SPLIT_KV_BARRIERS else f"{why}; the ring has {plan.stages} stages "
                 + ("(the second Q slot took one)" if took_stage else f"({m.bkv}-row key blocks)") +
                 ", and with 2 this is what keeps them fed (H200 2026-11-21, D=128: 0.59-0.65x cuDNN "
                 "with one pair, 0.93-0.97x split; BKV = 176: 0.66-0.68x, 0.96-1.04x)") if split else
                "pinned off" if SPLIT_KV_BARRIERS is False else
                "the ring has more than 2 stages: separate K/V barriers measured neutral there (H200 "
                "2026-11-21 same-run A/B: -2..+3%, the first S of a tile saves V's transfer only)")
    plan.smem_bytes = end + ALIGN_SLACK
    wanted = m.causal if IDLE_COPY is None else IDLE_COPY
    plan.idle_copy = wanted and not plan.cross_tile
    plan.decide("rows past N", "idle copy of the tile" if plan.idle_copy else "computed",
                ("a consumer whose 64 query rows of a tile all lie past N (a head's last tile when "
                 f"N is not a multiple of {m.bq}) takes the tile's idle copy: the same barrier waits, "
                 "releases and turns at the tensor cores, no wgmma, softmax or store"
                 + ("; causal: that tile is the head's heaviest (H200 2026-11-21, D=64 N=1024: "
                    "0.87 -> 0.92x cuDNN)" if IDLE_COPY is None else " (pinned: IDLE_COPY)"))
                if plan.idle_copy else "pinned (IDLE_COPY = False)" if IDLE_COPY is False else
                "cross-tile overlap has no idle copy (a tile's last P·V runs in the next tile's "
                "first trip)" if wanted else
                "non-causal: the kernel with the idle copy measured 3% slower (H200 2026-11-21, D=64 "
                "N=1024..4096; ptxas schedules the twice-emitted tile body differently); IDLE_COPY")


def _own_trips(m: AttentionMatch, plan: AttentionPlan) -> None:
    """Per-consumer trip counts (OWN_TRIPS): where they can differ and the emitter can compute them
    (the mask hides key k0 + c from query row q0 + r when k0 + c > q0 + r; with k0 = j·BKV consumer
    c's own trips are min(T, max(0, q0 + 64c + 63) / BKV + 1), the mask's condition checked on the
    rest at run time)."""
    if not m.causal:
        return
    q0, k0 = m.mask.operands[1], m.mask.operands[2]
    factors = list(k0.owner.operands) if isinstance(k0.owner, Mul) else []
    scaled_j = len(factors) == 2 and any(f is m.j for f in factors) and m.bkv in [const_value(f) for f in factors]
    why_not = ("pinned off (OWN_TRIPS = False)" if OWN_TRIPS is False else
               f"the mask's key offset is not j·{m.bkv}" if not scaled_j else
               "the mask's query offset depends on j" if not _per_tile(m, q0) else
               "K and V on separate barriers (per-consumer trips are built for one pair)" if plan.split_kv else
               f"every consumer's rows reach the tile's last key block (BKV {m.bkv} is a multiple of BQ "
               f"{m.bq})" if m.bkv % m.bq == 0 and OWN_TRIPS is None else
               "one consumer" if plan.consumers < 2 else None)
    plan.own_trips = why_not is None
    plan.decide("key blocks per consumer", "own" if plan.own_trips else "the tile's",
                f"causal: consumer c computes the key blocks some of its 64 rows see, min(T, (q0 + 64c + "
                f"63) / {m.bkv} + 1), and takes the tile's later blocks (wholly masked for its rows, so "
                "they change none of its O, l or maxima) as idle trips: the stage's fill awaited, its turn "
                "at the tensor cores taken, the stage released" if plan.own_trips else why_not)


def _per_tile(m: AttentionMatch, v) -> bool:
    """Whether scalar ``v`` is computed from the tile's coordinates and the scalar arguments alone
    (not from the key loop's j): the matcher's own test of what the kernel can compute."""
    tile = set(m.block_args) | {p for p in m.kernel.params if isinstance(p.type, ScalarType)}
    try:
        supported(v, tile)
    except UnsupportedScalar:
        return False
    return True


def ceil(x: int, align: int) -> int:
    return -(-x // align) * align
