"""The async schedule as IR: roles, rings and protocol steps (the ``async-schedule`` pass).

After the Hopper scheduling passes, ``passes/async_schedule.py`` rewrites a kernel into

    ring {name = "k", stages = 4, boxes = "a,b", box_bytes = [16384, 16384], expect_tx = 32768, empty_arrivals = 2};
    producer {
      tiles {
        ring_loop {ring = "k"} {
          ring_wait {ring = "k", bar = "empty", flip = 1}
          expect_tx {ring = "k", nbytes = 32768}
          tma_load {ring = "k", load = "a"}
          ...
    consumers {count = 2, persistent = true} {
      tile_loop
      blocks %nm, %nn { ^(%m: i32, %n: i32):
        if_trips {ring = "k", anchored = true} { for_trips {ring = "k"}  mma_wait {pending = 0} ... } { }
        %acc = for ... { ^(%k: i32, %c: ...):
          ring_wait {ring = "k", bar = "full"}
          %a = load {ring = "k", box = "a"} ...
          mma_issue {rings = "k", anchored = true}
          %c2 = mma_AB %a, %b, %c : ...
          ...

One op class per step of the mbarrier pass's protocol (``passes/sync_protocol.py``): ``STEP`` is
that class, and the op's attributes are its fields (a tuple of names is one comma-separated
string; a field left at its default is not printed). A step with a body (``tiles``,
``ring_loop``, ``if_trips``, ``not_first``, ...) holds it as a region; ``if_trips`` has a second
region, what runs when the loop has no trip. ``anchored = true``: the step stands for the next op
of its block that is not one of these (the IR op the emitter prints with it: a one-shot tile's
load, a ring loop's ``for``, a product's ``mma_*``, a ring tile's ``copy`` into registers, a
staged store), as ``codegen/hopper/interleave.py`` places it. Three ops are the IR's own:
``tile_loop`` (the consumers' ``Tiles`` step: its body is the next ``blocks`` op's), ``for_trips``
(in an ``if_trips``: the ring's ``Loop`` step, whose trips are the body of the ``for`` the
``if_trips`` stands for) and ``mma_hold`` (level 2: the next op, the trip's second product, is
held and issued by the next trip's ``mma_issue {which = "prev"}``). ``producer`` and ``consumers`` are the roles; ``ring``
declares a ring (``sync_protocol.Ring``). Every op here has no operands and no results: the
schedule names rings, boxes and stores, and the tile ops between the steps keep their SSA values.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..core import Op

NAMES = "names"
"""A field that is a tuple of names: one comma-separated string attribute."""
BODIES = ("body", "orelse")


def protocol():
    """``passes/sync_protocol.py`` (imported when first needed: that package imports the IR)."""
    from ...passes import sync_protocol
    return sync_protocol


class AsyncOp(Op):
    """Base of the async schedule's ops: no operands, no results, attributes only."""

    NUM_RESULTS = 0
    SEMICOLON = True
    """Printed with a trailing ``;`` when it has no region (ir.lark)."""

    def infer(self):
        return []


class StepOp(AsyncOp):
    """One protocol step (``sync_protocol.<STEP>``); attributes are its fields (``FIELDS``: name ->
    type, ``NAMES`` for a tuple of names; those in ``OPTIONAL`` have defaults), regions its bodies.
    tests/test_async_schedule.py checks these against the protocol's dataclasses."""

    STEP: ClassVar[str] = ""
    FIELDS: ClassVar[dict] = {}
    OPTIONAL: ClassVar[frozenset] = frozenset()
    NAMES: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        cls.ATTRS = {k: (str if t == NAMES else t) for k, t in cls.FIELDS.items()} | {"anchored": bool}
        cls.OPTIONAL_ATTRS = cls.OPTIONAL | {"anchored"}
        cls.NAMES = frozenset(k for k, t in cls.FIELDS.items() if t == NAMES)

    @classmethod
    def step_class(cls) -> type:
        return getattr(protocol(), cls.STEP)

    @classmethod
    def attrs_of(cls, step) -> dict:
        """The attributes of ``step`` (fields at their default left out)."""
        out = {}
        for f in dataclasses.fields(step):
            if f.name in BODIES:
                continue
            value = getattr(step, f.name)
            if f.default is not dataclasses.MISSING and value == f.default:
                continue
            out[f.name] = ",".join(value) if f.name in cls.NAMES else value
        return out

    def fields(self) -> dict:
        """The step's fields from the attributes (a body is the caller's)."""
        out = {}
        for key, value in self.attrs.items():
            if key == "anchored":
                continue
            out[key] = tuple(x for x in value.split(",") if x) if key in self.NAMES else value
        return out


def _step(name: str, step: str, doc: str, fields: dict | None = None, optional: tuple = (),
          regions: int = 0) -> type[StepOp]:
    return type("".join(p.capitalize() for p in name.split("_")) + "Op", (StepOp,),
                {"NAME": name, "STEP": step, "__doc__": doc, "__module__": __name__, "FIELDS": fields or {},
                 "OPTIONAL": frozenset(optional), "NUM_REGIONS": regions})


RING = {"ring": str}
STORE = {"store": str}
STEP_OPS: tuple[type[StepOp], ...] = (
    _step("ring_wait", "Wait", "``ring_wait {ring, bar, flip}``: spin on bar[s] (full or empty) with parity ph ^ flip.",
          {"ring": str, "bar": str, "flip": int}, ("flip",)),
    _step("expect_tx", "ExpectTx", "``expect_tx {ring, nbytes}``: arrive.expect_tx on full[s] with the stage's bytes.",
          {"ring": str, "nbytes": int}),
    _step("tma_load", "TmaLoad", "``tma_load {ring, load}``: the TMA copy of the load marked "
          "``{ring, box}`` into stage s, completing on full[s].", {"ring": str, "load": str}),
    _step("mma_issue", "Mma", "``mma_issue {rings, which, tiles, held}``: one committed wgmma group reading "
          "stage s (which = prev: the stage before) of the rings, and consumer-written tiles (held: its "
          "register A copied into held registers first).",
          {"rings": NAMES, "which": str, "tiles": NAMES, "held": bool}, ("which", "tiles", "held")),
    _step("ring_read", "Read", "``ring_read {rings}``: the consumers read stage s of the rings' tile into "
          "registers (ld.shared; the next op, a copy of a ring tile); done before the stage's release.",
          {"rings": NAMES}),
    _step("mma_wait", "MmaWait", "``mma_wait {pending}``: wgmma.wait_group pending.", {"pending": int}),
    _step("ring_release", "Release", "``ring_release {ring, which}``: arrive on empty[s] (or the previous stage's).",
          {"ring": str, "which": str}, ("which",)),
    _step("ring_advance", "Advance", "``ring_advance {ring}``: next stage, ph flips on wrap.",
          {"ring": str, "per": str}, ("per",)),
    _step("ring_reset", "Reset", "``ring_reset {ring}``: s = 0, ph = 0.", RING),
    _step("consumer_sync", "ConsumerSync", "``consumer_sync``: bar.sync of every consumer warpgroup."),
    _step("scratch_sync", "ScratchSync", "``scratch_sync {ops}``: the consumers' bar.sync around the shared "
          "scratch of the next tile op's cross-warp reductions.", {"ops": NAMES}),
    _step("tile_write", "TileWrite", "``tile_write {tile}``: the consumers write a shared tile from "
          "registers and fence it for the async proxy.", {"tile": str}),
    _step("copy_fill", "CopyFill", "``copy_fill {tile, wait}``: the consumers fill a shared tile with cp.async, "
          "wait for their copies and meet on their named barrier (wait = false: the copies are only issued, "
          "a fill_wait lands them).", {"tile": str, "wait": bool}, ("wait",)),
    _step("fill_wait", "FillWait", "``fill_wait {tiles}``: cp.async.wait_all and the consumers' meeting for "
          "the tiles filled with their copies left in flight, before the first op reading one.", {"tiles": NAMES}),
    _step("staging_begin", "StagingBegin", "``staging_begin {ring}``: the epilogue's staging goes over the ring.", RING),
    _step("staging_end", "StagingEnd", "``staging_end {ring}``: its TMA store has read the staging.", RING),
    _step("staging_read", "StagingRead", "``staging_read {ring}``: the staging in the ring's one-shot slot: "
          "cp.async.bulk.wait_group.read 0 by the thread that releases the slot.", RING),
    _step("split_reduce", "ClusterReduce", "``split_reduce {ring, ctas}``: split-K's exchange of partials over the cluster.",
          {"ring": str, "ctas": int}),
    _step("stream_k_fixup", "StreamKFixup", "``stream_k_fixup {ring}``: stream-K's fix-up after the ring's loop.", RING),
    _step("cluster_sync", "ClusterSync", "``cluster_sync {at}``: barrier.cluster of a multicast pair (start or exit).",
          {"at": str}),
    _step("cluster_arrive", "ClusterArrive", "``cluster_arrive {exchanges}``: barrier.cluster.arrive.relaxed of every "
          "thread of the role (the consumers' first init the cluster exchanges' mbarriers).", {"exchanges": int},
          ("exchanges",)),
    _step("cluster_wait", "ClusterWait", "``cluster_wait``: the producer's barrier.cluster.wait.acquire, after its loads."),
    _step("cluster_exchange", "ClusterExchange", "``cluster_exchange {op, ctas, first}``: the push exchange of a row "
          "reduction's partials between the CTAs of a cluster (first: after the cluster barrier's wait).",
          {"op": str, "ctas": int, "first": bool}, ("first",)),
    _step("store_wait", "StoreWait", "``store_wait {pending}``: cp.async.bulk.wait_group.read pending (one thread).",
          {"pending": int}),
    _step("staging_sync", "StagingSync", "``staging_sync``: bar.sync of this consumer's own 4 warps."),
    _step("staging_write", "StagingWrite", "``staging_write {store, buffer}``: stmatrix a round into a staging "
          "buffer; fence.", {"store": str, "buffer": int}),
    _step("tma_store", "TmaStore", "``tma_store {store, buffer}``: one thread TMA-stores the buffer; commit_group.",
          {"store": str, "buffer": int}),
    _step("store_drain", "StoreDrain", "``store_drain``: every bulk store completed (cp.async.bulk.wait_group 0)."),
    _step("hold_store", "HoldStore", "``hold_store {store}``: the deferred epilogue keeps the tile in registers.", STORE),
    _step("skip_trips", "SkipTrips", "``skip_trips {ring}``: ping-pong: advance past the previous tile's trips.", RING),
    _step("turn_wait", "TurnWait", "``turn_wait {who}``: ping-pong: bar.sync on this consumer's turn barrier "
          "(who = first: consumer 0 only).", {"who": str}, ("who",)),
    _step("turn_pass", "TurnPass", "``turn_pass {who}``: ping-pong: bar.arrive on the next consumer's turn "
          "barrier (who = last: the last consumer only).", {"who": str}, ("who",)),
    _step("tiles", "Tiles", "``tiles {alternate} { ... }``: the producer's tile loop.", {"alternate": bool},
          ("alternate",), 1),
    _step("if_prev_tile", "IfPrevTile", "``if_prev_tile { ... }``: only when the CTA handled a tile before.", regions=1),
    _step("if_next_tile", "IfNextTile", "``if_next_tile { ... }``: only when the CTA has a tile after this one.",
          regions=1),
    _step("ring_loop", "Loop", "``ring_loop {ring, min_trips, part} { ... }``: the ring's loop, steps only.",
          {"ring": str, "min_trips": int, "part": str}, ("min_trips", "part"), 1),
    _step("if_trips", "IfTrips", "``if_trips {ring, part} { ... } { else }``: only when the ring's loop runs.",
          {"ring": str, "part": str}, ("part",), 2),
    _step("not_first", "NotFirst", "``not_first { ... }``: from the loop's second trip on.", regions=1),
    _step("first_trip", "First", "``first_trip { ... }``: only on the loop's first trip.", regions=1),
    _step("staged_store", "StagedStore", "``staged_store {store} { rounds }``: the staged epilogue of a store.",
          STORE, regions=1),
    _step("if_held", "IfHeld", "``if_held {store} { ... }``: only when a tile of the store is held.", STORE, regions=1),
)
STEP_OP_NAMED: dict[str, type[StepOp]] = {cls.STEP: cls for cls in STEP_OPS}
"""The op of each protocol step, by the step's class name."""


class TileLoop(AsyncOp):
    """``tile_loop {alternate}``: the consumers' ``Tiles`` step; its body is the next ``blocks`` op's."""

    NAME = "tile_loop"
    ATTRS = {"alternate": bool}
    OPTIONAL_ATTRS = frozenset(ATTRS)


class ForTrips(AsyncOp):
    """``for_trips {ring, min_trips, part}`` (in an ``if_trips``): the ring's ``Loop`` step, its
    trips the body of the ``for`` that the ``if_trips`` stands for."""

    NAME = "for_trips"
    ATTRS = {"ring": str, "min_trips": int, "part": str}
    OPTIONAL_ATTRS = frozenset({"min_trips", "part"})


class MmaHold(AsyncOp):
    """``mma_hold``: level 2: the next op, the trip's second product, keeps its operands; the next
    trip's ``mma_issue {which = "prev"}`` (or the one after the loop) issues it."""

    NAME = "mma_hold"


class RingDecl(AsyncOp):
    """``ring {name, stages, boxes, box_bytes, expect_tx, empty_arrivals, ...}``: a ring of the
    protocol (``sync_protocol.Ring``; ``boxes``/``box_bytes``: its loads' names and bytes; its
    ``where`` is the span of its loop, or of its load when loaded once per tile)."""

    NAME = "ring"
    ATTRS = {"name": str, "stages": int, "boxes": str, "box_bytes": tuple, "expect_tx": int,
             "empty_arrivals": int, "full_arrivals": int, "one_shot": bool, "cluster": int}
    OPTIONAL_ATTRS = frozenset({"full_arrivals", "one_shot", "cluster"})


class ProducerRole(AsyncOp):
    """``producer { ... }``: the producer warpgroup's program."""

    NAME = "producer"
    NUM_REGIONS = 1


class ConsumerRoles(AsyncOp):
    """``consumers {count, persistent} { ... }``: the program of each of ``count`` consumer
    warpgroups, the tile ops of the kernel between its steps."""

    NAME = "consumers"
    ATTRS = {"count": int, "persistent": bool}
    NUM_REGIONS = 1


ASYNC_OPS = (*STEP_OPS, TileLoop, ForTrips, MmaHold, RingDecl, ProducerRole, ConsumerRoles)
