"""PTX from a synchronization protocol (tkjit/passes/sync_protocol.py): each role's program is
walked step by step, so the emitted kernel is the protocol the CPU checker explored.

A ``RoleEmitter`` keeps, per ring, the stage index ``s`` and phase bit ``ph`` in registers (both
start at 0 and carry over from tile to tile), the ring's trip count and, inside a loop, its trip
counter. Steps with a fixed meaning (waits, arrivals, advancing, loops) are emitted here from a
table; what depends on the kernel -- the TMA boxes of a stage, the wgmma group, what happens at
the start and end of each tile -- is left to subclasses (``tma_load``, ``mma``, ``tile_begin``,
``tile_end``, ``next_tile``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...passes.sync_protocol import (Advance, ClusterArrive, ClusterSync, ClusterWait, ExpectTx, First, IfNextTile, IfPrevTile, IfTrips, Loop, Mma,
                                     MmaWait, NotFirst, Protocol, Release, Reset, Ring, SkipTrips,
                                     TmaLoad, Tiles, TurnPass, TurnWait, Wait)
from . import mbarrier, wgmma
from .builder import Builder

PTX_VERSION = "8.0"
ARCH = "sm_90a"
SMEM_SYMBOL = "tk_smem"
"""The dynamic shared memory every Hopper kernel addresses (aligned up to 1 KB in its prologue)."""


@dataclass
class RingRegs:
    """A ring as one role sees it: barrier bases (shared addresses) and its stage/phase."""

    ring: Ring
    full: str
    empty: str
    s: str
    ph: str
    trips: str
    counter: str | None = None
    """The current trip index while inside the ring's loop."""
    first: str | None = None
    """Split-K: this CTA's first trip of the tile's (its loop variable is lo + (first + counter)
    * step); None: trip 0."""


class RoleEmitter:
    """Emits one role's program. Before ``emit``, a subclass sets ``rings`` (the role's view of
    every ring) and ``leader``: the predicate of the one thread that arrives on barriers for the
    whole role (None: every executing thread is the leader)."""

    def __init__(self, b: Builder, proto: Protocol):
        self.b = b
        self.proto = proto
        self.rings: dict[str, RingRegs] = {}
        self.leader: str | None = None
        self.peer: str | None = None
        """The peer CTA's rank in a cluster whose rings are multicast (``Ring.cluster`` > 1)."""
        self.nonzero: set[str] = set()
        self.table = {Wait: self.wait, ExpectTx: self.expect_tx, TmaLoad: self.tma_load, Mma: self.mma,
                      MmaWait: self.mma_wait, Release: self.release, Advance: self.advance,
                      Reset: self.reset, Tiles: self.tiles, Loop: self.loop, IfTrips: self.if_trips,
                      NotFirst: self.not_first, First: self.first_trip, IfPrevTile: self.if_prev_tile,
                      IfNextTile: self.if_next_tile, SkipTrips: self.skip_trips,
                      TurnWait: self.turn_wait, TurnPass: self.turn_pass, ClusterSync: self.cluster_sync,
                      ClusterArrive: self.cluster_arrive, ClusterWait: self.cluster_wait}

    marks = False
    """Bracket each event step's PTX with ``// step: <text>`` ... ``// end step`` comments (the
    general lowering does: tests/test_general_lowering.py lints that every barrier, mbarrier and
    wgmma/bulk-copy wait in its PTX is printed by a protocol step)."""

    def emit(self, steps) -> None:
        for step in steps:
            fn = self.table.get(type(step))
            if fn is None:
                raise NotImplementedError(f"the Hopper emitter has no PTX for protocol step "
                                          f"{type(step).__name__} ({step.text()})")
            if self.marks and not hasattr(step, "body"):
                self.b(f"// step: {step.text()}")
                fn(step)
                self.b("// end step")
            else:
                fn(step)

    # -- addresses ------------------------------------------------------------------------
    def bar(self, ring: RingRegs, which: str, stage: str | None = None) -> str:
        base = ring.full if which == "full" else ring.empty
        addr = self.b.reg()
        self.b(f"mad.lo.u32 {addr}, {stage or ring.s}, 8, {base};")
        return addr

    # -- events ---------------------------------------------------------------------------
    def descriptor(self, addr: str, op: wgmma.Operand) -> str:
        """The wgmma descriptor of ``op`` at shared address ``addr`` (a register): the address
        field from the register, the rest (LBO, SBO, swizzle) the operand's constant."""
        b = self.b
        enc, desc = b.reg(), b.reg("b64")
        b(f"bfe.u32 {enc}, {addr}, 4, 14;", f"cvt.u64.u32 {desc}, {enc};",
          f"or.b64 {desc}, {desc}, {op.constant:#x};")
        return desc

    def at(self, desc: str, nbytes: int) -> str:
        """Descriptor ``desc`` moved ``nbytes`` on (a k-step or slab within the tile)."""
        if nbytes == 0:
            return desc
        d = self.b.reg("b64")
        self.b(f"add.s64 {d}, {desc}, {wgmma.encode_field(nbytes)};")
        return d

    def wait(self, step: Wait) -> None:
        r = self.rings[step.ring]
        parity = r.ph
        if step.flip:
            parity = self.b.reg()
            self.b(f"xor.b32 {parity}, {r.ph}, 1;")
        self.b(*mbarrier.wait_parity(self.bar(r, step.bar), parity, self.b.pred(),
                                     self.b.label(f"wait_{step.bar}")))

    def expect_tx(self, step: ExpectTx) -> None:
        r = self.rings[step.ring]
        self.b(self.leading(mbarrier.arrive_expect_tx(self.bar(r, "full"), step.nbytes)))

    def mma_wait(self, step: MmaWait) -> None:
        self.b(wgmma.wait(step.pending))

    def release(self, step: Release) -> None:
        r = self.rings[step.ring]
        stage = self.stage_before(r) if step.which == "prev" else r.s
        bar = self.bar(r, "empty", stage)
        self.b(self.leading(mbarrier.arrive(bar)))
        if r.ring.cluster > 1:  # the peer's producer refills this stage in both CTAs too
            mapa, arrive = mbarrier.arrive_peer(self.b.reg(), bar, self.peer)
            self.b(mapa, self.leading(arrive))

    def cluster_sync(self, step: ClusterSync) -> None:
        """barrier.cluster (release/acquire): every non-exited thread of the cluster meets; the
        role's threads run it together (``.aligned``)."""
        self.b("barrier.cluster.arrive.release.aligned;", "barrier.cluster.wait.acquire.aligned;")

    def cluster_arrive(self, step: ClusterArrive) -> None:
        """A cluster split (lower_cluster.py): every thread of the role arrives, relaxed, on the
        cluster barrier publishing the exchanges' mbarrier inits (the consumers' role prints its
        inits with it)."""
        self.b("barrier.cluster.arrive.relaxed.aligned;")

    def cluster_wait(self, step: ClusterWait) -> None:
        """The wait of that arrival (every thread that arrived; not ``.aligned``: the producer
        prints it predicated at the kernel's exit, ``ProducerRole.finish``)."""
        self.b("barrier.cluster.wait.acquire;")

    def stage_before(self, r: RingRegs) -> str:
        """A register holding the stage before ``r``'s current one (s - 1 mod stages)."""
        stage, first = self.b.reg(), self.b.pred()
        self.b(f"add.s32 {stage}, {r.s}, -1;", f"setp.eq.s32 {first}, {r.s}, 0;",
               f"@{first} mov.b32 {stage}, {r.ring.stages - 1};")
        return stage

    def advance(self, step: Advance) -> None:
        r = self.rings[step.ring]
        wrap = self.b.pred()
        self.b(f"add.s32 {r.s}, {r.s}, 1;", f"setp.eq.s32 {wrap}, {r.s}, {r.ring.stages};",
               f"@{wrap} mov.b32 {r.s}, 0;")
        if step.per == "wrap":
            self.b(f"@{wrap} xor.b32 {r.ph}, {r.ph}, 1;")
        else:
            self.b(f"xor.b32 {r.ph}, {r.ph}, 1;")

    def skip_trips(self, step: SkipTrips) -> None:
        """Advance past the previous tile's trips -- every tile has the ring's trip count (no
        split-K with alternating consumers): s += trips mod stages, ph flips once per wrap."""
        r = self.rings[step.ring]
        total, wraps, whole = self.b.reg(), self.b.reg(), self.b.reg()
        self.b(f"add.s32 {total}, {r.s}, {r.trips};", f"div.u32 {wraps}, {total}, {r.ring.stages};",
               f"mul.lo.u32 {whole}, {wraps}, {r.ring.stages};", f"sub.s32 {r.s}, {total}, {whole};",
               f"and.b32 {wraps}, {wraps}, 1;", f"xor.b32 {r.ph}, {r.ph}, {wraps};")

    def reset(self, step: Reset) -> None:
        r = self.rings[step.ring]
        self.b(f"mov.b32 {r.s}, 0;", f"mov.b32 {r.ph}, 0;")

    def leading(self, line: str) -> str:
        return f"@{self.leader} {line}" if self.leader else line

    # -- structure ------------------------------------------------------------------------
    def tiles(self, step: Tiles) -> None:
        top, end = self.b.label("tile"), self.b.label("tiles_done")
        self.first_tile()
        self.b.place(top)
        done = self.b.pred()
        self.b(f"setp.ge.s32 {done}, {self.tile}, {self.tile_count};", f"@{done} bra {end};")
        self.tile_begin()
        self.emit(step.body)
        self.tile_end()
        self.next_tile()
        self.b(f"bra.uni {top};")
        self.b.place(end)

    def loop(self, step: Loop) -> None:
        if step.part == "rest":  # a consumer's idle trips: only the consumers emit those
            raise NotImplementedError(f"this role has no per-consumer trip counts ({step.head()})")
        r = self.rings[step.ring]
        outer = r.counter
        r.counter = self.b.reg()
        top, end = self.b.label(f"{step.ring}_loop"), self.b.label(f"{step.ring}_done")
        self.b(f"mov.b32 {r.counter}, 0;")
        at_least_once = step.min_trips > 0 or step.ring in self.nonzero
        if not at_least_once:
            skip = self.b.pred()
            self.b(f"setp.ge.s32 {skip}, {r.counter}, {r.trips};", f"@{skip} bra {end};")
        self.b.place(top)
        self.trip(step)
        again = self.b.pred()
        self.b(f"add.s32 {r.counter}, {r.counter}, 1;", f"setp.lt.s32 {again}, {r.counter}, {r.trips};",
               f"@{again} bra {top};")
        self.b.place(end)
        r.counter = outer

    def if_trips(self, step: IfTrips) -> None:
        r = self.rings[step.ring]
        skip, end = self.b.pred(), self.b.label(f"{step.ring}_none")
        self.b(f"setp.lt.s32 {skip}, {r.trips}, 1;", f"@{skip} bra {end};")
        self.nonzero.add(step.ring)
        self.emit(step.body)
        self.nonzero.discard(step.ring)
        if step.orelse:
            done = self.b.label(f"{step.ring}_some")
            self.b(f"bra.uni {done};")
            self.b.place(end)
            self.emit(step.orelse)
            self.b.place(done)
            return
        self.b.place(end)

    def if_prev_tile(self, step: IfPrevTile) -> None:
        self.guarded(self.has_prev_tile(), step.body, "no_prev_tile")

    def if_next_tile(self, step: IfNextTile) -> None:
        self.guarded(self.has_next_tile(), step.body, "no_next_tile")

    def guarded(self, pred: str, body, what: str) -> None:
        end = self.b.label(what)
        self.b(f"@!{pred} bra {end};")
        self.emit(body)
        self.b.place(end)

    def not_first(self, step: NotFirst) -> None:
        self.on_trip(step, "eq", "first_trip")

    def first_trip(self, step: First) -> None:
        """``First``: the body on the loop's first trip only."""
        self.on_trip(step, "ne", "later_trip")

    def on_trip(self, step, skip_if: str, label: str) -> None:
        """``step``'s body, skipped when the innermost loop's counter compares ``skip_if`` 0."""
        counters = [r.counter for r in self.rings.values() if r.counter is not None]
        skip, end = self.b.pred(), self.b.label(label)
        self.b(f"setp.{skip_if}.s32 {skip}, {counters[-1]}, 0;", f"@{skip} bra {end};")
        self.emit(step.body)
        self.b.place(end)

    # -- what the kernel fills in ---------------------------------------------------------
    tile: str
    tile_count: str

    def first_tile(self) -> None:
        raise NotImplementedError

    def next_tile(self) -> None:
        raise NotImplementedError

    def tile_begin(self) -> None:
        pass

    def trip(self, step: Loop) -> None:
        """One trip of ``step``'s loop (its counter in ``rings[ring].counter``): its steps."""
        self.emit(step.body)

    def has_prev_tile(self) -> str:
        raise NotImplementedError("this role does not alternate tiles")

    def has_next_tile(self) -> str:
        raise NotImplementedError("this role does not alternate tiles")

    def turn_wait(self, step: TurnWait) -> None:
        raise NotImplementedError(f"this role takes no turns ({step.text()})")

    def turn_pass(self, step: TurnPass) -> None:
        raise NotImplementedError(f"this role takes no turns ({step.text()})")

    def tile_end(self) -> None:
        pass

    def tma_load(self, step: TmaLoad) -> None:
        raise NotImplementedError(f"this role issues no TMA loads ({step.text()})")

    def mma(self, step: Mma) -> None:
        raise NotImplementedError(f"this role issues no wgmma ({step.text()})")


def module_text(what: str, name: str, entries, maps, plan, body: list[str], *, cluster: int = 1,
                globals_: list[str] | tuple[str, ...] = (), version: str = PTX_VERSION) -> str:
    """The PTX module of one Hopper kernel: header (``what``: the program and the engines it uses),
    ``.global`` declarations, the entry with its
    parameters (``entries``' launch ABI, then the tensor maps), thread and register bounds, a
    cluster shape where the kernel forms clusters, and ``body`` (``version``: the PTX ISA, 8.1 where
    the body stores with st.async)."""
    params = [f"  .param {t} {param}" for t, param, _ in entries]
    params += [f"  {m.declaration()}" for m in maps]
    lines = [f"// tkjit: kernel '{name}', Hopper {what}",
             f".version {version}", f".target {ARCH}", ".address_size 64", "",
             f".extern .shared .align 1024 .b8 {SMEM_SYMBOL}[];", *globals_, "",
             f".visible .entry {name}(", ",\n".join(params), ")",
             f".reqntid {plan.threads}, 1, 1"]
    if not plan.registers_free:  # (reg-budget: a kernel with no setmaxnreg may leave them to ptxas)
        lines += [".minnctapersm 1", f".maxnreg {plan.maxnreg}"]
    if cluster > 1:  # the launch forms clusters from this alone (no launch attribute)
        lines.append(f".reqnctapercluster {cluster}, 1, 1")
    return "\n".join([*lines, "{", *body, "}"]) + "\n"
