"""The synchronization protocol of a warp-specialized Hopper kernel, as data.

A ``Protocol`` says, for one kernel, which mbarrier rings exist and what the producer warpgroup
and each consumer warpgroup do with them. The PTX emitter follows it; the checker
(``sync_check.py``) explores it on the CPU before any PTX exists.

**Rings.** One per pipelined loop (``stages`` buffers of the loop's loads) and one per load
outside any loop (``one_shot``: filled once per tile; one stage, or in a persistent loop two
*slots* used tile after tile, so the producer fills the next tile's while the consumers read this
one's: the pipeline pass's ``slots``). Stage ``s`` of a ring has

* ``full[s]``:  initialised with ``full_arrivals`` (1: the producer's ``arrive.expect_tx``),
  armed with ``expect_tx`` bytes; the TMA loads of the stage complete those bytes;
* ``empty[s]``: initialised with ``empty_arrivals`` (one arrival per consumer warpgroup); each
  consumer arrives once it no longer reads the stage.

**Programs** are small trees of steps. Each role keeps, per ring, a stage index ``s`` and a phase
bit ``ph`` (both start at 0); ``Advance`` moves to the next stage and flips ``ph`` on wrap-around.

    Tiles(body)            the block loop: once per tile this CTA handles (persistent: many);
                           ``alternate``: consumer c of N takes the CTA's tiles c, c + N, ...
    IfPrevTile(body)       only when the CTA handled a tile before this one
    IfNextTile(body)       only when the CTA has a tile after this one
    Loop(ring, body)       the ring's loop: its trip count comes from the tile (min_trips: do-while);
                           ``part`` "own": a consumer's own trips, the first of the tile's (in a
                           causal attention tile, the key blocks its rows see: consumers differ),
                           "rest": the tile's trips after them
    IfTrips(ring, body)    only when the ring's loop runs at least once this tile (``part`` "own":
                           this consumer's own trips)
    NotFirst(body)         only from the loop's second trip on
    Wait(ring, bar, flip)  spin on bar[s] ("full" or "empty") with parity ph ^ flip
    ExpectTx(ring, nbytes) mbarrier.arrive.expect_tx on full[s]
    TmaLoad(ring, load)    cp.async.bulk.tensor of one load into stage s, completing on full[s]
    Mma(rings, tiles)      one committed wgmma group reading stage s of each ring named (and the
                           consumer-written tiles named in ``tiles``)
    MmaWait(pending)       wgmma.wait_group pending
    Read(rings)            the consumers read stage s of each ring named into registers
                           (ld.shared: a ring tile copied into a register tile,
                           codegen/hopper/lower_tile_read.py); synchronous, so done before the
                           next step: it must come after the stage's full Wait and before its
                           Release
    Release(ring, which)   arrive on empty[s] ("cur") or on the previous stage's ("prev")
    Advance(ring, per)     next stage; flip ph on wrap ("wrap") -- "iteration" is a known bug
    Reset(ring)            s = 0, ph = 0 (a known bug when the barriers carry on)
    ConsumerSync()         bar.sync on a named barrier of all consumer warpgroups
    ScratchSync(ops)       the consumers' named barrier around the shared scratch their cross-warp
                           reductions (``ops``) exchange partials through, in the tile op it
                           stands for: every ``bar.sync`` those exchanges need (a meeting, checked
                           as ``ConsumerSync``)
    TileWrite(tile)        the consumers write their rows of a shared tile no TMA fills (a
                           register tile stored for a later wgmma) and fence the writes for the
                           async proxy; ``ConsumerSync`` steps around it order it after every
                           wgmma that read the tile's previous contents and before any that
                           reads the new ones (``tile_write``)
    CopyFill(tile, wait)   the consumers fill a shared tile no producer loads (a no-product
                           kernel's row block, warp-spec's ``fill``): each thread cp.async-copies
                           its 16-byte pieces, waits for them (cp.async.wait_all), and the
                           consumers meet on their named barrier; checked as a write of the tile
                           by every consumer, then a meeting (nothing refills it within a CTA:
                           one tile per CTA). ``wait = False`` (a load stream-cols marks
                           ``wait = deferred``): the copies are issued only, left in flight
                           beside the work that does not read the tile, and a ``FillWait``
                           before the tile's first reader waits and meets (or the next
                           ``CopyFill`` that waits: cp.async.wait_all lands every copy)
    FillWait(tiles)        cp.async.wait_all and the consumers' meeting for the copies of the
                           ``CopyFill(wait = False)`` steps of ``tiles``, before the first op
                           that reads one of them; checked as a meeting
    SkipTrips(ring)        advance the ring past the previous tile's trips (ping-pong: the
                           stages the other consumer reads)
    TurnWait()             ping-pong: bar.sync on this consumer's turn barrier (its turn on the
                           tensor cores, handed on by the consumer of the CTA's previous tile)
    TurnPass()             ping-pong: bar.arrive on the next consumer's turn barrier
    StagingBegin(ring)     the epilogue writes its staging tile over every stage of the ring
    StagingEnd(ring)       ... and its TMA store has read it (one tile per CTA: nothing refills
                           the ring after it, so no wait is printed)
    StagingRead(ring)      ... the staging is in the one slot of a tile loaded once per tile of a
                           persistent loop (``pipeline{staging=slot}``): the consumer's TMA-issuing
                           thread waits until its bulk stores have read it
                           (cp.async.bulk.wait_group.read 0), the same thread that then releases
                           the slot, so the producer's next copy never lands under a store
    ClusterReduce(ring, ctas)  split-K: the ``ctas`` CTAs of a cluster each ran 1/ctas of the
                           ring loop's trips; at a cluster barrier (every consumer of every CTA
                           past the loop, its ring drained) each sends its partial accumulators
                           into the peers' ring bytes (DSMEM), a second cluster barrier, then each
                           adds the partials of its own part. Checked as a meeting of the
                           consumers around a write over every stage of the ring (the peers are
                           assumed to mirror this CTA, as for multicast)
    StreamKFixup(ring)     stream-K (the grid pass's ``stream_k``): the ring loop ran one unit of
                           its tile's trips; a contribution stores the partial accumulator to the
                           module's workspace, sets its flags (st.release.gpu) and ends the tile;
                           an owned unit waits for the later CTAs' flags (ld.acquire.gpu) and adds
                           their partials. It touches no shared memory: checked as a read of the
                           accumulator (no wgmma group may be in flight), the last step of the
                           tile (a contribution skips only IR ops); the cross-CTA flags are the
                           launch-order model of codegen/hopper/tail_split.py (``check_walk``)
    StagedStore(store, body)  the staged epilogue of IR store ``store`` (the epilogue pass chose it):
                           its rounds, each ``StoreWait``, ``StagingSync``, ``StagingWrite``,
                           ``StagingSync``, ``TmaStore`` (``staged_store``)
    StoreWait(pending)     the consumer's TMA-issuing thread waits until at most ``pending`` of
                           its committed bulk-store groups still read their staging
                           (cp.async.bulk.wait_group.read)
    StagingSync()          bar.sync on this consumer warpgroup's own named barrier (its 4 warps
                           meet: after the wait above, and after every warp's stmatrix)
    StagingWrite(store, buffer)  every warp stmatrix-es its rows of the round into staging
                           buffer ``buffer`` (one of two halves used in turn, or the only one),
                           then fence.proxy.async (the TMA store reads through the async proxy)
    TmaStore(store, buffer)  one thread TMA-stores the buffer's panels; commit_group
    StoreDrain()           before the consumer exits: its bulk stores have completed
                           (cp.async.bulk.wait_group 0)
    HoldStore(store)       the deferred epilogue: the tile is kept in registers of its own; its
                           ``StagedStore`` runs at the next ``IfHeld``
    IfHeld(store, body)    only when a tile of ``store`` is held (after the next tile's first wgmma
                           group, after a ring loop, after the tile loop; ``defer_store``)
    ClusterSync(at)        multicast: barrier.cluster, every non-exited thread of the pair meets;
                           ``at`` "start" (first in both programs, after the barrier init: no
                           remote arrival or multicast byte reaches a barrier before the peer
                           initialised it) or "exit" (last in the consumers': no CTA exits while
                           its peer's consumers may still arrive on its empty barriers). Checked
                           as a meeting: "start" precedes every role's first action, "exit" is a
                           meeting of the consumers (the peer is assumed to mirror this CTA)
    ClusterArrive(exchanges)  a row block split over a cluster (stream-cols' ``cluster``): the first
                           step of both programs. The consumers' (``exchanges`` > 0): one thread
                           initialises and arms the mbarrier of each cluster exchange and fences
                           the inits for the cluster; then every thread of the role arrives
                           (relaxed) on the cluster barrier that publishes them
    ClusterWait()          the producer's last step: its threads wait on that cluster barrier
                           (every thread that arrived also waits)
    ClusterExchange(op, ctas, first)  the consumers' exchange of a row reduction ``op``'s partials
                           between the ``ctas`` CTAs of the cluster (codegen/emit_cluster.py):
                           ``first``: wait on the cluster barrier first (the peers' inits are
                           visible); st.async the partial into every CTA's slot, counted by its
                           exchange mbarrier; wait on this CTA's; read the slots in rank order.
                           Across CTAs: checked by codegen/cluster_protocol.py over every
                           interleaving; in one CTA (peers mirroring it): a meeting of the consumers

Every class is ``@dataclass(unsafe_hash=True)`` over ``Frozen`` (tkjit/frozen.py): protocols are
compared, hashed (``mbarrier``'s cache of checks) and keyed by their repr (the verdicts kept on
disk), so they compare, hash and print as frozen dataclasses do; ``frozen=True`` itself would
generate two more methods per class when this module is imported by every Hopper compile.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Union

from ..frozen import Frozen


@dataclass(unsafe_hash=True)
class Load(Frozen):
    """One TMA box that lands in every fill of a ring stage."""

    name: str
    nbytes: int


@dataclass(unsafe_hash=True)
class Ring(Frozen):
    """A ring of mbarrier-guarded stages in shared memory (one per pipelined loop or one-shot load)."""

    name: str
    stages: int
    loads: tuple[Load, ...]
    expect_tx: int
    empty_arrivals: int
    full_arrivals: int = 1
    one_shot: bool = False
    where: str = ""
    cluster: int = 1
    """CTAs of a cluster sharing every stage (TMA multicast): each one's producer fills part of
    the stage in all of them, so each CTA's empty[s] counts empty_arrivals x cluster (every
    consumer releases the stage in every CTA). The checker explores one CTA with its peers
    assumed to mirror it (empty_arrivals stays the per-CTA count)."""

    @property
    def stage_bytes(self) -> int:
        return sum(ld.nbytes for ld in self.loads)

    def text(self) -> str:
        loads = ", ".join(f"{ld.name} {ld.nbytes} B" for ld in self.loads)
        kind = ("one-shot" if self.stages == 1 else f"one-shot, {self.stages} slots") \
            if self.one_shot else f"{self.stages} stages"
        at = f" at {self.where}" if self.where else ""
        empty = f"empty[{self.stages}] count {self.empty_arrivals}"
        if self.cluster > 1:
            empty = (f"multicast over a cluster of {self.cluster}; empty[{self.stages}] count "
                     f"{self.empty_arrivals} x {self.cluster} (each consumer arrives in every CTA)")
        return (f"ring {self.name}{at}: {kind} x {self.stage_bytes} B ({loads}); "
                f"full[{self.stages}] count {self.full_arrivals}, expect_tx {self.expect_tx} B; {empty}")


# -- events (leaves of a program) -------------------------------------------------------------
@dataclass(unsafe_hash=True)
class Wait(Frozen):
    """Spin on ``bar[s]`` ("full" or "empty") with parity ``ph ^ flip``."""

    ring: str
    bar: str  # "full" | "empty"
    flip: int = 0

    def text(self) -> str:
        return f"wait {self.bar}[{self.ring}.s] parity ph{'^1' if self.flip else ''}"


@dataclass(unsafe_hash=True)
class ExpectTx(Frozen):
    """``mbarrier.arrive.expect_tx`` on ``full[s]``: arm it with the stage's bytes."""

    ring: str
    nbytes: int

    def text(self) -> str:
        return f"arrive.expect_tx full[{self.ring}.s] {self.nbytes} B"


@dataclass(unsafe_hash=True)
class TmaLoad(Frozen):
    """``cp.async.bulk.tensor`` of one load into stage ``s``, completing on ``full[s]``."""

    ring: str
    load: str

    def text(self) -> str:
        return f"tma_load {self.load} -> {self.ring}.s (complete_tx on full[{self.ring}.s])"


@dataclass(unsafe_hash=True)
class Mma(Frozen):
    """One committed wgmma group reading stage ``s`` of each ring named (``which`` "prev": the
    stage before, the previous trip's -- a product software-pipelined one trip behind)."""

    rings: tuple[str, ...]
    which: str = "cur"
    tiles: tuple[str, ...] = ()
    """Consumer-written shared tiles (``TileWrite``) the group reads too."""
    held: bool = False
    """Its A is a register tile, copied into registers of its own right before the group is
    issued: the trip's next register A is made in the registers it was made in, while this group
    still reads the copy (``held_loop``)."""

    def text(self) -> str:
        stage = "s" if self.which == "cur" else "prev"
        reads = [f"{r}.{stage}" for r in self.rings] + [f"tile {t} (consumer-written)" for t in self.tiles]
        held = " (its register A copied to held registers first)" if self.held else ""
        return "mma reading " + ", ".join(reads) + held + "; commit_group"


@dataclass(unsafe_hash=True)
class Read(Frozen):
    """The consumers read stage ``s`` of each ring named into registers (``ld.shared``, a ring
    tile copied into a register tile): a synchronous read, complete before the next step, so it
    needs no ``MmaWait``; it must come after the stage's full ``Wait`` and before its ``Release``."""

    rings: tuple[str, ...]

    def text(self) -> str:
        return "read " + ", ".join(f"{r}.s" for r in self.rings) + " into registers (ld.shared)"


@dataclass(unsafe_hash=True)
class MmaWait(Frozen):
    """``wgmma.wait_group pending``."""

    pending: int

    def text(self) -> str:
        return f"mma_wait {self.pending}"


@dataclass(unsafe_hash=True)
class Release(Frozen):
    """Arrive on ``empty[s]`` ("cur") or on the previous stage's ("prev")."""

    ring: str
    which: str = "cur"  # "cur" | "prev"

    def text(self) -> str:
        stage = "s" if self.which == "cur" else "prev"
        return f"release: arrive empty[{self.ring}.{stage}]"


@dataclass(unsafe_hash=True)
class Advance(Frozen):
    """Next stage; flip ``ph`` on wrap-around ("wrap"; "iteration" is a known bug)."""

    ring: str
    per: str = "wrap"  # "wrap" (correct) | "iteration" (flips the phase every trip)

    def text(self) -> str:
        flip = "on wrap" if self.per == "wrap" else "every trip"
        return f"advance {self.ring}: s = s+1 mod stages, flip ph {flip}"


@dataclass(unsafe_hash=True)
class Reset(Frozen):
    """``s = 0, ph = 0`` (a known bug when the barriers carry on)."""

    ring: str

    def text(self) -> str:
        return f"reset {self.ring}: s = 0, ph = 0"


@dataclass(unsafe_hash=True)
class ConsumerSync(Frozen):
    """``bar.sync`` on a named barrier of all consumer warpgroups."""

    def text(self) -> str:
        return "bar.sync: all consumer warpgroups meet"


@dataclass(unsafe_hash=True)
class ScratchSync(Frozen):
    """The consumers' shared scratch: the row reductions ``ops`` of the tile op this step stands
    for combine partials over several warp columns through shared scratch, and every ``bar.sync``
    on the consumers' named barrier that orders those writes and reads (a kernel with no matrix
    product: codegen/hopper/lower_layout.py) is this step's. Checked as a meeting of the consumers."""

    ops: tuple[str, ...]

    def text(self) -> str:
        return f"bar.sync: all consumer warpgroups meet around the shared scratch of {', '.join(self.ops)}"


@dataclass(unsafe_hash=True)
class TileWrite(Frozen):
    """The consumers write their rows of ``tile``, a shared tile no TMA fills, from registers
    (``st.shared``), then ``fence.proxy.async`` so that a wgmma (the async proxy) sees them."""

    tile: str

    def text(self) -> str:
        return f"write tile {self.tile} from registers; fence.proxy.async"


@dataclass(unsafe_hash=True)
class CopyFill(Frozen):
    """The consumers fill ``tile`` (no producer loads it) with cp.async, wait for their copies and
    meet on their named barrier: every thread's pieces have landed and all may read the tile.
    ``wait = False``: the copies are only issued; a later ``FillWait`` naming the tile lands them."""

    tile: str
    wait: bool = True

    def text(self) -> str:
        if not self.wait:
            return f"fill tile {self.tile} by cp.async, its copies left in flight (a later cp.async.wait_all lands them)"
        return f"fill tile {self.tile} by cp.async; cp.async.wait_all; bar.sync: all consumer warpgroups meet"


@dataclass(unsafe_hash=True)
class FillWait(Frozen):
    """The copies of the ``CopyFill(wait = False)`` steps of ``tiles`` (and every other copy in
    flight) have landed for each thread (``cp.async.wait_all``), and the consumers meet on their
    named barrier: all may read the tiles. It comes before the first op that reads one of them."""

    tiles: tuple[str, ...]

    def text(self) -> str:
        return (f"the copies of tile(s) {', '.join(self.tiles)} land: cp.async.wait_all; bar.sync: "
                "all consumer warpgroups meet")


@dataclass(unsafe_hash=True)
class StagingBegin(Frozen):
    """The epilogue writes its staging tile over every stage of the ring."""

    ring: str

    def text(self) -> str:
        return f"epilogue: write the staging tile over ring {self.ring}"


@dataclass(unsafe_hash=True)
class StagingEnd(Frozen):
    """The epilogue's TMA store has read its staging tile (``cp.async.bulk.wait_group.read 0``)."""

    ring: str

    def text(self) -> str:
        return f"epilogue: TMA store has read the staging tile (ring {self.ring} free again)"


@dataclass(unsafe_hash=True)
class StagingRead(Frozen):
    """The epilogue's staging lives in the one slot of ``ring`` (a tile loaded once per tile of a
    persistent loop): the consumer's TMA-issuing thread waits until its bulk stores have read it
    (``cp.async.bulk.wait_group.read 0``) before that thread releases the slot."""

    ring: str

    def text(self) -> str:
        return (f"epilogue: wait until the TMA stores have read the staging in ring {self.ring} "
                "(cp.async.bulk.wait_group.read 0, the thread that releases it)")


@dataclass(unsafe_hash=True)
class ClusterReduce(Frozen):
    """Split-K: the cluster's CTAs add their partial accumulators of ``ring``'s loop through
    distributed shared memory, written over every stage of that (drained) ring, between two
    cluster barriers."""

    ring: str
    ctas: int

    def text(self) -> str:
        return (f"split-K over a cluster of {self.ctas}: barrier.cluster; send the partials of "
                f"loop {self.ring} into the peers' ring {self.ring} (DSMEM); barrier.cluster; "
                "add this CTA's part")


@dataclass(unsafe_hash=True)
class StreamKFixup(Frozen):
    """Stream-K: after ``ring``'s loop ran this unit's trips, a contribution hands its partial
    accumulator to the owner of the tile through the module's workspace and flags (and ends the
    tile); an owner adds the later CTAs' partials."""

    ring: str

    def text(self) -> str:
        return (f"stream-K fix-up of loop {self.ring}: a contribution stores its partial to the "
                "workspace and sets its flags (st.release.gpu), then ends the tile; an owner waits "
                "for the later CTAs' flags (ld.acquire.gpu) and adds their partials")


@dataclass(unsafe_hash=True)
class ClusterSync(Frozen):
    """Multicast: a cluster barrier of the pair's CTAs (``barrier.cluster`` arrive + wait)."""

    at: str  # "start" | "exit"

    def text(self) -> str:
        if self.at == "start":
            return ("barrier.cluster: the pair meets after the barrier init (the peer may arrive and "
                    "multicast here from now on)")
        return "barrier.cluster: the pair's consumers meet before exit (no peer arrives here after it)"


@dataclass(unsafe_hash=True)
class ClusterArrive(Frozen):
    """A row block split over a cluster: the cluster barrier that publishes the exchanges'
    mbarrier inits, arrived on (relaxed) by every thread of the role at its start; the consumers'
    (``exchanges`` > 0) first initialise and arm those mbarriers (one thread) and fence them."""

    exchanges: int = 0

    def text(self) -> str:
        if self.exchanges:
            return (f"init and arm the mbarriers of {self.exchanges} cluster exchange(s) (one thread; "
                    "fence.mbarrier_init.release.cluster); barrier.cluster.arrive.relaxed (every consumer thread)")
        return "barrier.cluster.arrive.relaxed (every producer thread)"


@dataclass(unsafe_hash=True)
class ClusterWait(Frozen):
    """The producer's last step: its threads wait on the cluster barrier they arrived on."""

    def text(self) -> str:
        return "barrier.cluster.wait.acquire (every producer thread, after its loads)"


@dataclass(unsafe_hash=True)
class ClusterExchange(Frozen):
    """The consumers' exchange of row reduction ``op``'s partials between the ``ctas`` CTAs of a
    cluster through distributed shared memory (the push exchange, codegen/emit_cluster.py)."""

    op: str
    ctas: int
    first: bool = False

    def text(self) -> str:
        wait = "barrier.cluster.wait.acquire (the peers' exchange mbarriers are initialised); " if self.first else ""
        return (f"cluster exchange of {self.op} over {self.ctas} CTAs: {wait}st.async the partial into every "
                "CTA's slot (complete_tx on its exchange mbarrier); mbarrier.try_wait.parity.acquire.cluster on "
                f"this CTA's; read the {self.ctas} slots in rank order")


@dataclass(unsafe_hash=True)
class StoreWait(Frozen):
    """Staged epilogue: the consumer's one TMA-issuing thread waits until at most ``pending`` of
    its committed bulk-store groups still read their staging (``cp.async.bulk.wait_group.read``)."""

    pending: int

    def text(self) -> str:
        return (f"bulk stores: at most {self.pending} group(s) still read their staging "
                "(cp.async.bulk.wait_group.read, one thread)")


@dataclass(unsafe_hash=True)
class StagingSync(Frozen):
    """Staged epilogue: ``bar.sync`` on this consumer warpgroup's own named barrier (128 threads)."""

    def text(self) -> str:
        return "bar.sync staging[c]: this consumer's 4 warps meet"


@dataclass(unsafe_hash=True)
class StagingWrite(Frozen):
    """Staged epilogue: every warp of the consumer stmatrix-es its rows of one round into staging
    buffer ``buffer`` of ``store``, then ``fence.proxy.async`` for the TMA store (async proxy)."""

    store: str
    buffer: int

    def text(self) -> str:
        return f"stmatrix a round of {self.store} into staging {self.store}.{self.buffer}; fence.proxy.async"


@dataclass(unsafe_hash=True)
class TmaStore(Frozen):
    """Staged epilogue: one thread TMA-stores staging buffer ``buffer`` of ``store``; commit_group."""

    store: str
    buffer: int

    def text(self) -> str:
        return f"tma_store staging {self.store}.{self.buffer} -> {self.store} (one thread); commit_group"


@dataclass(unsafe_hash=True)
class StoreDrain(Frozen):
    """Before the consumer exits: its bulk stores have completed (``cp.async.bulk.wait_group 0``)."""

    def text(self) -> str:
        return "bulk stores: every group completed (cp.async.bulk.wait_group 0, one thread)"


@dataclass(unsafe_hash=True)
class HoldStore(Frozen):
    """The deferred epilogue: ``store``'s tile is held in registers of its own until ``IfHeld``."""

    store: str

    def text(self) -> str:
        return f"hold the tile of {self.store} in registers (deferred epilogue)"


@dataclass(unsafe_hash=True)
class SkipTrips(Frozen):
    """Advance the ring past the previous tile's trips (ping-pong: the other consumer's stages)."""

    ring: str

    def text(self) -> str:
        return f"skip {self.ring}: advance by the previous tile's trips (the other consumer's stages)"


@dataclass(unsafe_hash=True)
class TurnWait(Frozen):
    """Ping-pong: ``bar.sync`` on this consumer's turn barrier. ``who``: "" every consumer;
    "first": consumer 0 only (the closing wait of a chain of turns, ``with_turns``)."""

    who: str = ""

    def text(self) -> str:
        if self.who == "first":
            return "consumer 0: bar.sync turn[0]: take the last consumer's last hand-over"
        return "bar.sync turn[c]: wait for this consumer's turn on the tensor cores"


@dataclass(unsafe_hash=True)
class TurnPass(Frozen):
    """Ping-pong: ``bar.arrive`` on the next consumer's turn barrier. ``who``: "" every consumer;
    "last": the last consumer only (the opening hand-over of a chain of turns, ``with_turns``)."""

    who: str = ""

    def text(self) -> str:
        if self.who == "last":
            return "last consumer: bar.arrive turn[0]: give consumer 0 the first turn"
        return "bar.arrive turn[next consumer]: hand the tensor cores on"


def turn_applies(step: "TurnWait | TurnPass", consumer: int, consumers: int) -> bool:
    """Whether consumer ``consumer`` (of ``consumers``) runs a turn step (its ``who``)."""
    return (step.who == "" or (step.who == "first" and consumer == 0)
            or (step.who == "last" and consumer == consumers - 1))


def with_turns(consumer: tuple) -> tuple:
    """The consumers' program with in-loop turns (``LoopPlan.turns``): the chain of turns runs over
    the whole CTA. The last consumer opens it (hands consumer 0 its first turn) and consumer 0
    closes it (takes the last consumer's last hand-over). So every named barrier gets as many
    arrivals as waits, whatever the tiles and trips, as long as every consumer runs the same
    trips."""
    return (TurnPass("last"), *consumer, TurnWait("first"))


Event = Union[Wait, ExpectTx, TmaLoad, Mma, Read, MmaWait, Release, Advance, Reset, ConsumerSync, ScratchSync, TileWrite, CopyFill,
              FillWait,
              StagingBegin, StagingEnd, StagingRead, ClusterReduce, StreamKFixup, ClusterSync, ClusterArrive, ClusterWait,
              ClusterExchange, SkipTrips, TurnWait, TurnPass,
              StoreWait, StagingSync, StagingWrite, TmaStore, StoreDrain, HoldStore]


# -- structure --------------------------------------------------------------------------------
@dataclass(unsafe_hash=True)
class Tiles(Frozen):
    """The block loop: once per tile this CTA handles."""

    body: tuple["Step", ...]
    alternate: bool = False
    """Consumers take turns: consumer c of N runs the body for the CTA's tiles c, c + N, ...
    (ping-pong); the producer's Tiles never alternates."""

    def head(self) -> str:
        return "for each tile of this consumer (the CTA's tiles c, c + N, ...)" if self.alternate \
            else "for each tile"


@dataclass(unsafe_hash=True)
class IfPrevTile(Frozen):
    """Only when the CTA handled a tile before this one."""

    body: tuple["Step", ...]

    def head(self) -> str:
        return "if the CTA handled a tile before this one"


@dataclass(unsafe_hash=True)
class IfNextTile(Frozen):
    """Only when the CTA has a tile after this one."""

    body: tuple["Step", ...]

    def head(self) -> str:
        return "if the CTA has a tile after this one"


PARTS = ("all", "own", "rest")
"""Which of a tile's trips a loop runs: all, a consumer's own (a prefix), or the rest after them."""
PART_HEADS = {"all": "", "own": " over this consumer's own trips (a prefix of the tile's)",
              "rest": " over the tile's trips after this consumer's own"}


@dataclass(unsafe_hash=True)
class Loop(Frozen):
    """The ring's loop; its trip count comes from the tile (``min_trips``: do-while)."""

    ring: str
    body: tuple["Step", ...]
    min_trips: int = 0
    part: str = "all"
    """The tile's trips ("all"), this consumer's own ("own") or the rest after them ("rest")."""

    def head(self) -> str:
        form = " (do-while: at least once)" if self.min_trips else ""
        return f"loop {self.ring}{PART_HEADS[self.part]}{form}"


@dataclass(unsafe_hash=True)
class IfTrips(Frozen):
    """Only when the ring's loop runs at least once this tile."""

    ring: str
    body: tuple["Step", ...]
    orelse: tuple["Step", ...] = ()
    """What runs instead when the loop has no trips."""
    part: str = "all"
    """Whose trips: the tile's ("all") or this consumer's own ("own")."""

    def head(self) -> str:
        return f"if {self.ring}.{'own ' if self.part == 'own' else ''}trips > 0"


@dataclass(unsafe_hash=True)
class NotFirst(Frozen):
    """Only from the loop's second trip on."""

    body: tuple["Step", ...]

    def head(self) -> str:
        return "if not the first trip"


@dataclass(unsafe_hash=True)
class First(Frozen):
    """Only on the loop's first trip."""

    body: tuple["Step", ...]

    def head(self) -> str:
        return "if the first trip"


@dataclass(unsafe_hash=True)
class StagedStore(Frozen):
    """The staged epilogue of IR store ``store``: its rounds (``staged_store``)."""

    store: str
    body: tuple["Step", ...]

    def head(self) -> str:
        return f"epilogue of {self.store} through its staging"


@dataclass(unsafe_hash=True)
class IfHeld(Frozen):
    """Only when a tile of ``store`` is held (``HoldStore`` since the last ``IfHeld``)."""

    store: str
    body: tuple["Step", ...]

    def head(self) -> str:
        return f"if a tile of {self.store} is held"


Block = Union[Tiles, Loop, IfTrips, NotFirst, First, IfPrevTile, IfNextTile, StagedStore, IfHeld]
Step = Union[Event, Block]
BLOCKS = (Tiles, Loop, IfTrips, NotFirst, First, IfPrevTile, IfNextTile, StagedStore, IfHeld)


def all_steps(steps: tuple[Step, ...]):
    """Every step of a program, the steps of its blocks (``body``, ``orelse``) included, in order."""
    for st in steps:
        yield st
        yield from all_steps(getattr(st, "body", ()))
        yield from all_steps(getattr(st, "orelse", ()))


def program_lines(steps: tuple[Step, ...], depth: int = 1) -> list[str]:
    lines: list[str] = []
    for step in steps:
        if isinstance(step, BLOCKS):
            lines.append("  " * depth + step.head() + " {")
            lines.extend(program_lines(step.body, depth + 1))
            if getattr(step, "orelse", ()):
                lines.append("  " * depth + "} else {")
                lines.extend(program_lines(step.orelse, depth + 1))
            lines.append("  " * depth + "}")
        else:
            lines.append("  " * depth + step.text())
    return lines


@dataclass(unsafe_hash=True)
class Protocol(Frozen):
    """One kernel's rings and the programs of its producer and of each consumer warpgroup."""

    kernel: str
    consumers: int
    persistent: bool
    rings: tuple[Ring, ...]
    producer: tuple[Step, ...]
    consumer: tuple[Step, ...]

    @property
    def pingpong(self) -> bool:
        """Consumers alternate over the CTA's tiles (each fill is read by one consumer)."""
        return any(isinstance(st, Tiles) and st.alternate for st in self.consumer)

    @property
    def turns(self) -> bool:
        """Consumers take turns on the tensor cores (named barriers), alternate tiles or in-loop."""
        return any(isinstance(st, (TurnWait, TurnPass)) for st in all_steps(self.consumer))

    @property
    def own_trips(self) -> bool:
        """Consumers run loops over their own trips (``Loop.part``): trip counts differ between them."""
        return any(getattr(st, "part", "all") != "all" for st in all_steps(self.consumer))

    def ring(self, name: str) -> Ring:
        for r in self.rings:
            if r.name == name:
                return r
        raise KeyError(name)

    def text(self) -> str:
        sched = "persistent" if self.persistent else "one tile per CTA"
        if self.pingpong:
            sched += ", ping-pong: consumers take alternate tiles and turns on the tensor cores"
        idle = all(isinstance(st, Tiles) and not st.body for st in self.producer)  # (warp-spec: none)
        lines = [f"protocol {self.kernel}: {'no producer' if idle else '1 producer'} + {self.consumers} "
                 f"consumer warpgroups, {sched}"]
        lines += ["  " + r.text() for r in self.rings]
        lines.append("producer:")
        lines += program_lines(self.producer)
        lines.append(f"consumer (each of {self.consumers}):")
        lines += program_lines(self.consumer)
        return "\n".join(lines) + "\n"


# -- the standard programs --------------------------------------------------------------------
@dataclass(unsafe_hash=True)
class LoopPlan(Frozen):
    """A pipelined loop: ``mmas`` = the rings each wgmma of a trip reads, in program order
    (empty: the stage is read by ordinary loads, not by wgmma)."""

    ring: str
    mmas: tuple[tuple[str, ...], ...]
    pipelined: bool = False
    """Level 2 (two products, the second with A in registers made from the first's result): the
    second product of trip j is issued in trip j+1, right after trip j+1's first, and runs under
    trip j+1's register work (``pipelined_loop``); the pass decides it (mbarrier.pipelined)."""
    in_flight: bool = True
    """The trip's last wgmma group may stay in flight into the next trip (wait_group 1): its
    result only flows, through the yield, into the next trip's wgmma as the accumulator. When
    anything else reads it (a register op in the loop, a rescaled accumulator), every group is
    drained before the trip ends (wait_group 0) and the current stage is released at once."""
    split: str = ""
    """Level 2 with a ring of its own for the second product's tiles (named here): the first
    ring's stage is released as soon as the first product retires, the second's a trip later,
    once the held second product does (``split_loop``)."""
    writes: tuple[tuple[int, str], ...] = ()
    """Consumer-written shared tiles: (k, tile) -- the consumers write ``tile`` from registers
    before the trip's k-th product (``tile_write``); such a trip drains every group."""
    tile_reads: tuple[tuple[str, ...], ...] = ()
    """Per product (as ``mmas``), the consumer-written tiles it reads (empty: none)."""
    copies: tuple[tuple[int, tuple[str, ...]], ...] = ()
    """Ring tiles the consumers read into registers in the trip: (n, rings) -- the copy comes
    after the trip's n-th anchored op (product, written tile or earlier copy), its ``Read`` step
    placed among the others by ``place_read``."""
    stores: tuple[tuple[int, "StoreItem"], ...] = ()
    """Staged stores in the trip: (n, store) -- the store comes after the trip's n-th product or
    written tile (``place_anchored``)."""
    held: bool = False
    """The trip's one product reads a register A made in the trip (a ring tile read, scaled and
    converted, say): its group stays in flight into the next trip, which makes its own A under
    it and retires it just before issuing its own (``held_loop``); the pass decides it
    (mbarrier.held_a). Without it such a trip drains its group before the next trip starts."""
    turns: bool = False
    """Level 2 with ping-pong turns (FlashAttention-3's warpgroup scheduling barriers): each
    trip, a consumer waits for its turn before issuing its products and hands the turn to the
    next consumer right after, so one consumer's softmax runs while another's wgmmas do
    (``pipelined_loop``, ``split_loop``; the chain opened and closed by ``with_turns``)."""


@dataclass(unsafe_hash=True)
class OneShotUse(Frozen):
    """A tile loaded once per tile, at this point of the tile."""

    ring: str


@dataclass(unsafe_hash=True)
class FillUse(Frozen):
    """A shared tile the consumers fill themselves (``CopyFill``), at this point of the tile
    (``wait = False``: its copies left in flight until a ``FillWaitUse``)."""

    tile: str
    wait: bool = True


@dataclass(unsafe_hash=True)
class FillWaitUse(Frozen):
    """The first op reading one of these tiles, filled with their copies left in flight
    (``FillWait``)."""

    tiles: tuple[str, ...]


@dataclass(unsafe_hash=True)
class StagingReuse(Frozen):
    """An epilogue whose staging tile reuses the bytes of these rings (``read``: the one slot of a
    tile loaded once per tile in a persistent loop, refilled for the next tile once released: the
    staging ends with ``StagingRead``, the wait for the TMA stores' reads)."""

    rings: tuple[str, ...]
    read: bool = False


@dataclass(unsafe_hash=True)
class SplitReduce(Frozen):
    """Split-K: after this ring's loop the cluster's ``ctas`` CTAs add their partials
    (``ClusterReduce``)."""

    ring: str
    ctas: int


@dataclass(unsafe_hash=True)
class StreamKUnits(Frozen):
    """Stream-K: this ring's loop runs units of its tiles' trips (``StreamKFixup`` after it)."""

    ring: str


@dataclass(unsafe_hash=True)
class StoreItem(Frozen):
    """A store the epilogue pass stages (``rounds``: (buffer, pending) per round,
    ``passes/epilogue.staging_rounds``); ``deferred``: held until the next tile's first wgmma
    group (``defer_store``)."""

    store: str
    rounds: tuple[tuple[int, int], ...]
    deferred: bool = False


@dataclass(unsafe_hash=True)
class TileProduct(Frozen):
    """A product outside any loop of tiles loaded once per tile (one-shot rings ``rings``): one
    wgmma group, drained at once (its result is read by the tile's next ops); the rings are
    released at the end of the tile, as every one-shot ring is."""

    rings: tuple[str, ...]


@dataclass(unsafe_hash=True)
class ScratchUse(Frozen):
    """A tile op whose cross-warp reductions (``ops``) exchange partials through the consumers'
    shared scratch: a ``ScratchSync`` step stands for it."""

    ops: tuple[str, ...]


@dataclass(unsafe_hash=True)
class ExchangeUse(Frozen):
    """A row reduction whose partials the CTAs of a cluster exchange (``ClusterExchange``)."""

    op: str
    ctas: int


Item = Union[LoopPlan, OneShotUse, StagingReuse, SplitReduce, StreamKUnits, StoreItem, TileProduct, ScratchUse,
             FillUse, FillWaitUse, ExchangeUse]


def staged_store(item: StoreItem) -> StagedStore:
    """A staged store's rounds: before a round writes its buffer, the stores that read it have
    read it (the issuing thread waits, then the consumer's warps meet), every warp writes its
    rows and fences them, the warps meet again, and one thread stores the buffer."""
    body: list[Step] = []
    for buffer, pending in item.rounds:
        body += [StoreWait(pending), StagingSync(), StagingWrite(item.store, buffer), StagingSync(),
                 TmaStore(item.store, buffer)]
    return StagedStore(item.store, tuple(body))


ANCHORED = (Mma, TileWrite, Read)
"""The steps of a trip that stand for an IR op (codegen/hopper/interleave.trip_anchor)."""


def place_anchored(body: tuple[Step, ...], n: int, step: Step) -> tuple[Step, ...]:
    """``step`` (which stands for an IR op coming after the trip's ``n``-th anchored op) put where
    the emitter's walk (interleave.py) keeps every other step's place: right before the
    ``n+1``-th anchored step, or, when there is none, right after the ``n``-th (at the start when
    ``n`` is 0): the steps with no op of their own then come where they came without it."""
    at = [i for i, st in enumerate(body) if isinstance(st, ANCHORED) and
          not (isinstance(st, Mma) and st.which == "prev")]
    if n < len(at):
        i = at[n]
    else:
        i = at[n - 1] + 1 if n else 0
    return body[:i] + (step,) + body[i:]


def defer_store(program: tuple[Step, ...], item: StoreItem) -> tuple[Step, ...]:
    """The deferred epilogue in a consumer program: the tile's ``StagedStore`` becomes
    ``HoldStore``, and the held tile's store runs under the next tile's first wgmma group: an
    ``IfHeld`` after every wgmma group a trip issues (not the held product of level 2), after
    every ring loop of the tile (a tile without trips) and after the tile loop (the last tile)."""
    flush = IfHeld(item.store, (staged_store(item),))

    def walk(steps: tuple[Step, ...], in_loop: bool) -> tuple[Step, ...]:
        out: list[Step] = []
        for st in steps:
            if isinstance(st, StagedStore) and st.store == item.store:
                out.append(HoldStore(item.store))
                continue
            if isinstance(st, BLOCKS) and not isinstance(st, (StagedStore, IfHeld)):
                inner = isinstance(st, Loop) or in_loop
                fields = {"body": walk(st.body, inner)}
                if getattr(st, "orelse", ()):
                    fields["orelse"] = walk(st.orelse, inner)
                st = type(st)(**{**st.__dict__, **fields})
            out.append(st)
            if in_loop and isinstance(st, Mma) and st.which == "cur":
                out.append(flush)
            if isinstance(st, IfTrips) and not in_loop:
                out.append(flush)
        return tuple(out)

    return walk(program, False) + (flush,)


def with_drain(program: tuple[Step, ...], items: tuple[Item, ...]) -> tuple[Step, ...]:
    """A consumer program that stages stores ends by waiting for its bulk stores (``StoreDrain``)."""
    staged = any(isinstance(i, StoreItem) or (isinstance(i, LoopPlan) and i.stores) for i in items)
    return program + (StoreDrain(),) if staged else program


def producer_fill(ring: Ring) -> tuple[Step, ...]:
    """Wait for the stage to be free (parity ph^1: a fresh barrier's 'previous phase' is
    complete), arm full[s] with the stage's bytes, issue its loads, advance."""
    return (Wait(ring.name, "empty", flip=1), ExpectTx(ring.name, ring.expect_tx),
            *(TmaLoad(ring.name, ld.name) for ld in ring.loads), Advance(ring.name))


def consumer_loop(plan: LoopPlan, stages: int) -> tuple[Step, ...]:
    """Wait for the data, issue the loop's wgmmas (waiting for all but the last: later ops of the
    trip need their results), keep the last one in flight, and release the *previous* stage
    once wait_group 1 has retired every group that read it; after the loop, drain and release.

    With one stage there is no previous stage to release while the next fill is awaited (the
    producer needs this very stage back first), with no wgmma the stage is read by ordinary
    loads, and without ``in_flight`` the trip reads its own product: all of these wait for
    everything and release the current stage."""
    r = plan.ring
    if plan.writes:
        return written_loop(plan)
    if plan.pipelined and plan.split and len(plan.mmas) == 2:
        return split_loop(plan)
    if plan.pipelined and len(plan.mmas) == 2 and stages >= 2:
        return pipelined_loop(plan)
    body: list[Step] = [Wait(r, "full")]
    if not plan.mmas and plan.copies:  # the stage is read into registers only
        body = [*with_reads((Wait(r, "full"),), plan), Release(r), Advance(r)]
        return (IfTrips(r, (Loop(r, tuple(body)),)),)
    if not plan.mmas:  # the stage is read by ordinary loads, modelled as one read
        body += [Mma((r,)), MmaWait(0), Release(r), Advance(r)]
        return (IfTrips(r, (Loop(r, tuple(body)),)),)
    if plan.held and stages >= 2 and len(plan.mmas) == 1:
        return held_loop(plan)
    if stages == 1 or not plan.in_flight:  # every group drained before what follows reads it
        for reads in plan.mmas:
            body += [Mma(reads), MmaWait(0)]
        body += [Release(r), Advance(r)]
        return (IfTrips(r, (Loop(r, with_reads(tuple(body), plan)),)),)
    for i, reads in enumerate(plan.mmas):
        body.append(Mma(reads))
        body.append(MmaWait(1 if i == len(plan.mmas) - 1 else 0))
    body += [NotFirst((Release(r, "prev"),)), Advance(r)]
    return (IfTrips(r, (Loop(r, with_reads(tuple(body), plan)), MmaWait(0), Release(r, "prev"))),)


def reads_around(plan: LoopPlan) -> tuple[tuple[Step, ...], tuple[Step, ...]]:
    """The ``Read`` steps of the trip's copies of ring tiles (``plan.copies``) that come before
    its first product and those that come after it: n counts the products and the earlier copies
    before a copy, so a copy with n > i has a product before it."""
    before = tuple(Read(rings) for i, (n, rings) in enumerate(plan.copies) if n == i)
    after = tuple(Read(rings) for i, (n, rings) in enumerate(plan.copies) if n > i)
    return before, after


def held_loop(plan: LoopPlan) -> tuple[Step, ...]:
    """A trip whose one product reads a register A the trip makes: it waits for its stage, reads
    its ring tiles into registers and makes the A while the previous trip's group still runs,
    then retires that group (wait_group 0), releases the previous stage, copies the A into the
    held registers and issues its own group, which stays in flight into the next trip. The
    retirement is anchored at the product (``interleave``), after the register work. After the
    loop the last group is drained and its stage released."""
    r = plan.ring
    (reads,) = plan.mmas
    before, after = reads_around(plan)
    body = (Wait(r, "full"), *before, MmaWait(0), NotFirst((Release(r, "prev"),)), Mma(reads, held=True),
            *after, Advance(r))
    return (IfTrips(r, (Loop(r, body), MmaWait(0), Release(r, "prev"))),)


def with_reads(body: tuple[Step, ...], plan: LoopPlan) -> tuple[Step, ...]:
    """A trip's steps with a ``Read`` for each ring tile the trip copies into registers
    (``plan.copies``), in program order (``place_read``)."""
    for n, rings in plan.copies:
        body = place_read(body, n, Read(rings))
    return body


def place_read(body: tuple[Step, ...], n: int, step: "Read") -> tuple[Step, ...]:
    """``step`` (a copy coming after the trip's ``n``-th anchored op) where the emitter's walk
    (interleave.py) keeps every other step's place and orders it after the stage's ``Wait`` and
    before its release: right before the ``n+1``-th anchored step; when there is none, after the
    ``n``-th and the ``wait_group 0`` that stays with a product (its result may be what the copy's
    neighbours read); with no anchored step before it, right after the trip's first ``Wait``."""
    at = [i for i, st in enumerate(body) if isinstance(st, ANCHORED) and
          not (isinstance(st, Mma) and st.which == "prev")]
    if n < len(at):
        i = at[n]
    elif n:
        i = at[n - 1] + 1
        if isinstance(body[i - 1], Mma) and i < len(body) and body[i] == MmaWait(0):
            i += 1
    else:
        i = next(k for k, st in enumerate(body) if isinstance(st, Wait) and st.bar == "full") + 1
    return body[:i] + (step,) + body[i:]


def tile_write(tile: str) -> tuple[Step, ...]:
    """A register tile stored to shared memory for a wgmma: every consumer meets first (each has
    drained its wgmmas, so none still reads the tile's previous contents), writes its rows and
    fences them for the async proxy, and every consumer meets again (all rows written) before
    any wgmma reads the tile."""
    return (ConsumerSync(), TileWrite(tile), ConsumerSync())


def written_loop(plan: LoopPlan) -> tuple[Step, ...]:
    """A trip that writes shared tiles from registers (``plan.writes``) before some of its
    products: each product is drained right after it is issued (wait_group 0), so no group is
    in flight at the next write, and the stage is released at the end of the trip."""
    r = plan.ring
    body: list[Step] = [Wait(r, "full")]
    reads = plan.tile_reads or ((),) * len(plan.mmas)
    for k, (rings, tiles) in enumerate(zip(plan.mmas, reads)):
        for at, tile in plan.writes:
            if at == k:
                body += tile_write(tile)
        body += [Mma(rings, tiles=tiles), MmaWait(0)]
    for at, tile in plan.writes:
        if at >= len(plan.mmas):
            body += tile_write(tile)
    body += [Release(r), Advance(r)]
    return (IfTrips(r, (Loop(r, with_reads(tuple(body), plan)),)),)


def pipelined_loop(plan: LoopPlan) -> tuple[Step, ...]:
    """Level-2 software pipelining (FlashAttention-3's overlap) of a trip with two products, the
    second reading registers the first's result made: trip j waits for its stage, issues the
    first product (S_j), then the previous trip's second one (P_{j-1}·V_{j-1}, reading the previous
    stage), waits for S_j alone (wait_group 1; wait_group 0 on the first trip, which has no
    second product in flight), runs its register work under the second product, waits for it
    and releases the previous stage. After the loop the last trip's second product runs alone.
    Each stage is released once both of its products are done with it. A ring tile the trip
    reads into registers (``plan.copies``) is read before the first product when it comes before
    it in the trip, else with the register work (``interleave.pipelined_trip``): both while the
    current stage is held."""
    r = plan.ring
    first, second = plan.mmas
    before, after = reads_around(plan)
    body = (Wait(r, "full"), *_turn(plan, TurnWait()), *before, Mma(first), NotFirst((Mma(second, "prev"),)),
            *_turn(plan, TurnPass()), First((MmaWait(0),)), NotFirst((MmaWait(1),)),
            *after, NotFirst((MmaWait(0), Release(r, "prev"))), Advance(r))
    return (IfTrips(r, (Loop(r, body), Mma(second, "prev"), MmaWait(0), Release(r, "prev"))),)


def _turn(plan: LoopPlan, step) -> tuple:
    return (step,) if plan.turns else ()


def split_loop(plan: LoopPlan) -> tuple[Step, ...]:
    """Level 2 over two rings (``plan.split``: the second product's, e.g. V beside K): trip j
    waits for its first-ring stage, issues the first product, then the previous trip's second
    (reading the second ring's previous stage), waits for the first alone and releases its
    stage at once (the producer refills it a whole trip ahead), runs the register work under
    the second product, waits for it and releases the second ring's previous stage, and waits
    for its own second-ring stage (read by the next trip's held product). So a 2-stage ring
    keeps its refill distance under level 2 (FlashAttention-3's separate K and V barriers)."""
    r, v = plan.ring, plan.split
    first, second = plan.mmas
    body = (Wait(r, "full"), *_turn(plan, TurnWait()), Mma(first), NotFirst((Mma(second, "prev"),)),
            *_turn(plan, TurnPass()), First((MmaWait(0),)), NotFirst((MmaWait(1),)), Release(r),
            NotFirst((MmaWait(0), Release(v, "prev"))), Wait(v, "full"), Advance(r), Advance(v))
    return (IfTrips(r, (Loop(r, body), Mma(second, "prev"), MmaWait(0), Release(v, "prev"))),)


def pingpong_consumer(plan: LoopPlan, stages: int) -> tuple[Step, ...]:
    """Ping-pong: consumer c of N computes the CTA's tiles c, c + N, ... whole. Before a tile it
    skips the stages of the tile before it (read by the consumer of that tile) and waits for its
    turn; it issues its K loop's wgmmas, hands the turn on while the last group is in flight (so
    the next consumer's wgmmas start while this one drains and stores its tile), then drains and
    releases. The turn is handed on and awaited even when the loop has no trips, so the chain of
    turns never breaks; each fill is read, and released, by one consumer (empty count 1). The
    hand-over sits in both branches of one IfTrips, so no path from a wgmma to the epilogue
    skips the drain (ptxas would serialize the wgmmas: C7517)."""
    r = plan.ring
    (ifloop,) = consumer_loop(plan, stages)
    loop, *tail = ifloop.body
    hand_on = IfNextTile((TurnPass(),))
    return (Tiles((IfPrevTile((SkipTrips(r), TurnWait())),
                   IfTrips(r, (loop, hand_on, *tail), orelse=(hand_on,))), alternate=True),)


def own_trips_consumer(steps: tuple[Step, ...], ring: str) -> tuple[Step, ...]:
    """A ring loop whose consumers run their own trips (the own-trips pass): the loop, its drain
    and release over the consumer's own trips only (``part`` "own"), then the tile's remaining
    trips idle: wait for the stage's fill (so that the release counts toward this fill, not the
    previous one, which another consumer may still be reading), release it at once, advance. The
    producer fills every trip as before, so it never waits for a release that does not come."""
    out: list[Step] = []
    for st in steps:
        if isinstance(st, IfTrips) and st.ring == ring and st.part == "all" and not st.orelse:
            loop, *drain = st.body
            out += [IfTrips(ring, (replace(loop, part="own"), *drain), part="own"),
                    Loop(ring, (Wait(ring, "full"), Release(ring), Advance(ring)), part="rest")]
        elif isinstance(st, Tiles):
            out.append(replace(st, body=own_trips_consumer(st.body, ring)))
        else:
            out.append(st)
    return tuple(out)


def consumer_staging(item: StagingReuse, store: "StoreItem | None" = None) -> tuple[Step, ...]:
    """Every consumer must be done with the rings before any of them writes over them (and, with
    ``store``, the staged store that writes its staging there comes between)."""
    end = StagingRead if item.read else StagingEnd
    return (ConsumerSync(), *(StagingBegin(r) for r in item.rings),
            *((staged_store(store),) if store is not None else ()),
            *(end(r) for r in item.rings))


def reads_ring(step: Step, ring: str) -> bool:
    """Whether ``step`` is, or holds, a wgmma group reading ``ring``."""
    if isinstance(step, Mma):
        return ring in step.rings
    return any(reads_ring(st, ring) for st in (*getattr(step, "body", ()), *getattr(step, "orelse", ())))


def release_early(cons: list[Step], ring: str) -> bool:
    """Release the one-shot ``ring`` right after the tile's last step that reads it (drained:
    ``MmaWait(0)``), not at the end of the tile; False where no step reads it."""
    last = max((i for i, st in enumerate(cons) if reads_ring(st, ring)), default=None)
    if last is None:
        return False
    cons[last + 1:last + 1] = [MmaWait(0), Release(ring), Advance(ring)]
    return True


def standard_protocol(kernel: str, consumers: int, persistent: bool, rings: tuple[Ring, ...],
                      items: tuple[Item, ...], pingpong: bool = False, cluster: int = 1,
                      early: tuple[str, ...] = (), producer: bool = True) -> Protocol:
    """The producer/consumer programs for one tile's ``items``, in program order.

    One-shot rings are filled at their place and released at the end of the tile (after the
    consumers drained every wgmma); loop rings follow ``producer_fill`` and ``consumer_loop``.
    ``pingpong``: one pipelined loop, its consumers alternating over whole tiles
    (``pingpong_consumer``). ``cluster`` 2: a multicast pair (some rings' ``cluster`` is 2): both
    programs start with ``ClusterSync("start")``, the consumers' ends with ``ClusterSync("exit")``.
    ``early``: one-shot rings released right after the tile's last product reading them
    (``release_early``; the mbarrier pass's ``release=early``), so a persistent producer loads the
    next tile's copy under the rest of this tile (its epilogue) even with one slot."""
    by_name = {r.name: r for r in rings}
    stores = [item for item in items if isinstance(item, StoreItem)]
    if pingpong:
        loops = [item for item in items if isinstance(item, LoopPlan)]
        if len(loops) != 1 or len(items) != 1 + len(stores):
            raise ValueError("ping-pong consumers follow one pipelined loop and nothing else per tile")
        ring = by_name[loops[0].ring]
        (tiles,) = pingpong_consumer(loops[0], ring.stages)
        at = items.index(loops[0])  # staged stores before the loop come after the turn's wait
        before = tuple(staged_store(item) for item in items[:at])
        after = tuple(staged_store(item) for item in items[at + 1:])
        prev, if_trips = tiles.body
        tiles = Tiles((prev, *before, if_trips, *after), alternate=True)
        return Protocol(kernel, consumers, persistent, rings,
                        *paired((Tiles((Loop(ring.name, producer_fill(ring)),)),), with_drain((tiles,), items),
                                cluster))
    prod: list[Step] = []
    cons: list[Step] = []
    for n, item in enumerate(items):
        if isinstance(item, OneShotUse):
            prod.extend(producer_fill(by_name[item.ring]))
            cons.append(Wait(item.ring, "full"))
        elif isinstance(item, LoopPlan):
            fills = producer_fill(by_name[item.ring])
            if item.split:
                fills += producer_fill(by_name[item.split])
            prod.append(Loop(item.ring, fills))
            cons.extend(loop_stores(consumer_loop(item, by_name[item.ring].stages), item))
        elif isinstance(item, SplitReduce):
            cons.append(ClusterReduce(item.ring, item.ctas))
        elif isinstance(item, StreamKUnits):
            cons.append(StreamKFixup(item.ring))
        elif isinstance(item, TileProduct):
            cons += [Mma(item.rings), MmaWait(0)]
        elif isinstance(item, ScratchUse):
            cons.append(ScratchSync(item.ops))
        elif isinstance(item, FillUse):
            cons.append(CopyFill(item.tile, item.wait))
        elif isinstance(item, FillWaitUse):
            cons.append(FillWait(item.tiles))
        elif isinstance(item, ExchangeUse):
            first = not any(isinstance(st, ClusterExchange) for st in cons)
            cons.append(ClusterExchange(item.op, item.ctas, first))
        elif isinstance(item, StoreItem):
            if not (n and isinstance(items[n - 1], StagingReuse)):
                cons.append(staged_store(item))
        else:
            follows = items[n + 1] if n + 1 < len(items) and isinstance(items[n + 1], StoreItem) else None
            cons.extend(consumer_staging(item, follows))
    one_shots = [item.ring for item in items if isinstance(item, OneShotUse)]
    last = [st for st in cons if not isinstance(st, StagedStore)]
    if any(isinstance(item, StreamKUnits) for item in items) and \
            (one_shots or not isinstance(last[-1], StreamKFixup)):
        raise ValueError("stream-K's fix-up must be the tile's last consumer step but its staged stores: "
                         "a contribution ends its tile there")
    one_shots = [name for name in one_shots if not (name in early and release_early(cons, name))]
    if one_shots:
        cons.append(MmaWait(0))
        for name in one_shots:
            cons += [Release(name), Advance(name)]
    prod_prog, cons_prog = paired((Tiles(tuple(prod)),), (Tiles(tuple(cons)),), cluster)
    exchanges = sum(isinstance(item, ExchangeUse) for item in items)
    if exchanges:  # the exchanges' mbarriers, published by a cluster barrier (ClusterArrive)
        if producer:  # (``producer`` False: warp-spec gave the kernel none, no thread runs its program)
            prod_prog = (ClusterArrive(), *prod_prog, ClusterWait())
        cons_prog = (ClusterArrive(exchanges), *cons_prog)
    for item in stores:
        if item.deferred:
            cons_prog = defer_store(cons_prog, item)
    return Protocol(kernel, consumers, persistent, rings, prod_prog, with_drain(cons_prog, items))


def paired(prod_prog: tuple[Step, ...], cons_prog: tuple[Step, ...], cluster: int):
    """The programs of a multicast pair (``cluster`` 2): both start with ``ClusterSync("start")``
    (no CTA multicasts into its peer or arrives on the peer's barriers before the peer initialized
    them), the consumers' ends with ``ClusterSync("exit")`` (no CTA exits while its peer may still
    do so); ping-pong consumers' programs too (until session 16 their branch returned before this,
    and the pair ran without either sync: pairs.py)."""
    if cluster > 1:
        return (ClusterSync("start"), *prod_prog), (ClusterSync("start"), *cons_prog, ClusterSync("exit"))
    return prod_prog, cons_prog


def loop_stores(steps: tuple[Step, ...], plan: LoopPlan) -> tuple[Step, ...]:
    """A ring loop's consumer steps with the trip's staged stores (``plan.stores``) placed in
    its (flat) trip."""
    if not plan.stores:
        return steps
    (if_trips,) = steps
    loop, *tail = if_trips.body
    body = loop.body
    for n, item in plan.stores:
        body = place_anchored(body, n, staged_store(item))
    return (IfTrips(if_trips.ring, (Loop(loop.ring, body, loop.min_trips, loop.part), *tail),
                    if_trips.orelse, if_trips.part),)
