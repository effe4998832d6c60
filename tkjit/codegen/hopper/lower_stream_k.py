"""Stream-K as a schedule option of the general sm_90a lowering (the grid pass's ``stream_k``):
the last, partial wave of a persistent grid's tiles has its K trips split evenly over every CTA.

On top of the persistent walk and split-K's partial trips (``RingRegs.first``):

* the walk (both roles, ``begin`` / ``advance``): whole tiles c, c + P, ... below T_dp, then
  the tiles of this CTA's range of the tail's trips (tail_split.py gives the arithmetic, made
  at run time from ``%nctaid.x``: the same kernel runs any grid);
* each tile's unit (``unit``): the ring loop's trips this tile are [first, first + trips) of
  its Kt -- (0, Kt) for a whole tile -- set in the ring state both roles loop over, so the
  producer loads exactly the stages the consumers read and the protocol is unchanged;
* the protocol's ``StreamKFixup`` step (the mbarrier pass puts it last in the consumers' tile,
  before the first op reading the loop's result; ``fixup``): a contribution (first > 0)
  stores its partial accumulator to its CTA's workspace slot, sets its flags and ends the tile
  (the rest of the tile is IR ops only); an owned unit (first 0, fewer than Kt trips) adds the
  later CTAs' partials, then the tile's ops run on the whole sum.

The workspace, the flags and the launch order they need are tail_split.py's and the launcher's
(``serial_launches``). What is refused, ``refusal`` says with the op.
"""
from __future__ import annotations

from ...ir.core import Kernel
from ...ir.ops import MMA_OPS, For, If, Store, Yield, Zeros
from ...ir.types import F32, TileType
from ...passes.hopper import block_loop, depends_on, is_shared
from . import tail_split
from .lower_checks import split_part_registers


def asked(kernel: Kernel) -> bool:
    return int(kernel.attrs.get("stream_k", 0) or 0) > 0


# Stream-K through the general lowering is GPU-verified (H200, 2026-11-27:
# tests/gpu/test_general_stream_k_gpu.py 12 of 12, ragged shapes, poisoned outputs, repeated
# launches, a side stream, a CUDA graph, agreement with the GEMM template) and timed at
# 1.00-1.03x the template's in the same run
# (benchmarks/results/2026-11-27-nvidia-h200-s11-stream-k-general-vs-template.json);
# lowering="auto" takes it, and the template was deleted the same day.


def not_applied(kernel: Kernel, schedule) -> str | None:
    """Why the asked-for stream-K does not apply to this variant of the kernel (it then runs its
    tiles whole, as the template did, and the log says why), or None when it does."""
    blocks = block_loop(kernel)
    if blocks.attrs.get("schedule") != "persistent":
        return "stream-K splits the last wave over a persistent grid's CTAs; this grid is one CTA per tile"
    if int(blocks.attrs.get("split", 1) or 1) > 1:
        return "split-K already shares each tile's K loop within a cluster"
    if kernel.attrs.get("pingpong"):
        return "ping-pong consumers take whole tiles in turn; stream-K units are not built for them"
    if schedule.pair is not None and schedule.pair.ctas > 1:
        return "the multicast pair walks tile pairs; stream-K units are not built for them"
    if schedule.stream_k_loop is None:
        return ("the mbarrier pass placed no stream-K fix-up: the tile must be one ring loop with "
                "products and nothing else taking a protocol step (one-shot tiles, stores staged over "
                "the ring)")
    return None


def refusal(kernel: Kernel, schedule, consumers: int, options: dict | None = None):
    """None when the kernel can be lowered with the asked-for stream-K (or it does not apply:
    ``not_applied``), else a Refusal naming the op: one ring loop carrying one f32 accumulator
    from ``zeros()`` (every CTA's partial is added), read in the loop only as its last product's
    accumulator, with the same trip count in every tile, and no store before it."""
    from .lower import Refusal
    blocks = block_loop(kernel)
    if not_applied(kernel, schedule) is not None:
        return None
    loop: For = schedule.stream_k_loop
    carried = list(loop.variadic())
    if len(carried) != 1 or not isinstance(carried[0].type, TileType) or carried[0].type.dtype != F32:
        return Refusal(loop, "stream-K adds partial results: the loop must carry exactly one f32 accumulator tile")
    if not isinstance(carried[0].owner, Zeros):
        return Refusal(loop, "stream-K adds every unit's partial: the accumulator must start from zeros()")
    from ...passes.mbarrier import in_flight
    mmas = [op for op in loop.regions[0].ops if isinstance(op, MMA_OPS)]
    if mmas and not is_shared(mmas[-1].operands[0]):
        return Refusal(mmas[-1], "stream-K keeps the loop's last product in flight from trip to trip, and "
                                 "this one reads a register A made in the trip, which stream-K's protocol "
                                 "does not hold: its A must be a shared tile")
    if not mmas or not in_flight(loop) or mmas[-1].operands[2] is not loop.regions[0].args[1]:
        return Refusal(loop, "stream-K adds partial results: the loop may use its carried tile only as "
                             "the accumulator of its last product")
    for v in loop.operands[:3]:
        if depends_on(v, set(blocks.regions[0].args)):
            return Refusal(loop, "stream-K numbers the tail's trips tile by tile: every tile must have "
                                 "the same trip count; this loop's bounds depend on the block indices")
    ops = [op for op in blocks.regions[0].ops if not isinstance(op, Yield)]
    for op in ops[:ops.index(loop)]:
        if any(isinstance(inner, (Store, For, If)) for inner in op.walk()):
            return Refusal(op, "every unit of a stream-K tile runs the ops before its loop: only "
                               "scalars and loads may come before it")
    regs = split_part_registers(carried[0].type, consumers)
    if consumers == 1 and regs >= 128:
        return Refusal(loop, f"one consumer holding {regs} accumulator registers: the fix-up's loop "
                             "spills (ptxas 13.0, 16 B at 64x256)")
    return None


def decision(kernel: Kernel, schedule, consumers: int) -> dict:
    why_not = not_applied(kernel, schedule)
    if why_not is not None:
        return {"decision": "stream-K", "value": "none", "why": f"asked for by the grid pass, but {why_not}"}
    loop = schedule.stream_k_loop
    acc: TileType = loop.variadic()[0].type
    return {"decision": "stream-K", "value": "the last wave's K trips over every CTA",
            "why": "asked for by the grid pass (grid{stream_k=1}): with T tiles on P CTAs and R = T mod P "
                   "> 0 (T >= P, Kt >= 2 trips, P <= " f"{tail_split.MAX_SLOTS}), tiles below T - R run "
                   "whole (CTA c: c, c + P, ...) and the last R tiles' R*Kt trips are cut evenly, CTA c "
                   "taking [c*R*Kt/P, (c+1)*R*Kt/P), decided by the kernel from the launch; a unit "
                   "starting inside a tile stores its partial accumulator "
                   f"({acc.rows}x{acc.cols} f32, {acc.rows * acc.cols * 4} B) to the module's workspace "
                   "and sets per-thread flags (st.release.gpu), the unit starting the tile adds those of "
                   "the later CTAs (ld.acquire.gpu) and runs the epilogue; launches are serialized "
                   "(serial_launches: the workspace belongs to the loaded module)"}


def declarations(k) -> list[str]:
    return tail_split.declarations(k.kernel.name, slot_bytes(k), k.consumers)


def slot_bytes(k) -> int:
    """A workspace slot: one f32 tile (every consumer thread's accumulators)."""
    acc: TileType = k.schedule.stream_k_loop.variadic()[0].type
    return acc.rows * acc.cols * 4


# -- the walk both roles share ------------------------------------------------------------
class Walk:
    """One role's stream-K walk: Kt (the loop's trips, the same every tile) in a register, and
    the split's values emitted where used (tail_split.Split)."""

    def __init__(self, role) -> None:
        from .lower_producer import trip_count
        self.role, self.b = role, role.b
        self.trips = trip_count(role.ctx, role.b, role.k.schedule.stream_k_loop)
        self.split = tail_split.Split(role.b, role.tile_count, lambda: self.trips)

    def begin(self) -> None:
        """After ``tile = %ctaid.x``: past the whole tiles, the tile this CTA's range begins in."""
        self.enter()

    def enter(self, dp: str | None = None, total: str | None = None) -> None:
        b, sk, tile = self.b, self.split, self.role.tile
        if dp is None:
            dp, total = sk.tail()
        whole, out, q, begin = b.label("whole_tiles"), b.pred(), b.reg(), b.reg()
        b(f"setp.lt.s32 {out}, {tile}, {dp};", f"@{out} bra {whole};")
        b(f"mov.b32 {begin}, {sk.range_start(sk.cta(), total)};",
          f"div.s32 {q}, {begin}, {self.trips};", f"add.s32 {tile}, {dp}, {q};",
          f"setp.ge.s32 {out}, {begin}, {sk.range_start(sk.cta(), total, 1)};",
          f"@{out} mov.b32 {tile}, {self.role.tile_count};")
        b.place(whole)

    def advance(self) -> None:
        """The next tile: c + P while whole, else the next tile if this CTA's range reaches it."""
        b, sk, tile = self.b, self.split, self.role.tile
        tail, done, out, step = b.label("streamk_next"), b.label("next_unit"), b.pred(), b.reg()
        dp, total = sk.tail()
        b(f"setp.ge.s32 {out}, {tile}, {dp};", f"@{out} bra {tail};",
          f"mov.u32 {step}, %nctaid.x;", f"add.s32 {tile}, {tile}, {step};")
        self.enter(dp, total)
        b(f"bra.uni {done};")
        b.place(tail)
        start = b.reg()
        b(f"add.s32 {tile}, {tile}, 1;", f"sub.s32 {start}, {tile}, {dp};",
          f"mul.lo.s32 {start}, {start}, {self.trips};",
          f"setp.ge.s32 {out}, {start}, {sk.range_start(sk.cta(), total, 1)};",
          f"@{out} mov.b32 {tile}, {self.role.tile_count};")
        b.place(done)

    def unit(self) -> tuple[str, str]:
        """(first trip, trips) of this tile's unit: (0, Kt) for a whole tile, else the part of
        this CTA's range inside it."""
        b, sk, tile = self.b, self.split, self.role.tile
        dp, total = sk.tail()
        first, trips, rel, last, whole, done = b.reg(), b.reg(), b.reg(), b.reg(), b.pred(), b.label("unit")
        b(f"mov.b32 {first}, 0;", f"mov.b32 {trips}, {self.trips};",
          f"setp.lt.s32 {whole}, {tile}, {dp};", f"@{whole} bra {done};",
          f"sub.s32 {rel}, {tile}, {dp};", f"mul.lo.s32 {rel}, {rel}, {self.trips};",
          f"sub.s32 {first}, {sk.range_start(sk.cta(), total)}, {rel};", f"max.s32 {first}, {first}, 0;",
          f"sub.s32 {last}, {sk.range_start(sk.cta(), total, 1)}, {rel};", f"min.s32 {last}, {last}, {self.trips};",
          f"sub.s32 {trips}, {last}, {first};")
        b.place(done)
        return first, trips


# -- the consumers' fix-up (the protocol's StreamKFixup) ----------------------------------
def fixup(role, step, tile_end: str) -> None:
    """A contribution stores this thread's accumulators to the CTA's slot, sets its flag and
    branches to ``tile_end``; an owned unit adds the later CTAs' partials; a whole tile nothing."""
    k, b = role.k, role.b
    r = role.rings[step.ring]
    acc = role.ctx.get(role.loop_of[step.ring].results[0])
    regs = [x for band in acc.regs for chunk in band for x in chunk]
    owned, whole, p = b.label("streamk_owned"), b.label("streamk_whole"), b.pred()
    size = slot_bytes(k)
    b(f"setp.eq.s32 {p}, {r.first}, 0;", f"@{p} bra {owned};")
    tail_split.contribute(b, k.kernel.name, regs, role.sk_walk.split.cta(), size, k.consumers, role.index, k.tid_wg)
    b(f"bra.uni {tile_end};")
    b.place(owned)
    b(f"setp.ge.s32 {p}, {r.trips}, {role.sk_walk.trips};", f"@{p} bra {whole};")
    tail_split.gather(b, k.kernel.name, role.sk_walk.split, regs, role.tile, size, k.consumers, role.index, k.tid_wg)
    b.place(whole)


__all__ = ["asked", "not_applied", "refusal", "decision", "declarations", "slot_bytes", "Walk", "fixup"]
