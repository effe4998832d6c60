"""grid: how many CTAs launch and which tiles each one handles, in which order.

Tiles are numbered t = 0 .. T-1 over the block loop's index space, the last index fastest.
``schedule(grid)`` launches T CTAs (1-D, so no grid-dimension limit applies), CTA b handles
tile b. ``schedule(persistent)`` launches min(T, number of SMs) CTAs; CTA b handles tiles b,
b + ctas, b + 2·ctas, ... (one CTA per SM, its barriers and rings carrying on from tile to tile).
``group = G`` on a loop of 2 or more indices visits the last two indices (m, n) in groups of G
rows of m: g = t / (G·nn), m = G·g + (t mod G·nn) mod rows_g, n = (t mod G·nn) / rows_g with
rows_g = min(G, nm - G·g), so G neighbouring CTAs share B tiles in L2 (the other indices
stay outermost). The ``schedule`` and ``group`` options override the kernel's.

A block loop whose kernel names no schedule is made persistent when a persistent CTA loses
nothing and gains the overlap of one tile's start with the previous tile's work: the kernel
loads shared tiles through a producer (its pipeline fills an SM's shared memory, so one CTA per
SM runs either way) and every tile does the same work (no loop's trip count depends on the
block indices; where it does, as in causal attention, the hardware's dynamic assignment of
CTAs to SMs balances the tiles better than a fixed stride). A tile loaded once per tile (outside
any loop) then stays taken all tile long; the pipeline pass gives it a second slot where the
rings keep 3 stages, so the next tile's copy loads under this tile's work. Where tiles differ in
work and load such a tile, the loop is compiled persistent and the launch picks the grid
(``by_trips``, the block loop's attribute): min(tiles, SMs) CTAs where the longest ring loop
(``trips_bound``: its trip count at the heavy index's last value, a launcher expression) has at
most ``SHORT_TRIPS`` trips (option ``short``), one CTA per tile past that. The kernel object
launches this binary up to ``LONG_TRIPS`` trips (option ``long``); past that, the kernel compiled
under ``grid{overlap=-1}`` (one CTA per tile, no persistent loop: tkjit/trip_dispatch.py, the
metadata's ``by_trips``; option ``overlap=-1``: one CTA per tile for such kernels). The pass runs
before warp-spec, smem-plan and mbarrier, which read the schedule.

Heaviest first (``heavy``, chosen when a ring loop's trip count grows with one block index and
the order is not grouped; option ``heavy=-1`` turns it off): tiles are visited with that index
descending, in chunks of the other indices whose streamed tensors fit ``L2_BUDGET`` together
(at most L2_BUDGET / the bytes of the loop's loaded tensors' last two dimensions a chunk, at
launch, and the chunks as even as can be: a small last chunk would start its longest tile near
the end): so the longest tiles (the causal attention's last query blocks) start first and the
short ones fill the last wave, while the CTAs in flight share K and V in L2. Recorded as the block loop's
attribute ``heavy`` (the index's position); codegen/emit_control.block_indices follows it.

Records the kernel attributes ``ctas`` (the launch size, readable) and ``tile_order``;
``launch_grid(kernel)`` gives the runtime the JSON expression (architecture.md, "Grid").
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import PassError
from ..ir.core import Kernel, Op, Value
from ..ir.ops import Add, CDiv, Const, Dim, FloorDiv, For, Max, Min, Mul, Sub
from ..source import Span
from .hopper import L2_BUDGET, block_loop, depends_on, has_producer, one_shot_loads, pipelined_loops
from .manager import Pass, PassContext, register_pass

EXPRESSIONS = {CDiv: "cdiv", Mul: "mul", Add: "add", Sub: "sub", FloorDiv: "floordiv",
               Min: "min", Max: "max"}
"""Scalar ops a block count may be built from, and their names in grid expressions."""


def count_expression(v: Value, where: Span | None = None):
    """A block count as a JSON-able expression over the named dimensions (``where``: the block
    loop, for errors about counts that are not)."""
    op = v.owner
    if isinstance(op, Const):
        return op.attrs["value"]
    if isinstance(op, Dim):
        return ["dim", op.attrs["name"]]
    name = EXPRESSIONS.get(type(op))
    if name is None:
        what = (f"%{v.hint}, a kernel argument" if not isinstance(op, Op)
                else f"{op.NAME} (%{v.hint or '?'})")
        raise PassError("the launcher computes the grid from dimensions and constants only "
                        f"(with {', '.join(sorted(EXPRESSIONS.values()))}); this block count "
                        f"uses {what}", getattr(op, "span", None) or where)
    return [name, *(count_expression(x, where) for x in op.operands)]


def readable(expr) -> str:
    if isinstance(expr, int):
        return str(expr)
    head, *args = expr
    if head == "dim":
        return args[0]
    if head == "num_sms":
        return "num_sms"
    if head == "mul":
        return " * ".join(readable(a) for a in args)
    return f"{head}({', '.join(readable(a) for a in args)})"


def tile_count(kernel: Kernel):
    blocks = block_loop(kernel)
    counts = [count_expression(v, blocks.span) for v in blocks.variadic()]
    total = counts[0]
    for c in counts[1:]:
        total = ["mul", total, c]
    return total


def uneven_work(kernel: Kernel) -> str:
    """Why the tiles of ``kernel``'s block loop may differ in work (a loop whose bounds depend
    on the block indices), or ''."""
    blocks = block_loop(kernel)
    indices = set(blocks.regions[0].args)
    for op in blocks.walk():
        if isinstance(op, For) and any(depends_on(v, indices)
                                                         for v in op.operands[:3]):
            where = f" (line {op.span.line})" if getattr(op, "span", None) else ""
            return f"a loop's trip count depends on the block indices{where}"
    return ""


def auto_schedule(kernel: Kernel, overlap: bool = True) -> tuple[str, str]:
    """The schedule for a block loop whose kernel names none, and why (``overlap``: tiles loaded
    once per tile may take a persistent grid; option ``overlap=-1`` says no)."""
    if block_loop(kernel).attrs.get("split", 1) > 1:
        return "grid", "split = S gives each tile a cluster of its own"
    if block_loop(kernel).attrs.get("cluster", 1) > 1:  # (the verifier refuses a persistent one)
        return "grid", "stream-cols split each row block over a cluster of CTAs: one cluster per block"
    if not has_producer(kernel):
        return "grid", ("the kernel loads no shared tile (no ring fills an SM's shared memory, "
                        "so several CTAs may share one and the hardware keeps it busy)")
    from ..ir.ops import MMA_OPS
    if not any(isinstance(op, MMA_OPS) for op in kernel.walk()):
        return "grid", ("no matrix product: a memory-bound kernel of small CTAs, several to an SM, "
                        "which the hardware keeps busy as they free up; the cross-tile overlap of "
                        "tiles loaded once per tile is measured on attention only")
    once = one_shot_loads(kernel)
    if once and not overlap:
        names = _names(once)
        return "grid", (f"{names} is loaded once per tile: in a persistent loop its buffer stays "
                        "taken all tile long (smem-plan cannot lend it to the epilogue), which "
                        "costs shared memory the rings could use; write schedule(persistent) to "
                        "choose it")
    tight = once and tight_registers(kernel)
    if tight:
        names = _names(once)
        return "grid", (f"{names} is loaded once per tile, but {tight}: one CTA per tile (write "
                        "schedule(persistent) to choose it)")
    slot = once and slot_bound(kernel)
    if slot:
        names = _names(once)
        return "grid", (f"{names} is loaded once per tile, but in a persistent loop {slot}: the "
                        "next tile's copy would then load only once this tile's stores have read "
                        "the staging, so the next tile's start overlaps nothing but the ring's "
                        "prefetch, and the tile walk's state (tile index and count, the one-shot "
                        "slot's phase, the per-tile divisors held from tile to tile) sits beside the "
                        f"consumers' level-2 loop all tile long: one CTA per tile, whose staging reuses the ring after "
                        f"its loop (write schedule(persistent) to choose it). {SLOT_MEASURED}")
    uneven = uneven_work(kernel)
    if uneven and once and trips_bound(kernel) is not None:
        names = _names(once)
        return "persistent", (f"{uneven}, and {names} is loaded once per tile: compiled persistent, "
                              f"the launch picks the binary (``by_trips``, tkjit/trip_dispatch.py): "
                              f"this one, min(tiles, SMs) CTAs, where the longest loop has at most "
                              f"{SHORT_TRIPS} trips (a short tile's start, its one-shot load and first "
                              "product, overlaps the previous tile's work), one CTA per tile up to "
                              f"{LONG_TRIPS} trips, past that the kernel "
                              "compiled with grid{overlap=-1}, one CTA per tile (the hardware hands "
                              "CTAs to SMs as they free up, which balances uneven tiles better than "
                              "a fixed stride, and no persistent loop takes the rings' stages). Measured (H200, 2026-11-27, causal examples/attention.tk "
                              "against its template, same run, N = 1k/2k: persistent at N = 1k "
                              "D = 128 0.93 -> 1.04x, D = 64 0.78 -> 0.91x; persistent at N = 2k "
                              "lost at D = 64, 0.96 -> 0.91x, in an earlier run)")
    if uneven:
        return "grid", (f"{uneven}: the hardware hands CTAs to SMs as they free up, which "
                        "balances uneven tiles better than a fixed stride")
    loops = len(pipelined_loops(kernel))
    if once:
        names = _names(once)
        return "persistent", (f"every tile does the same work; {names} is loaded once per tile, so "
                              "its buffer stays taken all tile long (the pipeline pass gives it a "
                              "second slot where the rings keep their stages, and the next tile's "
                              "copy then loads under this tile's work): a persistent CTA overlaps a "
                              "tile's start with the previous tile's work. Measured (H200, "
                              "2026-11-27, examples/attention.tk against its template, same run, "
                              "N = 1k..16k, one CTA per tile -> persistent): D = 128 (one slot) "
                              "0.90/0.96/1.00/1.02/1.05 -> 0.95/0.98/1.00/1.01/1.03x, D = 64 (two "
                              "slots) 0.86/0.94/0.98/1.02/1.03 -> 1.04/1.04/1.04/1.04/1.04x")
    return "persistent", (f"every tile does the same work and {loops} ring loop(s) fill the "
                          "SM's shared memory (one CTA per SM either way): a persistent CTA "
                          "overlaps a tile's start with the previous tile's work")


def _names(once: list) -> str:
    """The tiles loaded once per tile, as the log names them."""
    return ", ".join(f"%{op.result.hint}" for op in once if op.result.hint) or "a tile"


PERSISTENT_STATE = 8
"""Registers a consumer thread of a persistent tile loop holds beyond one tile's: the tile index
and its coordinates, each one-shot ring's slot and phase. Where the consumers' estimate leaves
less headroom than this, tiles loaded once per tile keep one CTA per tile (``tight_registers``):
examples/attention_bwd_dkdv.tk (an estimate of 240 of the 240 registers its two consumers can
get) spilled one register through the whole persistent kernel, none with one CTA per tile.

Measured to one register (ptxas 13.0, 2026-11-27, ``benchmarks/probes/register_need.py
--headroom``: the consumers' need, persistent / one CTA per tile): attention_nol D = 256 236 / 220,
its causal form 232-235 / 219, D = 128 217 / 207, attention.tk D = 128 221 / 218. The level-2 estimate
(``mbarrier.level2_need``) is not counted here: it is right at D = 256 (220) but over-counts
D = 128 (228 against 207), which fits persistent and measured faster so; D = 256 keeps one CTA per
tile by its shared memory instead (``slot_bound``)."""


def tight_registers(kernel: Kernel) -> str:
    """Why a persistent tile loop would not fit the consumers' registers, or '' (the estimate
    warp-spec and reg-budget use: the live fragments + CONSUMER_OVERHEAD, against what the
    consumers get beside the smallest producer)."""
    from .warp_spec import consumer_fit, planned_consumers
    n = planned_consumers(kernel)
    if n is None:
        return ""
    need, room = consumer_fit(kernel, n)
    if need + PERSISTENT_STATE <= room:
        return ""
    return (f"its {n} consumer(s) need about {need} registers a thread of the {room} they can get, "
            f"and a persistent tile loop holds about {PERSISTENT_STATE} more (the tile index, each "
            "one-shot ring's slot and phase), which ptxas would spill")


LONG_TRIPS = 16
"""``by_trips``: past this many trips of the longest loop the launch takes the binary compiled with
one CTA per tile (tkjit/trip_dispatch.py); from ``SHORT_TRIPS`` to here the persistent binary runs
one CTA per tile. Measured (H200, 2026-11-27, same run, benchmarks/probes/by_trips_binaries.py,
…-s15-by-trips-d64.json, …-s15-by-trips-binaries.json; persistent binary / one-per-tile binary,
both one CTA per tile): at 16 trips D = 64 causal +1.8% (with L) / +2.2% (without), D = 128 +2.7% /
+0.5%; at 32 trips D = 64 +0.7% / +0.6%, D = 128 +1.5% / -1.9%; at 64 and 128 trips D = 128
without L -3.5 / -4.5%."""

SLOT_MEASURED = (
    "Measured: examples/attention_nol.tk at D = 256 (O's staging in Q's one slot), persistent, ran "
    "0.97x of one CTA per tile (H200, 2026-11-27, benchmarks/lowering_ab.py, B = 4, H = 16, "
    "N = 4096), and its tile walk cost the consumers about 16 registers beside level 2: ptxas "
    "needs about 236 of the 232 they get (it spilled 8 bytes), 220 with one CTA per tile (ptxas "
    "13.0, benchmarks/probes/register_need.py --headroom)")
"""Why ``slot_bound`` keeps one CTA per tile (the measurement behind it)."""


def slot_bound(kernel: Kernel) -> str:
    """Why a persistent tile loop would have to put a store's staging in the one slot of a tile
    loaded once per tile (``pipeline.staging_in_the_slot`` with the consumers warp-spec will
    choose), or ''."""
    from .pipeline import staging_in_the_slot
    from .warp_spec import planned_consumers
    n = planned_consumers(kernel)
    return "" if n is None else staging_in_the_slot(kernel, n)


SHORT_TRIPS = 8
"""``by_trips``: the longest ring loop at most this many trips launches persistent (the attention
template's SHORT_CAUSAL_TRIPS, measured there: round 8 of docs/hopper-codegen.md)."""

LAUNCH_OPS = {CDiv: "cdiv", Mul: "mul", Add: "add", Sub: "sub", FloorDiv: "fdiv", Min: "min",
              Max: "max"}
"""Scalar ops a launch-time trip count may be built from, and their launcher names."""


def trips_bound(kernel: Kernel) -> list | None:
    """The longest trip count of the ring loop whose trips grow with a block index (the heaviest
    tile's: that index at its last value), as a launcher expression over dims and constants; None
    where there is no such loop or its bounds use anything else (a kernel argument, another block
    index)."""
    axis = heaviest_axis(kernel)
    if axis is None:
        return None
    blocks = block_loop(kernel)
    loop = heavy_loop(kernel, axis)
    arg = blocks.regions[0].args[axis]
    try:
        last = ["sub", count_expression(blocks.variadic()[axis], blocks.span), 1]
        lo, hi, step = (launch_expression(v, {arg: last}) for v in loop.operands[:3])
    except PassError:
        return None
    if None in (lo, hi, step):
        return None
    return ["cdiv", ["sub", hi, lo], step]


def launch_expression(v: Value, subst: dict, depth: int = 0):
    """``v`` as a launcher grid expression (``subst``: values replaced by expressions), or None."""
    if v in subst:
        return subst[v]
    op = v.owner
    if depth > 32 or not isinstance(op, Op):
        return None
    if isinstance(op, Const):
        value = op.attrs["value"]
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(op, Dim):
        return ["dim", op.attrs["name"]]
    name = LAUNCH_OPS.get(type(op))
    if name is None:
        return None
    args = [launch_expression(x, subst, depth + 1) for x in op.operands]
    return None if None in args else [name, *args]


def launch_grid(kernel: Kernel) -> list:
    """The 1-D grid size as a JSON expression: T, or min(T, num_sms) when persistent, or T·S
    for ``split = S`` (a cluster of S CTAs per tile, whatever the schedule)."""
    total = tile_count(kernel)
    split = block_loop(kernel).attrs.get("split", 1)
    if split > 1:
        return ["mul", total, split]
    if block_loop(kernel).attrs.get("schedule") == "persistent":
        resident = block_loop(kernel).attrs.get("resident", 1)
        sms = ["num_sms"] if resident == 1 else ["mul", ["num_sms"], resident]
        short = block_loop(kernel).attrs.get("by_trips", 0)
        trips = trips_bound(kernel) if short else None
        if trips is not None:  # one CTA per tile where the longest loop has more than ``short`` trips
            return ["min", total, ["max", sms, ["mul", total, ["gt", trips, short]]]]
        return ["min", total, sms]
    return total


@register_pass
@dataclass(frozen=True)
class Grid(Pass):
    """The ``grid`` pass: persistent grid over the SM count and grouped tile order, or one CTA per
    tile."""

    name = "grid"
    summary = "persistent grid over the SM count and grouped tile order, or one CTA per tile"
    target_specific = True
    schedule: str = ""
    """Override the block loop's schedule: grid or persistent ("": keep the kernel's)."""
    group: int = 0
    """Override the block loop's group size (0: keep the kernel's)."""
    multicast: int = 0
    """CTAs per cluster sharing ring loads through TMA multicast (passes/pairs.py: 2 pairs the
    tiles along the paired block index, a GEMM's M; 1 turns it off; 0: the backend's default).
    Recorded as the kernel attribute ``multicast``."""

    heavy: int = 0
    """-1: never order tiles heaviest first (0: where a ring loop's trip count grows with a block
    index)."""

    overlap: int = 0
    """Tiles loaded once per tile and a schedule the kernel does not name: 0 (the default) or 1
    lets them take a persistent grid (with ``by_trips`` where tiles differ in work), -1 keeps one
    CTA per tile."""

    short: int = 0
    """``by_trips``: the most trips of the longest loop that still launch a persistent grid
    (0: ``SHORT_TRIPS``)."""
    long: int = 0
    """``by_trips``: the most trips of the longest loop that still launch the persistent binary
    (one CTA per tile past ``short``); past it the launch takes the one-CTA-per-tile variant
    (tkjit/trip_dispatch.py). 0: ``LONG_TRIPS``; at least ``short``."""

    stream_k: int = 0
    """1: a persistent Hopper GEMM splits the K loops of its last, partial wave of tiles over
    every CTA (stream-K, codegen/hopper/lower_stream_k.py); -1 turns it off; 0: the backend's default.
    Recorded as the kernel attribute ``stream_k``."""

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        blocks = block_loop(kernel)
        if self.stream_k:
            if self.stream_k not in (1, -1):
                raise PassError(f"grid: stream_k must be 1 (on) or -1 (off), got {self.stream_k}")
            kernel.attrs["stream_k"] = self.stream_k
        if self.schedule:
            if self.schedule not in ("grid", "persistent"):
                raise PassError(f"grid: schedule must be grid or persistent, got '{self.schedule}'")
            blocks.attrs["schedule"] = self.schedule
        if self.group:
            blocks.attrs["group"] = self.group
        if self.multicast:
            kernel.attrs["multicast"] = self.multicast
        chosen = ""
        if "schedule" not in blocks.attrs:
            if self.overlap not in (0, 1, -1):
                raise PassError(f"grid: overlap must be 1 (on), -1 (off) or 0 (the default: on), got {self.overlap}")
            overlap = self.overlap != -1
            schedule, chosen = auto_schedule(kernel, overlap)
            if schedule == "persistent":
                blocks.attrs["schedule"] = schedule
                if uneven_work(kernel):
                    if self.short < 0:
                        raise PassError(f"grid: short must be a trip count >= 1 (0: {SHORT_TRIPS}), got {self.short}")
                    blocks.attrs["by_trips"] = self.short or SHORT_TRIPS
                    if self.long and self.long < blocks.attrs["by_trips"]:
                        raise PassError(f"grid: long ({self.long}) must be at least short "
                                        f"({blocks.attrs['by_trips']})")
                    kernel.attrs["long_trips"] = self.long or max(LONG_TRIPS, blocks.attrs["by_trips"])
        schedule = blocks.attrs.get("schedule", "grid")
        group = blocks.attrs.get("group", 1)
        indices = [f"%{a.hint}" if a.hint else "?" for a in blocks.regions[0].args]
        grid = launch_grid(kernel)
        kernel.attrs["ctas"] = readable(grid)
        order = "row-major"
        if group > 1 and len(indices) >= 2:
            order = f"grouped by {group} along {indices[-2]}"
        elif group > 1:
            ctx.decide(f"@{kernel.name}", f"group {group} ignored",
                       "grouping needs a block loop of at least two indices")
        heavy = None if self.heavy == -1 or group > 1 else heaviest_axis(kernel)
        if heavy is not None:
            blocks.attrs["heavy"] = heavy
            order = f"heaviest first along {indices[heavy]}"
            ctx.decide(f"@{kernel.name}", f"tile order: {order}",
                       f"the trip count of the loop at {heavy_loop(kernel, heavy).span.location()} grows "
                       f"with {indices[heavy]}: tiles run with {indices[heavy]} descending, so the "
                       "longest start first and the shortest fill the last wave, in chunks of the "
                       f"other indices whose loaded tensors fit {L2_BUDGET >> 20} MB of L2 (they share "
                       "them while in flight), the chunks as even as can be (a small last chunk "
                       "would start its longest tile near the end)", heavy=heavy)
        kernel.attrs["tile_order"] = order
        split = blocks.attrs.get("split", 1)
        if split > 1:
            what = (f"split = {split}: {readable(grid)} CTAs, a cluster of {split} per tile"
                    + (" (not persistent)" if schedule == "persistent" else ""))
            why = (f"each of the {split} CTAs takes 1/{split} of the tile's reduction loop and the "
                   "cluster adds their partial sums through distributed shared memory, which "
                   "reuses each CTA's drained ring, so a cluster handles exactly one tile")
        elif schedule == "persistent" and blocks.attrs.get("by_trips"):
            what = (f"persistent where the longest loop has at most {blocks.attrs['by_trips']} trips "
                    f"({readable(trips_bound(kernel))}): {readable(grid)} CTAs, CTA b handles tiles "
                    "b, b + ctas, ...")
            why = ("the launch picks min(tiles, SMs) CTAs for short loops, one CTA per tile for "
                   "long ones")
        elif schedule == "persistent":
            what = f"persistent: {readable(grid)} CTAs, CTA b handles tiles b, b + ctas, ..."
            why = ("one CTA per SM keeps its pipeline rings and barriers running from tile to "
                   "tile (the producer prefetches the next tile while consumers finish this "
                   "one), and short loops stop paying a launch-sized prologue per tile")
        else:
            what = f"{readable(grid)} CTAs, one per tile"
            why = "schedule(grid): each CTA handles one tile; the 1-D grid has no size limit"
        if chosen and split == 1:
            what += " (chosen: the kernel names no schedule)"
            why = f"{chosen}; {why}"
        tiles = f"tiles over ({', '.join(indices)}), {order}"
        if order.startswith("grouped"):
            tiles += (f": {group} consecutive CTAs take {group} neighbouring {indices[-2]} rows of "
                      f"the same {indices[-1]} columns, sharing their tiles in L2")
        ctx.decide(f"@{kernel.name}", what, f"{why}; {tiles}", grid=grid, schedule=schedule,
                   group=group, order=order, split=split)
        return kernel


def heaviest_axis(kernel: Kernel) -> int | None:
    """The block index a ring loop's trip count grows with (its upper bound nondecreasing in it,
    its lower bound and step not depending on it), when there is exactly one such index."""
    blocks = block_loop(kernel)
    args = list(blocks.regions[0].args)
    found = {i for i in range(len(args)) if heavy_loop(kernel, i) is not None}
    return found.pop() if len(found) == 1 else None


def heavy_loop(kernel: Kernel, axis: int):
    arg = block_loop(kernel).regions[0].args[axis]
    for loop in pipelined_loops(kernel):
        lo, hi, step = loop.operands[:3]
        if depends_on(hi, {arg}) and not depends_on(lo, {arg}) and not depends_on(step, {arg}) \
                and nondecreasing(hi, arg):
            return loop
    return None


def nondecreasing(v: Value, arg: Value, depth: int = 0) -> bool:
    """Whether ``v`` cannot decrease as ``arg`` grows, all other leaves (sizes, constants, other
    indices) held fixed and non-negative: sums, products and quotients by what does not depend on
    ``arg``, min and max of such, a difference whose right side does not depend on it."""
    if v is arg or not depends_on(v, {arg}):
        return True
    op = v.owner
    if depth > 32 or not isinstance(op, Op):
        return False
    if isinstance(op, (Add, Min, Max)):
        return all(nondecreasing(x, arg, depth + 1) for x in op.operands)
    if isinstance(op, Mul):
        return all(nondecreasing(x, arg, depth + 1) for x in op.operands) and \
            all(_non_negative(x) for x in op.operands)
    if isinstance(op, (CDiv, FloorDiv, Sub)):
        a, b = op.operands
        return nondecreasing(a, arg, depth + 1) and not depends_on(b, {arg}) and \
            (isinstance(op, Sub) or _positive_const(b) or isinstance(b.owner, Dim))
    return False


def _non_negative(v: Value) -> bool:
    op = v.owner
    if isinstance(op, Const):
        return op.attrs["value"] >= 0
    return True  # indices, sizes and products of them


def _positive_const(v: Value) -> bool:
    op = v.owner
    return isinstance(op, Const) and op.attrs["value"] > 0
