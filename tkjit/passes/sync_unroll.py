"""Unroll a protocol's programs for one concrete case into flat action lists, one per role.

A *case* is the trip count of every pipelined loop in each tile a CTA handles: ``(5,)`` is one
tile whose loops run 5 times; ``(5, 5, 5)`` is a persistent CTA handling three tiles. Every
role's stage index and phase bit depend only on its own program, so after unrolling each role
is a straight line of concrete actions on numbered barriers and stages -- what the checker
interleaves.

Numbering: ring ``i`` owns stages ``base[i] .. base[i]+stages-1``; stage ``g`` has barriers
``full = 2g`` and ``empty = 2g + 1``; the consumers' named barrier comes next (``2 * stages``),
then, in a ping-pong protocol, consumer c's turn barrier (``2 * stages + 1 + c``). A shared tile
the consumers write from registers (``TileWrite``) is numbered after the stages (``stages + t``)
where a wgmma reads it.

A staged store's epilogue (``StagedStore``) is unrolled where it stands; a held one
(``HoldStore``) at the next ``IfHeld``, as the consumer's pending-tile predicate runs it. A
stream-K contribution skips the rest of its tile (IR ops and staged stores): the unrolled
program runs them always, which only adds rounds whose own waits and meetings order them.

A case's entry may also be ``(total, own_0, .., own_{N-1})``: the tile's trips and each
consumer's own trips, for protocols whose consumers loop over their own trips (``Loop.part``);
a plain count is every consumer's own too.

A ping-pong consumer (``Tiles(alternate=True)``) is unrolled for its own tiles only: consumer c
of N runs the CTA's tiles c, c + N, ...; ``SkipTrips`` advances its rings by the trips of the
tile before.
"""
from __future__ import annotations

from dataclasses import dataclass

from .sync_protocol import (BLOCKS, Advance, ClusterArrive, ClusterExchange, ClusterReduce, ClusterSync, ClusterWait, ConsumerSync, ExpectTx, HoldStore, IfHeld,
                            IfNextTile, IfPrevTile, IfTrips, Loop, First, Mma, MmaWait, NotFirst, Protocol, Read, Release, Reset,
                            SkipTrips, StagedStore, StagingBegin, StagingEnd, StagingRead, StagingSync, StagingWrite, Step, StoreDrain,
                            StoreWait, StreamKFixup, Tiles, TileWrite, CopyFill, FillWait, TmaLoad, TmaStore, TurnPass, TurnWait, Wait, turn_applies)

# concrete opcodes
(WAIT, EXPECT, TMA, MMA, MMA_WAIT, RELEASE, ARRIVE, STAGING_BEGIN, STAGING_END, TURN_ARRIVE, TILE_WRITE, ACC_READ,
 STORE_WAIT, STAGING_SYNC, STAGING_WRITE, TMA_STORE, STORE_DRAIN, READ) = range(18)


@dataclass(frozen=True)
class Action:
    op: int
    arg: int            # WAIT/EXPECT/RELEASE/ARRIVE: barrier; TMA: stage; MMA_WAIT: pending;
                        # STAGING_*: the ring's first stage; TILE_WRITE: the written tile's index;
                        # ACC_READ (stream-K's fix-up reads the accumulators): unused
    val: int = 0        # WAIT: parity; EXPECT: bytes; TMA: load index; STAGING_*: stages
    reads: tuple[int, ...] = ()  # MMA, READ: stages read
    label: str = ""     # what, for messages
    where: str = ""     # "tile 1, k trip 4"
    tile: int = 0       # the CTA's tile (its index in the case) the action belongs to


@dataclass(frozen=True)
class Layout:
    """Stage and barrier numbering of a protocol's rings."""

    base: dict[str, int]
    stage_ring: tuple[str, ...]       # stage id -> ring name
    stage_index: tuple[int, ...]      # stage id -> index within its ring
    tiles: tuple[str, ...] = ()       # consumer-written tiles (TileWrite), in program order
    buffers: tuple[tuple[str, int], ...] = ()  # staging buffers (store, buffer) of the epilogue's steps

    @staticmethod
    def of(proto: Protocol) -> "Layout":
        base, ring_of, index = {}, [], []
        for r in proto.rings:
            base[r.name] = len(ring_of)
            ring_of += [r.name] * r.stages
            index += list(range(r.stages))
        return Layout(base, tuple(ring_of), tuple(index), written_tiles(proto.consumer),
                      staging_buffers(proto.consumer))

    def buffer_name(self, b: int) -> str:
        store, buffer = self.buffers[b]
        return f"staging {store}.{buffer}"

    def tile_id(self, tile: str) -> int:
        """The id a wgmma's reads name a consumer-written tile by (after every stage)."""
        return self.n_stages + self.tiles.index(tile)

    @property
    def n_stages(self) -> int:
        return len(self.stage_ring)

    @property
    def sync_bar(self) -> int:
        return 2 * self.n_stages

    def turn_bar(self, consumer: int) -> int:
        """Consumer ``consumer``'s turn barrier (ping-pong), a named barrier."""
        return self.sync_bar + 1 + consumer

    def stage_name(self, g: int) -> str:
        return f"{self.stage_ring[g]}.{self.stage_index[g]}"

    def bar_name(self, b: int) -> str:
        if b == self.sync_bar:
            return "the consumers' named barrier"
        if b > self.sync_bar:
            return f"turn[{b - self.sync_bar - 1}] (named barrier)"
        kind = "full" if b % 2 == 0 else "empty"
        return f"{kind}[{self.stage_name(b // 2)}]"


def written_tiles(steps) -> tuple[str, ...]:
    """The consumer-written tiles a program's ``TileWrite`` steps write or its ``Mma`` steps
    read, in order of first appearance."""
    out: list[str] = []
    for st in steps:
        names = (st.tile,) if isinstance(st, (TileWrite, CopyFill)) else st.tiles if isinstance(st, Mma) else ()
        out += [t for t in names if t not in out]
        if isinstance(st, BLOCKS):
            for t in written_tiles(st.body) + written_tiles(getattr(st, "orelse", ())):
                if t not in out:
                    out.append(t)
    return tuple(out)


def staging_buffers(steps) -> tuple[tuple[str, int], ...]:
    """The staging buffers (store, buffer) a program's epilogue steps write, in order."""
    out: list[tuple[str, int]] = []
    for st in steps:
        if isinstance(st, (StagingWrite, TmaStore)) and (st.store, st.buffer) not in out:
            out.append((st.store, st.buffer))
        if isinstance(st, BLOCKS):
            out += [b for b in staging_buffers(st.body) + staging_buffers(getattr(st, "orelse", ()))
                    if b not in out]
    return tuple(out)


def tile_trips(entry) -> int:
    """A case entry's trip count for the tile (the producer's loops)."""
    return entry if isinstance(entry, int) else entry[0]


def own_trips(entry, consumer: int) -> int:
    """A case entry's trips that ``consumer`` runs as its own (the first of the tile's)."""
    return entry if isinstance(entry, int) else entry[1 + consumer]


class _Unroller:
    def __init__(self, proto: Protocol, layout: Layout, case: tuple[int, ...], consumer: int = 0):
        self.proto, self.layout, self.case = proto, layout, case
        self.consumer = consumer
        self.turn_waits = 0
        self.s = {r.name: 0 for r in proto.rings}
        self.ph = {r.name: 0 for r in proto.rings}
        self.out: list[Action] = []
        self.tile = 0
        self.trips: list[tuple[str, int]] = []  # enclosing loops: (ring, trip index)
        self.syncs = 0
        self.held: set[str] = set()  # stores whose tile is held (deferred epilogue)

    def emit(self, op: int, arg: int, val: int = 0, reads: tuple[int, ...] = (),
             label: str = "") -> None:
        loops = "".join(f", {ring} trip {k}" for ring, k in self.trips)
        self.out.append(Action(op, arg, val, reads, label, f"tile {self.tile}{loops}", self.tile))

    def stage(self, ring: str, which: str = "cur") -> int:
        s = self.s[ring]
        if which == "prev":
            s = (s - 1) % self.proto.ring(ring).stages
        return self.layout.base[ring] + s

    def run(self, steps: tuple[Step, ...]) -> None:
        for step in steps:
            handler = getattr(self, "_" + type(step).__name__)
            handler(step)

    # -- structure ------------------------------------------------------------------------
    def _Tiles(self, st: Tiles) -> None:
        first, step = (self.consumer, self.proto.consumers) if st.alternate else (0, 1)
        for t in range(first, len(self.case), step):
            self.tile = t
            self.run(st.body)

    def _IfPrevTile(self, st: IfPrevTile) -> None:
        if self.tile > 0:
            self.run(st.body)

    def _IfNextTile(self, st: IfNextTile) -> None:
        if self.tile + 1 < len(self.case):
            self.run(st.body)

    def trips_of(self, part: str) -> range:
        """The trip indices of the current tile a loop over ``part`` of them runs."""
        total = tile_trips(self.case[self.tile])
        own = min(own_trips(self.case[self.tile], self.consumer), total)
        return {"all": range(total), "own": range(own), "rest": range(own, total)}[part]

    def _Loop(self, st: Loop) -> None:
        trips = self.trips_of(st.part)
        if len(trips) < st.min_trips:
            trips = range(trips.start, trips.start + st.min_trips)
        for k in trips:
            self.trips.append((st.ring, k))
            self.run(st.body)
            self.trips.pop()

    def _IfTrips(self, st: IfTrips) -> None:
        if len(self.trips_of(st.part)) > 0:
            self.run(st.body)
        else:
            self.run(st.orelse)

    def _NotFirst(self, st: NotFirst) -> None:
        if self.trips and self.trips[-1][1] > 0:
            self.run(st.body)

    def _First(self, st: First) -> None:
        if self.trips and self.trips[-1][1] == 0:
            self.run(st.body)

    # -- events ---------------------------------------------------------------------------
    def _Wait(self, st: Wait) -> None:
        g = self.stage(st.ring)
        bar = 2 * g + (st.bar == "empty")
        parity = self.ph[st.ring] ^ st.flip
        self.emit(WAIT, bar, parity, label=f"wait {self.layout.bar_name(bar)} parity {parity}")

    def _ExpectTx(self, st: ExpectTx) -> None:
        g = self.stage(st.ring)
        self.emit(EXPECT, 2 * g, st.nbytes,
                  label=f"arrive.expect_tx full[{self.layout.stage_name(g)}] {st.nbytes} B")

    def _TmaLoad(self, st: TmaLoad) -> None:
        g = self.stage(st.ring)
        names = [ld.name for ld in self.proto.ring(st.ring).loads]
        self.emit(TMA, g, names.index(st.load), label=f"TMA {st.load} -> stage {self.layout.stage_name(g)}")

    def _Mma(self, st: Mma) -> None:
        reads = tuple(self.stage(r, st.which) for r in st.rings)
        names = ", ".join([self.layout.stage_name(g) for g in reads] + [f"tile {t}" for t in st.tiles])
        reads += tuple(self.layout.tile_id(t) for t in st.tiles)
        self.emit(MMA, 0, reads=reads, label=f"wgmma reading {names}")

    def _Read(self, st: Read) -> None:
        """A ring tile read into registers (ld.shared): the stages it reads, read at once."""
        reads = tuple(self.stage(r) for r in st.rings)
        names = ", ".join(self.layout.stage_name(g) for g in reads)
        self.emit(READ, 0, reads=reads, label=f"ld.shared reading {names} into registers")

    def _TileWrite(self, st: TileWrite) -> None:
        self.emit(TILE_WRITE, self.layout.tiles.index(st.tile),
                  label=f"write tile {st.tile} from registers; fence.proxy.async")

    def _CopyFill(self, st: CopyFill) -> None:
        """The consumers fill a tile no producer loads: each writes its pieces (cp.async, waited
        for by its own threads), then they meet -- a write of the tile, checked as a consumer-written
        tile's (no wgmma reading it may be in flight), and a meeting that publishes it. With its
        copies left in flight (``wait = False``) the meeting is the later ``FillWait``'s."""
        self.emit(TILE_WRITE, self.layout.tiles.index(st.tile),
                  label=f"fill tile {st.tile} by cp.async" + ("; cp.async.wait_all" if st.wait else ""))
        if st.wait:
            self._ConsumerSync(ConsumerSync())

    def _FillWait(self, st: FillWait) -> None:
        """The in-flight fills land (each thread's cp.async.wait_all) and the consumers meet."""
        self._ConsumerSync(ConsumerSync())

    def _MmaWait(self, st: MmaWait) -> None:
        self.emit(MMA_WAIT, st.pending, label=f"wait_group {st.pending}")

    def _Release(self, st: Release) -> None:
        g = self.stage(st.ring, st.which)
        self.emit(RELEASE, 2 * g + 1, label=f"release stage {self.layout.stage_name(g)} (arrive empty)")

    def _Advance(self, st: Advance) -> None:
        stages = self.proto.ring(st.ring).stages
        self.s[st.ring] = (self.s[st.ring] + 1) % stages
        if st.per == "iteration" or self.s[st.ring] == 0:
            self.ph[st.ring] ^= 1

    def _SkipTrips(self, st: SkipTrips) -> None:
        for _ in range(tile_trips(self.case[self.tile - 1])):
            self._Advance(Advance(st.ring))

    def _TurnWait(self, st: TurnWait) -> None:
        if not turn_applies(st, self.consumer, self.proto.consumers):
            return
        bar = self.layout.turn_bar(self.consumer)
        self.emit(TURN_ARRIVE, bar, label=f"bar.sync {self.layout.bar_name(bar)}: arrive")
        self.emit(WAIT, bar, self.turn_waits & 1, label=f"bar.sync {self.layout.bar_name(bar)}: "
                  "wait for the turn")
        self.turn_waits += 1

    def _TurnPass(self, st: TurnPass) -> None:
        if not turn_applies(st, self.consumer, self.proto.consumers):
            return
        bar = self.layout.turn_bar((self.consumer + 1) % self.proto.consumers)
        self.emit(TURN_ARRIVE, bar, label=f"bar.arrive {self.layout.bar_name(bar)}: hand the turn on")

    def _Reset(self, st: Reset) -> None:
        self.s[st.ring], self.ph[st.ring] = 0, 0

    def _ConsumerSync(self, st: ConsumerSync) -> None:
        bar = self.layout.sync_bar
        self.emit(ARRIVE, bar, label="bar.sync: arrive")
        self.emit(WAIT, bar, self.syncs & 1, label="bar.sync: wait for every consumer")
        self.syncs += 1

    def _ScratchSync(self, st) -> None:
        """The consumers meet on their named barrier around a reduction's shared scratch (the
        scratch is theirs alone: no ring byte, no TMA; what it orders is the meeting)."""
        self._ConsumerSync(ConsumerSync())

    def _ClusterReduce(self, st: ClusterReduce) -> None:
        """Split-K: the cluster barrier (every consumer meets; the peers mirror this CTA), the
        partials written over the ring, the second cluster barrier after which they are read."""
        self._ConsumerSync(ConsumerSync())
        self._StagingBegin(StagingBegin(st.ring))
        self._ConsumerSync(ConsumerSync())
        self._StagingEnd(StagingEnd(st.ring))

    def _StreamKFixup(self, st: StreamKFixup) -> None:
        """Stream-K: the fix-up reads the loop's accumulators (to store or add partials): every
        wgmma group must have retired. Its flags are between CTAs, outside this one-CTA model
        (codegen/hopper/tail_split.check_walk models them)."""
        self.emit(ACC_READ, 0, label=f"stream-K fix-up reads loop {st.ring}'s accumulators")

    def _ClusterSync(self, st: ClusterSync) -> None:
        """Multicast's cluster barrier. "start" comes first in every role's program: it precedes
        all of their actions, so, as a meeting, it orders nothing more in one CTA (no action);
        "exit" (the consumers' last step) is a meeting of the consumers; the peer CTA is assumed
        to mirror this one."""
        if st.at == "exit":
            self._ConsumerSync(ConsumerSync())
        elif self.out:
            raise ValueError("ClusterSync('start') must come before every other step of a program")

    def _ClusterArrive(self, st: ClusterArrive) -> None:
        """A cluster split's arrival on the barrier that publishes the exchanges' mbarrier inits:
        first in every role's program (as ``ClusterSync("start")``); no action in one CTA."""
        if self.out:
            raise ValueError("ClusterArrive must come before every other step of a program")

    def _ClusterWait(self, st: ClusterWait) -> None:
        """The producer's wait on that barrier: every thread of the cluster arrived at its start,
        so in one CTA it orders nothing and never blocks (no action)."""

    def _ClusterExchange(self, st: ClusterExchange) -> None:
        """A cluster exchange of a row reduction's partials: across CTAs codegen/cluster_protocol.py
        checks it; in this one-CTA model (the peers mirror this CTA: each waits for the partials its
        consumers push) it is a meeting of the consumers, as split-K's cluster barriers are."""
        self._ConsumerSync(ConsumerSync())

    # -- the staged epilogue (one consumer's own staging; its warps meet on its own barrier) -----
    def _StagedStore(self, st: StagedStore) -> None:
        self.run(st.body)

    def _HoldStore(self, st: HoldStore) -> None:
        """The tile is kept in registers: its store's actions come at the next ``IfHeld``."""
        self.held.add(st.store)

    def _IfHeld(self, st: IfHeld) -> None:
        if st.store in self.held:
            self.held.discard(st.store)
            self.run(st.body)

    def _StoreWait(self, st: StoreWait) -> None:
        self.emit(STORE_WAIT, st.pending, label=f"cp.async.bulk.wait_group.read {st.pending} (one thread)")

    def _StagingSync(self, st: StagingSync) -> None:
        self.emit(STAGING_SYNC, 0, label="bar.sync staging[c]: the consumer's warps meet")

    def _StagingWrite(self, st: StagingWrite) -> None:
        b = self.layout.buffers.index((st.store, st.buffer))
        self.emit(STAGING_WRITE, b, label=f"stmatrix into {self.layout.buffer_name(b)}; fence.proxy.async")

    def _TmaStore(self, st: TmaStore) -> None:
        b = self.layout.buffers.index((st.store, st.buffer))
        self.emit(TMA_STORE, b, label=f"TMA store of {self.layout.buffer_name(b)}; commit_group")

    def _StoreDrain(self, st: StoreDrain) -> None:
        self.emit(STORE_DRAIN, 0, label="cp.async.bulk.wait_group 0 (one thread)")

    def _StagingBegin(self, st: StagingBegin) -> None:
        self.emit(STAGING_BEGIN, self.layout.base[st.ring], self.proto.ring(st.ring).stages,
                  label=f"epilogue writes its staging tile over ring {st.ring}")

    def _StagingEnd(self, st: StagingEnd) -> None:
        self.emit(STAGING_END, self.layout.base[st.ring], self.proto.ring(st.ring).stages,
                  label=f"epilogue's TMA store has read the staging tile (ring {st.ring})")

    def _StagingRead(self, st: StagingRead) -> None:
        """The issuing thread's wait for its bulk stores' reads, then the staging's end."""
        self.emit(STORE_WAIT, 0, label=f"cp.async.bulk.wait_group.read 0 (one thread): the staging in ring "
                  f"{st.ring} read")
        self._StagingEnd(StagingEnd(st.ring))


def unroll(proto: Protocol, program: tuple[Step, ...], case: tuple[int, ...],
           layout: Layout | None = None, consumer: int = 0) -> list[Action]:
    """The concrete actions one role performs in ``case`` (``consumer``: which consumer, for a
    ping-pong program)."""
    u = _Unroller(proto, layout or Layout.of(proto), case, consumer)
    u.run(program)
    return u.out
