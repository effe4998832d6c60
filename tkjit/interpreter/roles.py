"""Run a kernel as the general Hopper lowering schedules it, on the CPU.

    run_roles(kernel, args, seed=0, ctas=3)        # kernel: IR after the Hopper passes

Each CTA's producer and consumer warpgroups are coroutines that walk the mbarrier pass's
protocol (``schedule_of``; given the async-schedule IR, the protocol read back from it, which is
the one checked and the one the PTX emitter prints) over the same
IR ops the emitter lowers, placed between the protocol's steps by the same rule
(``codegen/hopper/interleave.py``). Shared tiles live in ring stages: a TMA load fills its stage
only when it lands, a moment the scheduler picks; a wgmma reads its stages when its group is
waited for (the latest moment a GPU may read them); mbarriers complete phases by arrivals and
transaction bytes, and waits pass by phase parity, as in PTX. A seeded scheduler interleaves the
roles (and the landings) differently per seed.

Given the ``async-schedule`` pass's kernel (``k.async_ir``, or that IR parsed back from its text),
the roles run that IR instead: rings and programs from its ``ring``/``producer``/``consumers``
ops and the consumers' walk from its block loop and loop bodies (``async_schedule.items_of``),
not from the protocol object and interleave.py.

Every schedule must give the plain interpreter's result, bit for bit: a CPU check that the
lowering's placement of the IR between the protocol's steps keeps the kernel's meaning. What it
catches: a stage read before its bytes land or after the producer refilled it (a release before
the wgmma that reads the stage was waited for), an IR op reading a wgmma result before its wait,
deadlocks, a role left waiting at the end. What it does not model: register layouts and PTX
(the GPU tests and the PTX simulator cover those).

Split-K (the block loop's ``split = S``): each tile is a cluster of S CTAs run together, CTA r
looping over its share of the reduction loop's trips; at the protocol's ``ClusterReduce`` every
consumer of every CTA of the cluster meets, and each then holds the sum of the partials (its own
first, then the others by rank: the order in which the GPU adds them); rank 0 stores (on the GPU
each rank stores its part). The sum is in another order than the plain interpreter's single loop,
so a split kernel matches it to rounding, not bit for bit.

Stream-K (the grid pass's ``stream_k``, the protocol's ``StreamKFixup``): every CTA of the
persistent grid runs together over its units (codegen/hopper/tail_split.walk: whole tiles, then
its share of the last wave's trips); at the fix-up a contribution leaves its partial in the
workspace, sets its flag and ends its tile, an owner waits (blocked) for the flags of its
contributors and adds their partials in CTA order, as the GPU does: to rounding, like split-K.

Multicast (``grid{multicast=2}``, passes/pairs.py): the two CTAs of a pair run together, on the
tiles whose paired block index is 2 mp and 2 mp + 1 (an odd last row: the off-edge CTA runs too,
its loads zero-filled past the tensor, its stores clipped). A load the pair shares lands as two
halves, each CTA's producer's in *both* CTAs' stage (completing its bytes on both ``full[s]``);
a stage is read whole, from the halves as they landed (the first half's columns or rows from
rank 0's copy, the second's from rank 1's). A release of a shared ring arrives on both CTAs'
``empty[s]`` (count x 2); ``ClusterSync`` is a meeting of every role of the pair ("start") or of
its consumers ("exit").
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from ..errors import InterpreterError
from ..ir.core import Kernel, Op
from ..ir.ops import Copy, CopyCols, For, Load, Yield
from ..ir.types import ScalarType
from .engine import Environment, Interpreter
from .launch import bind


class ScheduleError(InterpreterError):
    """The schedule went wrong on the CPU: a deadlock, a read of an unfinished wgmma, a stage read
    that never landed."""


@dataclass
class Barrier:
    """An mbarrier: ``count`` arrivals and the expected transaction bytes complete a phase."""

    count: int
    pending: int = 0
    tx: int = 0
    completed: int = 0

    def __post_init__(self) -> None:
        self.pending = self.count

    def arrive(self) -> None:
        self.pending -= 1
        self._complete()

    def expect(self, nbytes: int) -> None:
        self.tx += nbytes

    def land(self, nbytes: int) -> None:
        self.tx -= nbytes
        self._complete()

    def _complete(self) -> None:
        if self.pending == 0 and self.tx == 0:
            self.completed += 1
            self.pending = self.count

    def passed(self, parity: int) -> bool:
        """try_wait.parity: the phase of that parity has completed (the current one's differs)."""
        return self.completed % 2 != parity


@dataclass
class Ring:
    stages: int
    full: list
    empty: list
    slots: list


@dataclass
class RingRef:
    """A shared tile of a ring: read from the stage the reader is at when it reads."""

    ring: str
    load: str


@dataclass
class TileRef:
    """A shared tile the consumers write from registers (``TileWrite``): read from the CTA's copy
    of it when the wgmma reading it is waited for."""

    tile: str


@dataclass
class Pending:
    """A wgmma result: ``value`` is None until its group is waited for."""

    op: Op
    value: object = None


@dataclass
class InFlight:
    """A row block the consumers filled with their copies left in flight (``CopyFill(wait =
    False)``): ``value`` is what lands at the ``FillWait``; no op may read it before."""

    tile: str
    value: object


def resolved(x):
    return x.value if isinstance(x, Pending) and x.value is not None else x


@dataclass
class Regs:
    s: int = 0
    ph: int = 0
    trips: int = 0
    counter: int = 0
    own: int = 0
    """A consumer's own trips of the tile (``Loop(part="own")``; the own-trips pass)."""

    def part(self, part: str) -> range:
        """The trip indices a loop over ``part`` of the tile's trips runs."""
        own = min(self.own, self.trips)
        return {"all": range(self.trips), "own": range(own), "rest": range(own, self.trips)}[part]


@dataclass
class Cluster:
    """Split-K's meeting of every consumer of a cluster's CTAs, and their partial sums."""

    size: int
    arrived: int = 0
    partials: dict = field(default_factory=dict)   # (rank, consumer) -> partial accumulator


@dataclass
class StreamK:
    """Stream-K's launch: T tiles on P CTAs of Kt trips, the workspace and the flags."""

    tiles: int
    ctas: int
    trips: int
    partials: dict = field(default_factory=dict)   # (CTA, consumer) -> partial accumulator
    flags: dict = field(default_factory=dict)      # (CTA, consumer) -> 0 / 1


@dataclass
class PairState:
    """A multicast pair's meetings (``ClusterSync``): arrivals per meeting."""

    arrived: dict = field(default_factory=dict)


@dataclass
class Cta:
    rings: dict
    tile_count: int = 0
    landings: list = field(default_factory=list)
    turns: dict = field(default_factory=dict)
    meeting: list = field(default_factory=lambda: [0, 0])
    written: dict = field(default_factory=dict)    # tile -> its contents (TileWrite)
    rank: int = 0
    cluster: Cluster | None = None
    pair: PairState | None = None
    off_edge: bool = False
    """Multicast: the pair's second CTA on a tile row past the last (an odd count): its loads
    past the tensor read zeros (TMA zero-fills them) and its stores there are dropped (clipped)."""
    peers: list = field(default_factory=list)
    """Multicast: the pair's CTAs, by rank (this one included)."""
    staged: dict = field(default_factory=dict)
    """ring -> the consumers whose epilogue staging is over its current stage and whose TMA stores
    may still read it (``StagingBegin`` until ``StagingRead`` or ``StoreDrain``)."""
    started: bool = False
    """Whether the CTA has started: its barriers are initialized before any of its roles runs, and
    a peer's arrival or multicast landing before that is an error (a pair's ``ClusterSync("start")``
    orders them; CTAs start at independent times)."""
    running: int = 0
    """Its roles still running; at 0 the CTA has exited, and a peer's arrival or multicast after
    that is an error (the pair's ``ClusterSync("exit")`` orders them)."""


def peer_ready(cta: Cta, by: Cta, what: str) -> None:
    """``by`` arrives on or multicasts into ``cta``'s barriers: ``cta`` must have started, and not
    exited."""
    if cta is by:
        return
    if not cta.started:
        raise ScheduleError(f"CTA {by.rank} {what} in CTA {cta.rank} before that CTA initialized its "
                            "barriers (no cluster barrier orders the pair's start)")
    if cta.running == 0:
        raise ScheduleError(f"CTA {by.rank} {what} in CTA {cta.rank} after that CTA exited (no cluster "
                            "barrier orders the pair's exit)")


BLOCKED = "blocked"


class Role:
    """One warpgroup's program: a generator that yields BLOCKED while a wait does not pass."""

    def __init__(self, rt: "Roles", cta: Cta, tiles: list[tuple], index: int | None):
        self.rt, self.cta, self.tiles, self.index = rt, cta, tiles, index
        self.env = Environment.__new__(Environment)
        self.env.values = dict(rt.base)
        self.env.dims = dict(rt.launch.dims)
        self.it = Interpreter(rt.kernel, self.env, rt.handlers)
        self.regs = {name: Regs() for name in cta.rings}
        self.first: dict[str, int] = {}  # ring -> this CTA's first trip (split-K)
        self.tile_i = 0
        self.units: list[tuple[int, int]] = []  # stream-K: (first trip, trips) per tile of ``tiles``

    # -- shared structure -----------------------------------------------------------------
    def run(self, steps):
        from ..passes import sync_protocol as sp
        for step in steps:
            if isinstance(step, sp.Tiles):
                yield from self.tiles_step(step)
            elif isinstance(step, sp.Loop):
                r = self.regs[step.ring]
                for r.counter in r.part(step.part):
                    if step.part == "rest":  # a consumer's idle trips: protocol steps only
                        yield from self.run(step.body)
                    else:
                        yield from self.trip(step)
            elif isinstance(step, sp.IfTrips):
                yield from self.run(step.body if len(self.regs[step.ring].part(step.part)) > 0 else step.orelse)
            elif isinstance(step, sp.IfPrevTile):
                if self.tile_i > 0:  # the CTA handled a tile before this one
                    yield from self.run(step.body)
            elif isinstance(step, sp.IfNextTile):
                if self.has_next_tile():
                    yield from self.run(step.body)
            elif isinstance(step, sp.NotFirst):
                if self.loop_counter() > 0:
                    yield from self.run(step.body)
            elif isinstance(step, sp.First):
                if self.loop_counter() == 0:
                    yield from self.run(step.body)
            else:
                yield from self.event(step)

    alternate = False

    def has_next_tile(self) -> bool:
        return self.tile_i + 1 < self.cta.tile_count

    def loop_counter(self) -> int:
        return self.regs[self.current_ring].counter

    def event(self, step):
        from ..passes import sync_protocol as sp
        ring = self.cta.rings.get(getattr(step, "ring", None))
        r = self.regs.get(getattr(step, "ring", None))
        if isinstance(step, sp.Wait):
            bars = ring.full if step.bar == "full" else ring.empty
            while not bars[r.s].passed(r.ph ^ step.flip):
                yield BLOCKED
        elif isinstance(step, sp.ExpectTx):
            ring.full[r.s].expect(step.nbytes)
            ring.full[r.s].arrive()
        elif isinstance(step, sp.Advance):
            r.s += 1
            if r.s == ring.stages:
                r.s = 0
                r.ph ^= 1
            elif step.per != "wrap":
                r.ph ^= 1
        elif isinstance(step, sp.Release):
            stage = r.s if step.which == "cur" else (r.s - 1) % ring.stages
            for cta in self.cta.peers if self.rt.proto.ring(step.ring).cluster > 1 else [self.cta]:
                peer_ready(cta, self.cta, f"arrives on empty[{stage}] of ring {step.ring}")
                cta.rings[step.ring].empty[stage].arrive()
        elif isinstance(step, sp.SkipTrips):
            total = r.s + r.trips
            r.ph ^= (total // ring.stages) & 1
            r.s = total % ring.stages
        elif isinstance(step, sp.Reset):
            r.s, r.ph = 0, 0
        else:
            yield from self.other(step)

    def other(self, step):
        raise ScheduleError(f"the CPU schedule has no meaning for protocol step {step.text()}")

    def cluster_sync(self, step):
        """Multicast's cluster barrier: every role of the pair meets ("start"), or every consumer
        of it ("exit")."""
        meeting = self.cta.pair.arrived
        meeting[step.at] = meeting.get(step.at, 0) + 1
        roles = self.rt.proto.consumers + (1 if step.at == "start" else 0)
        while meeting[step.at] < len(self.cta.peers) * roles:
            yield BLOCKED

    def scalars(self, ops) -> None:
        from ..codegen.hopper.lower_producer import is_scalar_op
        for op in ops:
            if is_scalar_op(op) and all(v in self.env.values for v in op.operands):
                self.exec(op)

    row_share = None
    """(consumer, consumers): a consumer that stores only its share of each register tile's rows
    (with per-consumer trip counts each one computes only its own rows right)."""

    shadow = False
    """A consumer whose stores are dropped: cooperative consumers each own a share of a tile's rows
    on the GPU; here each computes the whole tile, and one of them writes it."""

    def exec(self, op: Op) -> None:
        from ..ir.ops import Store
        args = []
        for v in op.operands:
            value = resolved(self.env.values.get(v))
            if isinstance(value, Pending):
                raise ScheduleError(f"'{op.NAME}' reads %{v.hint}, the result of a wgmma not waited for yet",
                                    op.span)
            if isinstance(value, InFlight):
                raise ScheduleError(f"'{op.NAME}' reads the tile {value.tile}, whose cp.async copies are in "
                                    "flight (no fill_wait before it)", op.span)
            if isinstance(value, RingRef) and isinstance(op, (Copy, CopyCols)) and op.operands[0] is v:
                # a consumer reads a one-shot tile into registers (its Wait passed: it landed)
                value = self.slot_value(value, self.regs[value.ring].s, op)
            elif isinstance(value, (RingRef, TileRef)):
                raise ScheduleError(f"'{op.NAME}' reads the shared tile %{v.hint} outside a wgmma", op.span)
            args.append(value)
        if self.shadow and isinstance(op, Store):
            return
        if self.row_share is not None and isinstance(op, Store):
            args[1] = own_rows(args[1], op.operands[1].type, *self.row_share)
        for inner in (o for region in op.regions for r in region.ops for o in r.walk()):
            for v in inner.operands:  # an if's branch reads a wgmma result from outside it
                value = self.env.values.get(v)
                if isinstance(value, InFlight):
                    raise ScheduleError(f"'{inner.NAME}' reads the tile {value.tile}, whose cp.async copies are "
                                        "in flight (no fill_wait before it)", inner.span)
                if isinstance(value, RingRef) and isinstance(inner, (Copy, CopyCols)) and inner.operands[0] is v:
                    # a loop of register work reads a landed one-shot tile (copy_cols of a row block)
                    self.env.values[v] = self.slot_value(value, self.regs[value.ring].s, inner)
                elif isinstance(value, Pending):
                    if value.value is None:
                        raise ScheduleError(f"'{inner.NAME}' reads %{v.hint}, the result of a wgmma "
                                            "not waited for yet", inner.span)
                    self.env.values[v] = value.value
        self.env.bind(op.results, self.run_op(op, args))

    def run_op(self, op: Op, args: list) -> list:
        """The op's handler; on the pair's off-edge CTA, a load or store past the tensor reads
        zeros or writes nothing, as TMA and the clipped stores do."""
        try:
            return self.rt.handlers[type(op)](self.it, op, args)
        except InterpreterError:
            from ..ir.ops import Store
            if not self.cta.off_edge or not isinstance(op, (Load, Store)):
                raise
            return [] if isinstance(op, Store) else [zero_value(op.result.type)]

    def bind_tile(self, tile: tuple) -> None:
        self.env.bind(self.rt.blocks.regions[0].args, list(tile))

    def enter_trip(self, step) -> For:
        """The loop of ``step``'s ring, its variable bound to this trip's value (lo + trip * step)."""
        loop = self.rt.loop_of[step.ring]
        self.current_ring = step.ring
        lo, _, st = (self.env.values[v] for v in loop.operands[:3])
        trip = self.first.get(step.ring, 0) + self.regs[step.ring].counter
        self.env.bind([loop.regions[0].args[0]], [lo + trip * st])
        return loop

    def trip_counts(self) -> None:
        for ring, loop in self.rt.loop_of.items():
            self.trip_count(loop, ring)

    def trip_count(self, loop: For, ring: str) -> None:
        """The ring's trip count this tile: max(0, ceil((hi - lo) / step)); split-K: this CTA's
        share, trips [r*per, r*per + per) with per = ceil(T / S)."""
        lo, hi, step = (self.env.values[v] for v in loop.operands[:3])
        trips = max(0, -(-(hi - lo) // step))
        self.first[ring] = 0
        if self.units and loop is self.rt.stream_k_loop:  # stream-K: this tile's unit
            self.first[ring], trips = self.units[self.tile_i]
        elif self.cta.cluster is not None and loop is self.rt.split_loop:
            per = -(-trips // self.rt.split)
            self.first[ring] = self.cta.rank * per
            trips = max(0, min(per, trips - self.first[ring]))
        self.regs[ring].trips = trips


class Producer(Role):
    current_ring = None

    def tiles_step(self, step):
        for self.tile_i, tile in enumerate(self.tiles):
            self.bind_tile(tile)
            self.scalars(self.rt.blocks.regions[0].ops)
            self.trip_counts()
            yield from self.run(step.body)

    def trip(self, step):
        loop = self.enter_trip(step)
        self.scalars(loop.regions[0].ops)
        yield from self.run(step.body)

    def other(self, step):
        from ..passes import sync_protocol as sp
        if isinstance(step, sp.ClusterSync):
            yield from self.cluster_sync(step)
            return
        if not isinstance(step, sp.TmaLoad):
            raise ScheduleError(f"the producer has no meaning for {step.text()}")
        op = self.rt.loads[(step.ring, step.load)]
        value = self.run_op(op, [self.env.values[v] for v in op.operands])[0]
        r = self.regs[step.ring]
        staged_over(self.cta, step.ring, "issues a TMA load of " + step.load)
        nbytes = next(ld.nbytes for ld in self.rt.proto.ring(step.ring).loads if ld.name == step.load)
        if op in self.rt.pair.loads and self.cta.pair is not None:  # this CTA's half, into both CTAs
            for cta in self.cta.peers:
                peer_ready(cta, self.cta, f"multicasts {step.load} into stage {r.s} of ring {step.ring}")
                cta.landings.append((step.ring, r.s, (step.load, self.cta.rank), value, nbytes // 2))
        else:
            self.cta.landings.append((step.ring, r.s, step.load, value, nbytes))
        yield from ()


class Consumer(Role):
    current_ring = None

    def __init__(self, rt, cta, tiles, index):
        super().__init__(rt, cta, tiles, index)
        self.groups: list[tuple] = []   # committed wgmma groups: (op, operand values, stages)

    def tiles_step(self, step):
        from ..codegen.hopper.interleave import interleave, tile_anchor
        self.alternate = step.alternate
        n = self.rt.proto.consumers
        mine = list(enumerate(self.tiles))
        if step.alternate:
            mine = mine[self.index::n]
        body = list(self.rt.blocks.regions[0].ops)
        anchor = tile_anchor(self.rt.ring_of_load, self.rt.loop_of, self.rt.staged_over_rings, self.rt.store_of,
                             self.rt.scratch_ops)
        self.shadow = (not step.alternate and self.index > 0) or (self.cta.cluster is not None and self.cta.rank > 0)
        if self.rt.proto.own_trips and not step.alternate and self.cta.cluster is None:
            self.shadow, self.row_share = False, (self.index, n)
        for self.tile_i, tile in mine:
            self.bind_tile(tile)
            if step.alternate:  # as the emitter does (lower_consumer.ahead): SkipTrips comes first
                self.scalars(body)
                self.trip_counts()
            self.contributed = False
            for kind, st, op in self.rt.walk(body, lambda: interleave(body, step.body, anchor)):
                yield from self.item(kind, st, op)
                if self.contributed:  # a stream-K contribution ends its tile (IR ops only follow)
                    break

    def item(self, kind, step, op):
        from ..passes import sync_protocol as sp
        if isinstance(step, sp.StreamKFixup):
            yield from self.stream_k_fixup(step)
            if not self.contributed and kind == "anchored":
                self.exec(op)
            return
        if kind == "op":
            if isinstance(op, Load) and op in self.rt.ring_of_load:
                self.env.bind(op.results, [RingRef(*self.rt.load_of[op])])
            elif not isinstance(op, Yield):
                self.exec(op)
            return
        if kind == "step":
            yield from self.run((step,))
            return
        if isinstance(step, sp.Wait):       # a one-shot tile
            yield from self.run((step,))
            self.env.bind(op.results, [RingRef(*self.rt.load_of[op])])
        elif isinstance(step, sp.IfTrips):  # a ring loop: its carried values, then the protocol's
            self.trip_count(op, step.ring)
            if step.part == "own":
                self.own_count(op, step.ring)
            body = op.regions[0]
            self.env.bind(body.args[1:], [self.env.values[v] for v in op.variadic()])
            yield from self.run((step,))
            self.env.bind(op.results, [resolved(self.env.values[a]) for a in body.args[1:]])
        elif isinstance(step, sp.Mma):
            self.issue(op)
        elif isinstance(step, sp.Read):  # a ring tile into registers: read from its stage now
            self.exec(op)
        elif isinstance(step, sp.TileWrite):  # the CTA's one copy of the tile, overwritten now
            values = [resolved(self.env.values.get(v)) for v in op.operands]
            if any(isinstance(x, Pending) for x in values):
                raise ScheduleError(f"'{op.NAME}' writes a wgmma result not waited for yet", op.span)
            if not self.shadow:
                (self.cta.written[step.tile],) = self.rt.handlers[type(op)](self.it, op, values)
            self.env.bind(op.results, [TileRef(step.tile)])
        elif isinstance(step, (sp.ConsumerSync, sp.ScratchSync)):
            yield from self.run((step,))
            self.exec(op)
        elif isinstance(step, sp.CopyFill):  # the consumers fill the tile themselves, then meet
            self.exec(op)
            if step.wait:  # (its cp.async.wait_all lands the copies still in flight too)
                self.land_fills()
                yield from self.run((sp.ConsumerSync(),))
            else:  # its copies in flight: landed by the FillWait naming it
                self.env.bind(op.results, [InFlight(step.tile, self.env.values[op.result])])
        elif isinstance(step, sp.FillWait):  # the copies land, the consumers meet, then the op
            yield from self.run((step,))
            self.exec(op)
        elif isinstance(step, (sp.StagedStore, sp.HoldStore)):  # a staged store: the tile is final here
            self.exec(op)
        elif isinstance(step, sp.ClusterReduce):
            yield from self.cluster_reduce(step)
            self.exec(op)
        else:
            raise ScheduleError(f"no meaning for {step.text()} at '{op.NAME}'")

    def own_count(self, loop: For, ring: str) -> None:
        """This consumer's own trips of the tile (passes/own_trips.py, as lower_own_trips.own_count
        prints it): the plan's formula, then the conditions the pass assumed on the later trips,
        evaluated for each (one that fails makes every trip its own), then, with the
        rows-past-the-end rule, none where all of its rows lie past every store's end."""
        from ..passes.own_trips import marked_plan
        plan = marked_plan(loop, self.rt.proto.consumers)
        r = self.regs[ring]
        lo = self.env.values[loop.operands[0]]
        if plan.scale:
            for op in plan.q0_ops:
                self.exec(op)
            r.own = plan.own(self.index, int(self.env.values[plan.q0]), lo, r.trips)
        else:
            r.own = r.trips
        for t in range(r.own, r.trips):
            self.env.bind([loop.regions[0].args[0]], [lo + t * plan.step])
            for op in plan.cond_ops:
                self.exec(op)
            if any(bool(self.env.values[c]) != taken for c, taken in plan.conds):
                r.own = r.trips
                break
        if plan.end is not None:
            for op in plan.end.row0_ops:
                self.exec(op)
            extents = [int(self.env.values[v]) for v in plan.end.extents]
            if plan.end.idle(self.index, plan.rows, int(self.env.values[plan.end.row0]), extents):
                r.own = 0

    def cluster_reduce(self, step):
        """Split-K: meet every consumer of the cluster, then hold the sum of the CTAs' partials
        (this CTA's first, then the others by rank). The ring must be drained: no group in flight."""
        if self.groups:
            raise ScheduleError("split-K's reduction with a wgmma group still in flight")
        loop = self.rt.loop_of[step.ring]
        value = resolved(self.env.values[loop.results[0]])
        if isinstance(value, Pending):
            raise ScheduleError("split-K's reduction reads a wgmma result not waited for")
        cl = self.cta.cluster
        cl.partials[(self.cta.rank, self.index)] = value
        cl.arrived += 1
        while cl.arrived < cl.size * self.rt.proto.consumers:
            yield BLOCKED
        total = value
        for r in range(cl.size):
            if r != self.cta.rank:
                other = cl.partials[(r, self.index)]
                total = total.with_data((total.data + other.data).astype(np.float32))
        self.env.bind(loop.results, [total])

    def stream_k_fixup(self, step):
        """Stream-K: a contribution (first trip > 0) leaves its partial and sets its flag; an
        owned unit (first trip 0, fewer than Kt trips) waits for its contributors' flags and adds
        their partials in CTA order, resetting each flag; a whole tile does nothing."""
        from ..codegen.hopper.tail_split import contributors
        if self.groups:
            raise ScheduleError("stream-K's fix-up with a wgmma group still in flight")
        loop = self.rt.loop_of[step.ring]
        value = resolved(self.env.values[loop.results[0]])
        if isinstance(value, Pending):
            raise ScheduleError("stream-K's fix-up reads a wgmma result not waited for")
        first, trips = self.units[self.tile_i]
        sk = self.rt.stream_k
        if first > 0:
            key = (self.cta.rank, self.index)
            if sk.flags.get(key):
                raise ScheduleError(f"CTA {self.cta.rank}'s stream-K flag is set twice")
            sk.partials[key], sk.flags[key] = value, 1
            self.contributed = True
            return
        if trips >= sk.trips:
            return
        total = value
        tile = self.rt.tile_index[self.tiles[self.tile_i]]
        for other in contributors(sk.tiles, sk.ctas, sk.trips, self.cta.rank, tile):
            while not sk.flags.get((other, self.index)):
                yield BLOCKED
            total = total.with_data((total.data + sk.partials[(other, self.index)].data).astype(np.float32))
            sk.flags[(other, self.index)] = 0
        self.env.bind(loop.results, [total])

    def trip(self, step):
        from ..codegen.hopper.interleave import body_ops, interleave, pipelined_trip, trip_anchor
        loop = self.enter_trip(step)
        if self.rt.rewritten:  # the trip's steps and ops as the rewritten IR has them
            items = self.rt.walk(loop.regions[0].ops, None)
        elif loop in self.rt.level2:
            items = pipelined_trip(loop, step.body)
        else:
            items = interleave(body_ops(loop.regions[0]), step.body, trip_anchor(loop, self.rt.store_of))
        for kind, s_, op in items:
            if kind == "hold":
                self.hold(op)
                continue
            yield from self.item(kind, s_, op)
        term = loop.regions[0].terminator
        self.env.bind(loop.regions[0].args[1:], [resolved(self.env.values[v]) for v in term.operands])

    def hold(self, second: Op) -> None:
        """Level 2: the second product's operands as they are now; it is issued by the next
        trip's Mma(prev) step (or the one after the loop), and its result is that issue's."""
        self.held = (second, [self.env.values[v] for v in second.operands], Pending(second))
        self.env.bind(second.results, [self.held[2]])

    def issue_held(self) -> None:
        second, values, pending = self.held
        ring = self.rt.ring_of_load[second.operands[1].owner]
        prev = (self.regs[ring].s - 1) % self.cta.rings[ring].stages
        operands = [(x, prev) if isinstance(x, RingRef) else x for x in values]
        self.groups.append((second, operands, pending))

    def issue(self, op: Op) -> None:
        """A wgmma group: its register operands as they are now, its shared ones read from the
        stages current now, but only when the group is waited for."""
        operands = []
        for v in op.operands:
            ref = self.env.values.get(v)
            operands.append((ref, self.regs[ref.ring].s) if isinstance(ref, RingRef) else ref)
        pending = Pending(op)
        self.groups.append((op, operands, pending))
        self.env.bind(op.results, [pending])

    def land_fills(self, tiles=None) -> None:
        """The copies of the blocks filled in flight (``tiles``: those named; None: all) landed."""
        for v, value in list(self.env.values.items()):
            if isinstance(value, InFlight) and (tiles is None or value.tile in tiles):
                self.env.values[v] = value.value

    def other(self, step):
        from ..passes import sync_protocol as sp
        if isinstance(step, sp.MmaWait):
            while len(self.groups) > step.pending:
                self.retire(*self.groups.pop(0))
        elif isinstance(step, sp.Mma) and step.which == "prev":
            self.issue_held()
        elif isinstance(step, sp.TurnWait):
            if sp.turn_applies(step, self.index, self.rt.proto.consumers):
                while self.cta.turns.get(self.index, 0) == 0:
                    yield BLOCKED
                self.cta.turns[self.index] -= 1
        elif isinstance(step, sp.TurnPass):
            if sp.turn_applies(step, self.index, self.rt.proto.consumers):
                nxt = (self.index + 1) % self.rt.proto.consumers
                self.cta.turns[nxt] = self.cta.turns.get(nxt, 0) + 1
        elif isinstance(step, (sp.ConsumerSync, sp.ScratchSync, sp.FillWait)):  # the consumers' named barrier
            if isinstance(step, sp.FillWait):  # (each thread's own copies land first: cp.async.wait_all)
                self.land_fills(step.tiles)
            gen = self.cta.meeting[1]
            self.cta.meeting[0] += 1
            if self.cta.meeting[0] == self.rt.proto.consumers:
                self.cta.meeting[0] = 0
                self.cta.meeting[1] += 1
            while self.cta.meeting[1] == gen:
                yield BLOCKED
        elif isinstance(step, sp.StagingBegin):  # the staging overwrites the stage's tiles
            for slot in self.cta.rings[step.ring].slots:  # (over every stage of the ring)
                slot.clear()
            self.cta.staged.setdefault(step.ring, set()).add(self.index)
        elif isinstance(step, sp.StagingRead):  # its stores have read it: the bytes are free again
            self.cta.staged.get(step.ring, set()).discard(self.index)
        elif isinstance(step, sp.StoreDrain):
            for users in self.cta.staged.values():
                users.discard(self.index)
        elif isinstance(step, (sp.StagingEnd, sp.IfHeld)):
            pass  # (StagingEnd: one tile per CTA, nothing refills the ring; its stores still read it)
        elif isinstance(step, sp.ClusterSync):
            yield from self.cluster_sync(step)
        else:
            raise ScheduleError(f"the consumer has no meaning for {step.text()}")
        yield from ()

    def slot_value(self, ref: RingRef, s: int, op: Op):
        """What landed for ``ref`` in stage ``s`` of its ring (an error if nothing did)."""
        value = self.cta.rings[ref.ring].slots[s].get(ref.load)
        if value is None and self.cta.pair is not None:
            value = self.rt.whole(self.cta.rings[ref.ring].slots[s], ref, op)
        if value is None:
            raise ScheduleError(f"'{op.NAME}' reads stage {s} of ring {ref.ring}, where {ref.load} "
                                "never landed", op.span)
        return value

    def retire(self, op: Op, operands: list, pending: Pending) -> None:
        args = []
        for x in operands:
            if isinstance(x, TileRef):
                value = self.cta.written.get(x.tile)
                if value is None:
                    raise ScheduleError(f"'{op.NAME}' reads tile {x.tile} before any consumer wrote it", op.span)
                args.append(value)
                continue
            if isinstance(x, tuple) and isinstance(x[0], RingRef):
                args.append(self.slot_value(*x, op))
                continue
            value = resolved(x)
            if isinstance(value, Pending):
                raise ScheduleError(f"'{op.NAME}' reads a wgmma result not waited for", op.span)
            args.append(value)
        (pending.value,) = self.rt.handlers[type(op)](self.it, op, args)  # readers resolve it (the
        # same op may have been issued again since: its result is another Pending by now)


class Roles:
    """One launch of ``kernel`` (scheduled IR) as its roles, CTA by CTA."""

    def __init__(self, kernel: Kernel, args: list, seed: int, ctas: int, handlers=None):
        from ..passes.async_schedule import blocks_of, is_async, schedule_from_ir
        from ..passes.hopper import block_loop
        from ..passes.mbarrier import schedule_of
        from .handlers import HANDLERS
        self.kernel = kernel
        self.handlers = handlers or HANDLERS
        self.launch = bind(kernel, args, None)
        self.rewritten = is_async(kernel)
        """The kernel is the async-schedule pass's rewrite: the protocol, the maps and every walk
        come from its IR (``schedule_from_ir``, ``items_of``), not from the protocol and interleave."""
        sched = schedule_from_ir(kernel) if self.rewritten else schedule_of(kernel)
        self.proto = sched.protocol
        self.load_of = sched.load_of
        self.loads = {names: op for op, names in sched.load_of.items()}
        self.ring_of_load = {op: names[0] for op, names in sched.load_of.items()}
        self.loop_of = {ring: loop for loop, ring in sched.loop_of.items()}
        self.level2 = list(sched.level2)
        self.staged_over_rings = list(sched.staged_over_rings)
        self.store_of = dict(sched.store_of)
        self.scratch_ops = list(sched.scratch_ops)
        self.split, self.split_loop = sched.split, sched.split_loop
        self.stream_k_loop = sched.stream_k_loop
        self.stream_k: StreamK | None = None
        self.pair = sched.pair
        self.blocks = blocks_of(kernel) if self.rewritten else block_loop(kernel)
        self.rng = random.Random(seed)
        self.ctas = ctas

    def all_tiles(self) -> list[tuple]:
        """Every tile of the block loop, in launch order; ``base``: the values before it."""
        env = Environment(self.launch)
        it = Interpreter(self.kernel, env, self.handlers)
        from ..ir.ops.async_ops import AsyncOp, ConsumerRoles
        for op in self.kernel.body.ops:
            if op is self.blocks or isinstance(op, ConsumerRoles):
                break
            if isinstance(op, AsyncOp):  # the rewritten IR's rings and producer program
                continue
            env.bind(op.results, self.handlers[type(op)](it, op, [env.values[v] for v in op.operands]))
        self.base = dict(env.values)
        counts = [env.values[v] for v in self.blocks.variadic()]
        tiles = [()]
        for c in counts:
            tiles = [t + (i,) for t in tiles for i in range(c)]
        return tiles

    def walk(self, ops, interleaved) -> list[tuple]:
        """The items of a walk over ``ops`` (the tile body or a trip): read from the rewritten IR
        (``async_schedule.items_of``), else ``interleaved()`` (interleave.py over the protocol)."""
        if self.rewritten:
            from ..passes.async_schedule import items_of
            return items_of(list(ops))
        return interleaved()

    def whole(self, slot: dict, ref: RingRef, op: Op):
        """A shared load's stage as the pair's two halves landed in it (None: a half is missing)."""
        halves = [slot.get((ref.load, rank)) for rank in range(2)]
        if any(h is None for h in halves):
            return None
        load = self.loads[(ref.ring, ref.load)]
        data = halves[0].data.copy()
        if self.pair.loads[load] == "panels":
            cols = data.shape[-1] // 2
            data[..., cols:] = halves[1].data[..., cols:]
        else:
            rows = data.shape[-2] // 2
            data[..., rows:, :] = halves[1].data[..., rows:, :]
        return halves[0].with_data(data)

    def pair_tiles(self, tiles: list[tuple]) -> list[list[tuple]]:
        """Per unit of the pair walk, the tiles of rank 0 and rank 1: the paired (second to last)
        index 2 mp and 2 mp + 1 (the latter possibly past the last tile row)."""
        if not tiles:
            return []
        counts = [max(t[d] for t in tiles) + 1 for d in range(len(tiles[0]))]
        units = [u for u in tiles if u[-2] < -(-counts[-2] // 2)]
        return [[u[:-2] + (2 * u[-2] + r, u[-1]) for r in range(2)] for u in units]

    def run(self) -> None:
        tiles = self.all_tiles()
        if self.pair is not None and self.pair.ctas > 1:  # pairs of CTAs, run together
            units = self.pair_tiles(tiles)
            persistent = self.blocks.attrs.get("schedule") == "persistent"
            n = min(len(units), self.ctas) if persistent else len(units)
            for b in range(n):
                mine = units[b::n] if persistent else [units[b]]
                self.run_ctas([[u[r] for u in mine] for r in range(2)], pair=PairState(),
                              rows=max(t[-2] for t in tiles) + 1)
            return
        if self.split > 1:  # a cluster of S CTAs per tile, run together
            for tile in tiles:
                self.run_ctas([[tile]] * self.split, Cluster(self.split))
            return
        persistent = self.blocks.attrs.get("schedule") == "persistent"
        n = min(len(tiles), self.ctas) if persistent else len(tiles)
        if self.stream_k_loop is not None:  # every CTA together: owners wait for contributions
            from ..codegen.hopper.tail_split import walk
            self.tile_index = {t: i for i, t in enumerate(tiles)}
            self.stream_k = StreamK(len(tiles), n, self.uniform_trips(tiles[0]))
            units = walk(len(tiles), n, self.stream_k.trips)
            self.run_ctas([[tiles[t] for t, _, _ in mine] for mine in units],
                          units=[[(f, k) for _, f, k in mine] for mine in units])
            if any(self.stream_k.flags.values()):
                raise ScheduleError("a stream-K flag is still set when the launch ends")
            return
        for b in range(n):
            self.run_ctas([tiles[b::n] if persistent else [tiles[b]]])

    def uniform_trips(self, tile: tuple) -> int:
        """Kt: the stream-K loop's trip count (the same in every tile), from ``tile``'s scalars."""
        env = Environment.__new__(Environment)
        env.values, env.dims = dict(self.base), dict(self.launch.dims)
        it = Interpreter(self.kernel, env, self.handlers)
        env.bind(self.blocks.regions[0].args, list(tile))
        for op in self.blocks.regions[0].ops:
            if op is self.stream_k_loop:
                break
            if not op.regions and op.results and all(isinstance(v.type, ScalarType) for v in op.results):
                env.bind(op.results, self.handlers[type(op)](it, op, [env.values[v] for v in op.operands]))
        lo, hi, step = (env.values[v] for v in self.stream_k_loop.operands[:3])
        return max(0, -(-(hi - lo) // step))

    def run_ctas(self, tiles_of: list[list[tuple]], cluster: Cluster | None = None, units=None,
                 pair: PairState | None = None, rows: int = 0) -> None:
        """Run CTAs together (one, the CTAs of a split-K cluster or of a multicast pair, or a
        stream-K grid; CTA r with ``tiles_of[r]``, and with stream-K its units' (first trip, trips)
        in ``units[r]``; a pair's CTA whose tile row is ``rows`` or more is off the edge)."""
        ctas, roles = [], []
        for rank, tiles in enumerate(tiles_of):
            rings = {}
            for ring in self.proto.rings:
                rings[ring.name] = Ring(ring.stages, [Barrier(ring.full_arrivals) for _ in range(ring.stages)],
                                        [Barrier(ring.empty_arrivals * ring.cluster) for _ in range(ring.stages)],
                                        [{} for _ in range(ring.stages)])
            cta = Cta(rings, len(tiles), rank=rank, cluster=cluster, pair=pair,
                      off_edge=pair is not None and any(t[-2] >= rows for t in tiles))
            ctas.append(cta)
            cta.peers = ctas  # (multicast: the pair's CTAs; read only where ``pair`` is set)
            mine = [(Producer(self, cta, tiles, None), self.proto.producer)]
            mine += [(Consumer(self, cta, tiles, c), self.proto.consumer) for c in range(self.proto.consumers)]
            for role, _ in mine:
                role.units = units[rank] if units is not None else []
            cta.running = len(mine)
            roles += mine
        running = {i: (role, role.run(program)) for i, (role, program) in enumerate(roles)}
        stalled = 0
        while running:
            landing = [c for c in ctas if c.landings]
            choices = list(running) + (["land"] if landing else [])
            pick = self.rng.choice(choices)
            if pick == "land":
                cta = self.rng.choice(landing)
                ring, s, load, value, nbytes = cta.landings.pop(self.rng.randrange(len(cta.landings)))
                staged_over(cta, ring, f"lands a TMA load in stage {s}")
                cta.rings[ring].slots[s][load] = value
                cta.rings[ring].full[s].land(nbytes)
                stalled = 0
                continue
            role, gen = running[pick]
            role.cta.started = True  # (its barriers were initialized before any of its roles ran)
            try:
                if next(gen) == BLOCKED:
                    stalled += 1
                else:
                    stalled = 0
            except StopIteration:
                del running[pick]
                role.cta.running -= 1
                stalled = 0
            if stalled > 50 * (len(running) + 1) and not any(c.landings for c in ctas):
                raise ScheduleError("deadlock: every role waits and no copy is in flight "
                                    f"({', '.join(type(running[i][0]).__name__ for i in running)})")
        if any(c.landings for c in ctas):
            raise ScheduleError("copies still in flight when the CTA ended")


def staged_over(cta: Cta, ring: str, what: str) -> None:
    """A TMA load into ``ring`` while a consumer's staging there may still be read by its stores."""
    users = cta.staged.get(ring)
    if users:
        raise ScheduleError(f"the producer {what} of ring {ring} while consumer {min(users)}'s TMA store "
                            "may still read the staging there (no wait for its reads before the release)")


def own_rows(value, t, consumer: int, consumers: int):
    """``value`` (a register tile or a column vector of one value a row) valid only on consumer
    ``consumer``'s share of its rows, [c·R/C, (c+1)·R/C), as the GPU's consumers store them."""
    from .values import TileValue, VectorValue
    if isinstance(value, TileValue):
        rows = value.rows.copy()
        share = len(rows) // consumers
        keep = np.zeros(len(rows), bool)
        keep[consumer * share:(consumer + 1) * share] = True
        return TileValue(value.data, rows & keep, value.cols, value.dtype)
    if isinstance(value, VectorValue) and getattr(t, "kind", "cv") == "cv":
        share = len(value.valid) // consumers
        keep = np.zeros(len(value.valid), bool)
        keep[consumer * share:(consumer + 1) * share] = True
        return VectorValue(value.data, value.valid & keep, value.dtype)
    return value


def zero_value(t):
    """A tile or vector of type ``t`` wholly past its tensor: zeros, no valid element."""
    from ..ir.types import TileType
    from .values import TileValue, VectorValue
    if isinstance(t, TileType):
        return TileValue(np.zeros(t.shape, np.float32), np.zeros(t.rows, bool), np.zeros(t.cols, bool), t.dtype)
    return VectorValue(np.zeros(t.length, np.float32), np.zeros(t.length, bool), t.dtype)


def run_roles(kernel: Kernel, args: list, *, seed: int = 0, ctas: int = 3) -> None:
    """Execute the scheduled ``kernel`` on ``args`` (in place) as its roles would, one schedule
    per ``seed`` (see the module docstring)."""
    with np.errstate(all="ignore"):
        Roles(kernel, args, seed, ctas).run()


__all__ = ["run_roles", "ScheduleError", "Barrier"]
