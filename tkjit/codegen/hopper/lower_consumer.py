"""The consumer warpgroups of the general lowering: the protocol's consumer program, with the
tile's IR ops emitted in order between its steps.

Warp ``v = 4c + w`` of the consumers (consumer ``c``, warp ``w`` of its warpgroup) runs the
register-tile backend's emitters on a warp grid of ``4C x 1`` warps whose rows interleave by
64-row slabs (``WarpGrid.slab_warps``): a register tile of ``64*S*C`` rows puts slab ``S*c + u``
in consumer ``c``, rows ``16w ..`` of it in warp ``w`` -- exactly where ``wgmma`` m64 leaves its
accumulator. So elementwise maps, broadcasts, row reductions (quad shuffles), ``cvt``, scalars
and vector loads/stores need no Hopper code. Here: the walk (the async-schedule IR's order of tile ops
and protocol steps, ``LoweredKernel.walk_items``; without it ``interleave.py``), ring loops with their carried values, level 2's held
product and peeled first trip, ping-pong turns and tiles, and ``mma_*`` -> one ``wgmma`` group
(SS, or RS with A in registers; the accumulator updated in place). Register tiles to and from
global memory: ``lower_fragments.py``; a register tile written to shared memory for a wgmma (the
protocol's ``TileWrite`` step): ``lower_shared_store.py``; what the consumers refuse:
``lower_checks.py``. The
protocol is the object the mbarrier pass checked; the IR is the pass pipeline's.
"""
from __future__ import annotations

from ...errors import NotAvailableError
from ...ir.core import Op
from ...ir.ops import MMA_OPS, For, Load, Store, Yield
from ...ir.types import TileType
from ...passes.hopper import is_shared
from ...passes.sync_protocol import (ClusterArrive, ClusterExchange, ClusterReduce, ConsumerSync, CopyFill, FillWait, HoldStore,
                                     IfHeld, IfTrips, Loop, Mma, Read,
                                     ScratchSync, StagedStore, StagingBegin, StagingEnd, StagingRead, StagingSync,
                                     StagingWrite, StoreDrain,
                                     StoreWait, StreamKFixup, TileWrite, TmaStore, Wait, all_steps)
from ..emit_control import fresh, moves, registers_of
from ..emit_reduce import combine_partial_sums
from ..padding import analyze_padding
from ..values import RegTile
from . import wgmma
from .interleave import body_ops, interleave, pipelined_trip, tile_anchor, trip_anchor
from .lower_checks import a_operand, b_operand, consumer_refusal, users_of, wgmma_n
from .lower_fragments import consumer_table
from .lower_producer import (bind_block_indices, bind_loop_index, load_stage_stride, ring_trips,
                             role_ctx, tile_walk_begin, tile_walk_next, walk_stride)
from .program import RingRegs, RoleEmitter

CONSUMER_BARRIER = 1
"""The named barrier of all consumer warpgroups (``ConsumerSync``); 0 is the CTA's, 2 + c
consumer c's staging (lower_epilogue.py)."""
FIRST_TURN_BARRIER = 6
"""Ping-pong: named barrier 6 + c is consumer c's turn on the tensor cores (at most 2 consumers)."""
TREE_REDUCTIONS = False
"""On: a consumer thread combines its elements of a row (column) pairwise, depth log2 n, instead
of in one dependent chain of n (the register-tile backend's order; a 64 x 176 score tile's
row_max is 44 FMNMX a row, each waiting on the last). Off by default: measured on the attention
example (H200, 2026-11-27, same run, general / template with the scale folded, pairwise vs chain;
benchmarks/results/2026-11-27-nvidia-h200-s11-attn-tree.json) it is faster causal at D = 128
(0.932/0.999/0.989/0.944/0.996 vs 0.916/0.970/0.961/0.934/0.980 at N = 1k..16k) but slower
without the mask (D = 128: 0.809-0.893 vs 0.845-0.921; D = 64: 0.796-0.944 vs 0.808-0.961), and
mixed at D = 64 causal; why is not profiled yet. benchmarks/attention_general.py's ``pin:``
variants time either setting against the default in one run."""

EDGE_REGIONS = True
"""On: an if branch whose reductions all mask padding at one limit (an attention trip's row_max
and row_sum under scale-fold's branch, after branch-tail) is emitted twice under one uniform
branch on that limit -- unmasked for a whole tile, masked at the edge -- instead of one branch
around each reduction, so each copy is one basic block that ptxas can interleave (row max,
scaled subtract, exp2, row sum). Off: one edge branch a reduction (``edge_branches``)."""


# -- the role -------------------------------------------------------------------------------
class ConsumerRole(RoleEmitter):
    marks = True

    def __init__(self, k):
        super().__init__(k.b, k.proto)
        self.k = k
        self.users = users_of(k.kernel)
        self.pingpong = k.proto.pingpong
        self.owners = 1 if self.pingpong else k.consumers
        """Consumers sharing each tile's rows: all of them, or one (ping-pong: whole tiles each)."""
        self.ctx = role_ctx(k, 4 * self.owners, slab_warps=4, pads=analyze_padding(k.kernel), grid=k.grid,
                            plan=k.scratch)
        if k.scratch.scratch:  # cross-warp reductions (lower_layout.py): the consumers' barrier
            from .lower_layout import ConsumerSharedSync
            self.ctx.sync = ConsumerSharedSync(k.consumers)
        self.ctx.label = k.b.label
        self.ctx.role = self
        self.ctx.emitters = consumer_table()
        self.ctx.edge_branched = []
        self.ctx.edge_regions = EDGE_REGIONS
        self.ctx.tree_reductions = TREE_REDUCTIONS
        self.ctx.reduced = []
        self.loop_of = {ring: loop for loop, ring in k.schedule.loop_of.items()}
        self.ring_of_load = {op: names[0] for op, names in k.schedule.load_of.items()}
        self.shared: dict[int, Load] = {}  # id(value) -> the ring load it reads
        self.carried_homes: list = []
        self.hoisted: set[int] = set()  # block-body scalars emitted once before the tile walk
        self.own = {}
        self.table[ConsumerSync] = self.consumer_sync
        self.table[FillWait] = self.fill_wait
        self.table[CopyFill] = self.copy_fill
        self.table[Mma] = self.deferred_mma  # anchored Mma steps go through anchored()
        self.table[StagingBegin] = self.table[StagingEnd] = lambda step: None  # nothing is staged
        self.table[StagingRead] = self.staging_read
        self.table[StreamKFixup] = self.stream_k_fixup  # (when no op reads the loop's result)
        # the staged epilogue (lower_epilogue.py): StagedStore/HoldStore stand for the IR store
        self.table.update({StoreWait: self.store_wait, StagingSync: self.staging_sync,
                           StagingWrite: self.staging_write, TmaStore: self.tma_store,
                           StoreDrain: self.store_drain, IfHeld: self.if_held})
        from .lower_cluster import ExchangeSteps
        self.exchanges = ExchangeSteps(self)  # a cluster split's steps (lower_cluster.py)
        self.held_homes: dict = {}  # a held product (Mma(held=True)) -> the registers of its A
        self.table[ClusterArrive] = self.exchanges.arrive
        self.epi = None  # the staged store being printed (lower_epilogue.EpilogueWalk)
        self.epilogue_step: dict = {}  # IR store -> its StagedStore/HoldStore, while it is emitted

    def run(self) -> None:
        k, b = self.k, self.b
        if k.regs is not None:
            b(f"setmaxnreg.inc.sync.aligned.u32 {k.regs[1]};")
        ctid, self.index = b.reg(), b.reg()
        shared_tid_wg = k.tid_wg
        if k.producer_threads not in (0, 128):  # a producer warp: the consumers' threads start after it
            b(f"sub.u32 {ctid}, {k.tid}, {k.producer_threads};", f"shr.u32 {self.index}, {ctid}, 7;")
            k.tid_wg = b.reg()  # a consumer thread's index in its warpgroup (restored below)
            b(f"and.b32 {k.tid_wg}, {ctid}, 127;")
        else:
            first = 1 if k.producer else 0  # warpgroup 0 is the producer's, where there is one
            b(f"sub.u32 {self.index}, {k.wg}, {first};")
            if self.pingpong:  # each consumer alone over its tiles' rows
                b(f"mov.u32 {ctid}, {k.tid_wg};")
            else:
                b(f"sub.u32 {ctid}, {k.tid}, {128 * first};")
        try:
            self.consumers_program(ctid)
        finally:
            k.tid_wg = shared_tid_wg

    def consumers_program(self, ctid: str) -> None:
        k, b, ctx = self.k, self.b, self.ctx
        self.share = b.mov(0) if self.pingpong else self.index
        """Which share of a tile's rows this consumer computes."""
        ctx._cache[("tid", "tid")] = ctid
        self.leader = b.pred()
        b(f"setp.eq.u32 {self.leader}, {k.tid_wg}, 0;")
        if k.pair > 1:  # releases of a shared ring arrive on the peer's empty[s] too (RoleEmitter.release)
            self.peer = b.reg()
            b(f"xor.b32 {self.peer}, {k.rank}, 1;")
        start = len(b.lines)
        self.rings = {}
        for ring in k.proto.rings:
            full, empty = k.bar_base(ring.name)
            self.rings[ring.name] = RingRegs(ring, full, empty, b.mov(0), b.mov(0), b.mov(1))
        self.tile, self.tile_count = b.reg(), b.reg()
        self.stagings = self.plan_stagings()
        self.deferred = self.deferral()
        self.emit(k.proto.consumer)
        k.pushes = self.exchanges.finish()
        b.lines[start:start] = ctx.prologue
        if ctx.reduced:
            where = ", ".join(f"{op.NAME} at {op.span.location()}" if op.span else op.NAME
                              for op in dict.fromkeys(ctx.reduced))
            k.decisions.append({"decision": "row/column reductions", "value": "pairwise",
                                "why": f"{where}: each thread combines its elements pairwise "
                                       "(depth log2 n, so the combines issue back to back "
                                       "instead of each waiting on the last), then across lanes"})
        if ctx.edge_branched:
            where = ", ".join(f"{op.NAME} at {op.span.location()}" if op.span else op.NAME
                              for op in dict.fromkeys(ctx.edge_branched))
            k.decisions.append({"decision": "padding masks", "value": "edge tiles only",
                                "why": f"{where}: a uniform branch on the valid count takes the "
                                       "unmasked reduction when the whole tile lies inside its "
                                       "tensor, the masked one only at the edge (no per-element "
                                       "compare and select on the other tiles)"})
        if ctx.edge_regions_done:
            where = ", ".join(f"the branch holding {op.NAME} at {op.span.location()}" if op.span
                              else f"the branch holding {op.NAME}" for op in ctx.edge_regions_done)
            k.decisions.append({"decision": "padding masks", "value": "one edge branch a region",
                                "why": f"{where}: its reductions mask at one limit, so the branch is "
                                       "emitted twice under one uniform branch on it (unmasked for "
                                       "a whole tile, masked at the edge): each copy is one basic "
                                       "block ptxas can interleave, not split at every reduction"})

    def plan_stagings(self) -> dict:
        """The staging of every store the epilogue pass staged (lower_epilogue), set up once."""
        from .lower_epilogue import staging_for
        out = {}
        for op in self.k.blocks.walk():
            if isinstance(op, Store) and op.attrs.get("epilogue") in ("staged", "deferred") \
                    and op in self.k.schedule.store_of.values():
                out[op] = staging_for(self, op, op.attrs["epilogue_cols"])
        return out

    def deferral(self):
        """The deferred epilogue (lower_epilogue.Deferred) of the store the epilogue pass deferred."""
        from .lower_epilogue import Deferred
        for op in self.stagings:
            if op.attrs["epilogue"] == "deferred":
                return Deferred(self, op, self.stagings[op])
        return None

    # -- the tile walk --------------------------------------------------------------------
    def first_tile(self) -> None:
        tile_walk_begin(self)

    def next_tile(self) -> None:
        tile_walk_next(self)

    def tiles(self, step) -> None:
        top, end = self.b.label("tile"), self.b.label("tiles_done")
        self.first_tile()
        if step.alternate:  # consumer c takes the CTA's tiles c, c + N, ...
            self.cta_first, self.grid_step = self.b.reg(), self.b.reg()
            self.b(f"mov.u32 {self.grid_step}, {walk_stride(self.k)};", f"mov.u32 {self.cta_first}, {self.tile};",
                   f"mad.lo.u32 {self.tile}, {self.index}, {self.grid_step}, {self.tile};")
        self.b.place(top)
        done = self.b.pred()
        self.b(f"setp.ge.s32 {done}, {self.tile}, {self.tile_count};", f"@{done} bra {end};")
        bind_block_indices(self)
        self.bound: set[int] = set()  # ops emitted ahead of the walk this tile
        self.trips_ready: set[str] = set()
        if step.alternate:  # SkipTrips comes before the loop: its trip count first (the same every tile)
            self.ahead(list(self.k.blocks.regions[0].ops))
        anchor = tile_anchor(self.ring_of_load, self.loop_of, self.k.schedule.staged_over_rings,
                             self.k.schedule.store_of, self.k.schedule.scratch_ops)
        if self.k.stream_k is not None:  # where a stream-K contribution ends its tile
            self.tile_end = self.b.label("tile_end")
        self.walk(list(self.k.blocks.regions[0].ops), step.body, anchor, self.k.blocks)
        if step.alternate:
            self.b(f"mad.lo.u32 {self.tile}, {self.grid_step}, {self.k.consumers}, {self.tile};")
            self.b(f"bra.uni {top};")
            self.b.place(end)
            return
        if self.k.stream_k is not None:
            self.b.place(self.tile_end)
        self.next_tile()
        self.b(f"bra.uni {top};")
        self.b.place(end)

    def walk(self, ops: list[Op], steps, anchor, owner: Op) -> None:
        """Emit ``steps`` with the IR ``ops`` (``owner``'s body) in between, in the order of the
        async-schedule IR's walk where there is one, else as interleave.py places them."""
        for kind, step, op in self.k.walk_items(owner, lambda: interleave(ops, steps, anchor)):
            if kind == "op":
                self.ops([op])
            elif kind == "step":
                self.emit((step,))
            else:
                self.anchored(step, op)

    def ahead(self, ops: list[Op]) -> None:
        """The block body's scalars and every ring loop's trip count, before the walk."""
        from .lower_producer import is_scalar_op
        for op in ops:
            if is_scalar_op(op) and id(op) not in self.hoisted and all(id(x) in self.ctx.values
                                                                       for x in op.operands):
                self.b(*self.ctx.emit_op(op))
                self.bound.add(id(op))
        for ring, loop in self.loop_of.items():
            ring_trips(self, ring, loop)
            self.trips_ready.add(ring)

    def ops(self, ops: list[Op]) -> None:
        for op in ops:
            if isinstance(op, Yield) or id(op) in self.bound or id(op) in self.hoisted:
                continue
            if isinstance(op, Load) and is_shared(op.result):
                self.shared[id(op.result)] = op
                continue
            self.b(*self.ctx.emit_op(op))
            self.reuse_carried(op)

    def reuse_carried(self, op: Op) -> None:
        """An elementwise op whose register-tile operand is a loop-carried value read by nothing
        else (o in o' = mul_row(o, alpha)) leaves its result in that value's registers: the
        loop's carried home then holds o' -- and the wgmma that accumulates into o' in place,
        and the yield needs no moves -- instead of a second tile of registers live beside it."""
        if len(op.results) != 1 or op.regions or isinstance(op, MMA_OPS):
            return
        rep = self.ctx.get(op.result)
        if not isinstance(rep, RegTile) or rep.packed:
            return
        for v in op.operands:
            home = self.ctx.values.get(id(v))
            if (isinstance(home, RegTile) and any(home is h for h in self.carried_homes) and home.type == rep.type
                    and self.users.get(id(v), []) == [op]):
                self.b(*moves(self.ctx, [home], [rep]))
                self.ctx.bind(op.result, home)
                return

    def anchored(self, step, op: Op) -> None:
        if isinstance(step, Wait):       # a one-shot tile: its bytes have landed
            self.shared[id(op.result)] = op
            self.emit((step,))
        elif isinstance(step, IfTrips):  # a ring loop
            self.ring_loop(op, step)
        elif isinstance(step, ClusterReduce):  # split-K, before the first op reading the sum
            self.b(f"// step: {step.text()}")
            self.cluster_reduce(step)
            self.b("// end step")
            self.ops([op])
        elif isinstance(step, StreamKFixup):  # stream-K, before the first op reading the sum
            from .lower_stream_k import fixup
            self.b(f"// step: {step.text()}")
            fixup(self, step, self.tile_end)
            self.b("// end step")
            self.ops([op])
        elif isinstance(step, TileWrite):  # a register tile stored for a wgmma (lower_shared_store)
            from .lower_shared_store import emit_tile_write
            self.b(f"// step: {step.text()}")
            self.b(*emit_tile_write(self, op))
            self.b("// end step")
            self.shared[id(op.result)] = op
        elif isinstance(step, CopyFill):  # a row block the consumers fill (lower_copy_fill)
            from .lower_copy_fill import emit_copy_fill
            self.b(*emit_copy_fill(self, op))
            self.emit((step,))
        elif isinstance(step, FillWait):  # before the first op reading blocks filled in flight
            self.emit((step,))
            self.ops([op])
        elif isinstance(step, Mma):
            self.b(f"// step: {step.text()}")
            self.wgmma(op, a_tile=self.held_a(op) if step.held else None)
            self.b("// end step")
        elif isinstance(step, Read):  # a ring tile read into registers (lower_tile_read)
            self.b(f"// step: {step.text()}")
            self.ops([op])
            self.b("// end step")
        elif isinstance(step, ScratchSync):  # its cross-warp reductions' barriers are this step's
            self.scratch_step(step, op)
        elif isinstance(step, ClusterExchange):  # a cluster split's exchange (lower_cluster.py)
            self.exchanges.exchange(step, op)
        elif isinstance(step, (StagedStore, HoldStore)):  # a staged store (lower_fragments.emit_store)
            self.epilogue_step[op] = step
            self.ops([op])
        else:                            # ConsumerSync before a store staged over the ring
            self.emit((step,))
            self.ops([op])

    # -- ring loops -----------------------------------------------------------------------
    def ring_loop(self, loop: For, step: IfTrips) -> None:
        ctx, b = self.ctx, self.b
        body = loop.regions[0]
        carried = []
        for init, arg in zip(loop.variadic(), body.args[1:]):
            rep = ctx.get(init)
            if [u for u in self.users.get(id(init), []) if u is not loop]:
                home = fresh(ctx, init.type)
                b(*moves(ctx, [home], [rep]))
                rep = home
            ctx.bind(arg, rep)
            carried.append(rep)
        self.carried = carried
        self.carried_homes = [rep for rep in carried if isinstance(rep, RegTile)]
        if loop in self.k.schedule.level2:  # the held second product's A and accumulator
            from .interleave import level2_parts
            *_, second = level2_parts(loop)
            arg = body.args[1 + list(body.terminator.operands).index(second.result)]
            self.second = second
            self.held = (fresh(ctx, second.operands[0].type), ctx.get(arg))
        if any(isinstance(st, Mma) and st.held for st in all_steps((step,))):  # (held_a): zeroed, never undefined
            (product,) = [op for op in body.ops if isinstance(op, MMA_OPS)]
            home = self.held_homes[id(product)] = fresh(ctx, product.operands[0].type)
            b(*[f"mov.b32 {r}, 0;" for r in registers_of(home)])
        if step.ring not in self.trips_ready:
            ring_trips(self, step.ring, loop)
        if step.part == "own":  # this consumer's own trips (the own-trips pass; lower_own_trips.py)
            from .lower_own_trips import own_count
            self.own[step.ring] = own_count(self, step.ring, loop)
        self.emit((step,))
        out: list[str] = []  # row sums kept per thread (the row-sums pass): the quad, once
        for res, rep in zip(loop.results, combine_partial_sums(ctx, loop, carried, out)):
            ctx.bind(res, rep)
        b(*out)

    def trip(self, step: Loop) -> None:
        loop = self.loop_of[step.ring]
        r = self.rings[step.ring]
        bind_loop_index(self.ctx, self.b, loop, r.counter, r.first)
        if loop in self.k.schedule.level2:
            def interleaved():
                return pipelined_trip(loop, step.body)
        else:
            def interleaved():
                return interleave(body_ops(loop.regions[0]), step.body, trip_anchor(loop, self.k.schedule.store_of))
        for kind, st, op in self.k.walk_items(loop, interleaved):
            if kind == "op":
                self.ops([op])
            elif kind == "step":
                self.emit((st,))
            elif kind == "hold":
                self.hold(op)
            else:
                self.anchored(st, op)
        term = loop.regions[0].terminator
        self.b(*moves(self.ctx, self.carried, [self.ctx.get(v) for v in term.operands]))

    peeled: str | None = None
    """Inside a level-2 loop: "first" while emitting its peeled first trip, "later" for the rest
    (so First/NotFirst resolve statically and ptxas sees which wgmma groups each wait retires)."""

    own: dict = {}
    """Ring -> the register with this consumer's own trips of the tile (``Loop(part="own")``)."""

    def if_trips(self, step: IfTrips) -> None:
        """``part`` "own": the loop, drain and release over this consumer's own trips."""
        if step.part != "own":
            return super().if_trips(step)
        r = self.rings[step.ring]
        tile_trips, r.trips = r.trips, self.own[step.ring]
        super().if_trips(step)
        r.trips = tile_trips

    def loop(self, step: Loop) -> None:
        if step.part == "rest":  # the tile's trips after this consumer's own: protocol steps only
            from .lower_own_trips import idle_trips
            return idle_trips(self, step)
        if self.loop_of[step.ring] not in self.k.schedule.level2:
            return super().loop(step)
        b, r = self.b, self.rings[step.ring]
        outer = r.counter
        r.counter = b.reg()
        top, end = b.label(f"{step.ring}_loop"), b.label(f"{step.ring}_done")
        b(f"mov.b32 {r.counter}, 0;")  # the protocol's IfTrips: at least one trip
        self.peeled = "first"
        self.trip(step)
        b(f"mov.b32 {r.counter}, 1;")
        done = b.pred()
        b(f"setp.ge.s32 {done}, {r.counter}, {r.trips};", f"@{done} bra {end};")
        b.place(top)
        self.peeled = "later"
        self.trip(step)
        again = b.pred()
        b(f"add.s32 {r.counter}, {r.counter}, 1;", f"setp.lt.s32 {again}, {r.counter}, {r.trips};",
          f"@{again} bra {top};")
        b.place(end)
        self.peeled = None
        r.counter = outer

    def not_first(self, step) -> None:
        if self.peeled is None:
            return super().not_first(step)
        if self.peeled == "later":
            self.emit(step.body)

    def first_trip(self, step) -> None:
        if self.peeled is None:
            return super().first_trip(step)
        if self.peeled == "first":
            self.emit(step.body)

    def hold(self, second: Op) -> None:
        """Level 2: keep the second product's register A (its own registers, live into the next
        trip) and its accumulator (the carried tile's registers); it is issued by the next
        trip's ``Mma(prev)`` step or after the loop."""
        ctx, b = self.ctx, self.b
        p_home, o_home = self.held
        b(*moves(ctx, [p_home], [ctx.get(second.operands[0])]))
        acc = ctx.get(second.operands[2])
        if acc is not o_home:
            b(*moves(ctx, [o_home], [acc]))
        ctx.bind(second.result, o_home)

    def held_a(self, op: Op):
        """A held product's A (``Mma(held=True)``), copied into registers of its own that the
        group reads while the next trip makes its A. A plain ``mov`` is not enough: ptxas ends the
        held registers' life at the wgmma that reads them (not at the wait_group that retires
        it, one trip later across the loop's back edge), coalesces the copy away and lets the
        next trip's ld.shared/cvt write the registers the group still reads (wrong results on
        the GPU, H200, 2026-11-28). So each is ``home = a ^ (home & zero)``, with ``zero`` a
        value ptxas cannot know is 0 (a global pointer's top bit): the old home is read after
        the next trip's wait, its life spans the group, and no register of it is reused."""
        ctx, b = self.ctx, self.b
        home = self.held_homes[id(op)]  # (made and zeroed before the loop: ring_loop)
        wide, zero = b.reg("b64"), b.reg()
        b(f"shr.u64 {wide}, {next(iter(self.k.globals.values()))}, 63;", f"cvt.u32.u64 {zero}, {wide};")
        b(*[f"lop3.b32 {d}, {a}, {d}, {zero}, 0x78;" for d, a in zip(registers_of(home), registers_of(ctx.get(op.operands[0])))])
        return home

    def deferred_mma(self, step: Mma) -> None:
        """Level 2's ``Mma(prev)``: the held second product, reading the previous stage."""
        p_home, o_home = self.held
        self.b(f"// step: {step.text()}")
        self.wgmma(self.second, a_tile=p_home, acc=o_home, which="prev")
        self.b("// end step")

    # -- wgmma ----------------------------------------------------------------------------
    def stage_address(self, load: Load, which: str = "cur") -> str:
        """Shared address of ``load``'s tile in the current (or previous) stage of its ring (a
        tile the consumers write, ``TileWrite``: its one place)."""
        b = self.b
        if not isinstance(load, Load):
            addr = b.reg()
            b(f"add.u32 {addr}, {self.k.smem}, {load.attrs['smem']};")
            return addr
        ring = self.rings[self.ring_of_load[load]]
        loop = self.k.schedule.ring_loop.get(ring.ring.name)
        stage = self.stage_before(ring) if which == "prev" else ring.s
        addr = b.reg()
        b(f"mad.lo.u32 {addr}, {stage}, {load_stage_stride(loop, load)}, {self.k.smem};",
          f"add.u32 {addr}, {addr}, {load.attrs['smem']};")
        return addr

    def wgmma(self, op: Op, a_tile=None, acc=None, which: str = "cur") -> None:
        """One committed wgmma group: every k16 step of the tile, every slab of this consumer,
        every wgmma-wide piece of the accumulator's columns. ``a_tile``/``acc``/``which``: the
        held operands of a level-2 product issued a trip late (the previous stage's B)."""
        ctx, b = self.ctx, self.b
        t: TileType = op.result.type
        op_a, op_b = a_operand(op), b_operand(op)
        slabs = t.rows // 64 // self.owners
        n = wgmma_n(t.cols, op_b.panel_cols if op_b.major == "MN" else 8)
        if acc is not None:
            scale = "1"
        elif len(op.operands) > 2:
            acc = ctx.get(op.operands[2])
            scale = "1"
        else:
            acc = fresh(ctx, t)
            scale = "0"
        in_regs = not is_shared(op.operands[0])  # RS: A is a packed 16-bit register tile
        b_addr = self.stage_address(self.shared[id(op.operands[1])], which)
        desc_b = self.descriptor(b_addr, op_b)
        if in_regs:
            a_tile = a_tile if a_tile is not None else ctx.get(op.operands[0])
            if not a_tile.packed:
                raise NotAvailableError(f"{op.NAME}: a register A operand must be a 16-bit tile "
                                        "(cvt<bf16>(...))", op.span)
        else:
            a_addr = self.stage_address(self.shared[id(op.operands[0])])
            if op_a.major == "K":
                b(f"mad.lo.u32 {a_addr}, {self.share}, {slabs * 64 * op_a.span}, {a_addr};")
            else:
                per = slabs * 64 // op_a.panel_cols * op_a.panel_bytes
                b(f"mad.lo.u32 {a_addr}, {self.share}, {per}, {a_addr};")
            desc_a = self.descriptor(a_addr, op_a)
        ta, tb = int(op_a.major == "MN"), int(op_b.major == "MN")
        k_elems = 32 if op.operands[1].type.dtype.name in wgmma.FP8 else 16  # one K_STEP_BYTES step
        k_steps = (op.operands[0].type.cols if op_a.major == "K" else op.operands[0].type.rows) // k_elems
        lines = [wgmma.FENCE]
        dtype = op.operands[1].type.dtype.name
        for ks in range(k_steps):
            b_descs = [self.at(desc_b, op_b.offset(ks, n * piece)) for piece in range(t.cols // n)]
            for slab in range(slabs):
                for piece in range(t.cols // n):
                    regs = [acc.regs[slab][piece * n // 8 + r // 4][r % 4] for r in range(n // 2)]
                    first = scale if ks == 0 else "1"
                    if in_regs:  # the A fragment of k16 step ks: chunks 2ks, 2ks+1, rows g and g+8
                        a_regs = [a_tile.regs[slab][2 * ks + c][h] for c in (0, 1) for h in (0, 1)]
                        lines.append(wgmma.mma_rs_instruction(n, dtype, regs, a_regs, b_descs[piece], tb, first))
                    else:
                        lines.append(wgmma.mma_instruction(n, dtype, regs, self.at(desc_a, op_a.offset(ks, 64 * slab)),
                                                           b_descs[piece], tb, first, ta=ta))
        lines.append(wgmma.COMMIT)
        b(*lines)
        ctx.bind(op.result, acc)

    # -- split-K ----------------------------------------------------------------------------
    split_part = None
    """After split-K's reduction: (split, rank register, the accumulator's (band, chunk) pairs in
    part order); a register tile of the accumulator's layout is stored part ``rank`` only
    (lower_fragments.emit_store)."""

    def cluster_reduce(self, step: ClusterReduce) -> None:
        """Split-K: the cluster's CTAs add their partial sums of the loop's accumulator
        (reduce.reduce_scatter, the template's reduction) over this CTA's drained ring; part r of
        every consumer thread's registers then holds the tile's sum in CTA r, which stores it."""
        from . import reduce
        k, b = self.k, self.b
        loop = self.loop_of[step.ring]
        acc = self.ctx.get(loop.results[0])
        chunks = [(u, j) for u in range(len(acc.regs)) for j in range(len(acc.regs[u]))]
        regs = [acc.regs[u][j][r] for u, j in chunks for r in range(4)]
        buffer = b.reg()
        start = min(ld.attrs["smem"] for ld, (ring, _) in k.schedule.load_of.items() if ring == step.ring)
        b(f"add.u32 {buffer}, {k.smem}, {start};")
        reduce.reduce_scatter(b, regs, step.ctas, k.rank, buffer, self.index, k.consumers, k.tid_wg)
        self.split_part = (step.ctas, k.rank, chunks)

    def stream_k_fixup(self, step: StreamKFixup) -> None:
        from .lower_stream_k import fixup
        fixup(self, step, self.tile_end)

    # -- the staged epilogue (lower_epilogue.py, epilogue.py) ---------------------------------
    def store_wait(self, step: StoreWait) -> None:
        from .epilogue import wait_stores
        wait_stores(self.b, self.epi.staging, step.pending)

    def staging_sync(self, step: StagingSync) -> None:
        from .epilogue import meet
        meet(self.b, self.epi.staging)

    def staging_write(self, step: StagingWrite) -> None:
        from .epilogue import write_round
        epi = self.epi
        epi.round += 1
        write_round(self.b, epi.staging, epi.slabs, epi.round, step.buffer, epi.packed)

    def tma_store(self, step: TmaStore) -> None:
        from .epilogue import store_round
        epi = self.epi
        store_round(self.b, epi.staging, epi.slabs, epi.round, step.buffer, epi.row0, epi.col0, epi.lead)

    def staging_read(self, step: StagingRead) -> None:
        from .lower_epilogue import staging_read
        self.b(*staging_read(self))

    def store_drain(self, step: StoreDrain) -> None:
        from .lower_epilogue import drain
        self.b(*drain(self))

    def if_held(self, step: IfHeld) -> None:
        self.b(*self.deferred.flush(self.ctx, step))

    # -- named barriers -------------------------------------------------------------------
    def scratch_step(self, step, op: Op) -> None:
        """``op`` with every barrier its shared-scratch exchanges print marked as ``step``
        (lower_layout.ConsumerSharedSync)."""
        sync = self.ctx.sync
        if getattr(sync, "step", False) is not None:
            raise NotImplementedError(f"a ScratchSync step ({step.text()}) but the consumers have no shared scratch")
        sync.step = step
        try:
            self.ops([op])
        finally:
            sync.step = None

    def consumer_sync(self, step) -> None:
        self.b(f"bar.sync {CONSUMER_BARRIER}, {128 * self.k.consumers};")

    def fill_wait(self, step) -> None:
        """``FillWait``: this thread's copies in flight have landed (lower_copy_fill.py), then
        every consumer thread's have."""
        self.b("cp.async.wait_all;")
        self.consumer_sync(step)

    def copy_fill(self, step) -> None:
        """``CopyFill`` after its copies (lower_copy_fill.emit_copy_fill): their wait and meeting,
        or nothing where they stay in flight until a ``FillWait``."""
        if step.wait:
            self.fill_wait(step)

    def turn_wait(self, step) -> None:
        """Ping-pong: this consumer's turn on the tensor cores (named barrier FIRST_TURN + c);
        ``who = first``: consumer 0's closing wait (barrier FIRST_TURN), the others skip it."""
        if step.who == "first":
            p = self.b.pred()
            self.b(f"setp.eq.u32 {p}, {self.index}, 0;", f"@{p} bar.sync {FIRST_TURN_BARRIER}, 256;")
            return
        own = self.b.reg()
        self.b(f"add.u32 {own}, {self.index}, {FIRST_TURN_BARRIER};", f"bar.sync {own}, 256;")

    def turn_pass(self, step) -> None:
        """Hand the turn to the next consumer (c + 1 mod the consumers); ``who = last``: the last
        consumer's opening hand-over to consumer 0, the others skip it."""
        n = self.k.consumers
        if step.who == "last":
            p = self.b.pred()
            self.b(f"setp.eq.u32 {p}, {self.index}, {n - 1};", f"@{p} bar.arrive {FIRST_TURN_BARRIER}, 256;")
            return
        nxt = self.b.reg()
        if n == 2:
            self.b(f"xor.b32 {nxt}, {self.index}, 1;")
        else:
            last = self.b.pred()
            self.b(f"add.u32 {nxt}, {self.index}, 1;", f"setp.eq.u32 {last}, {nxt}, {n};",
                   f"selp.u32 {nxt}, 0, {nxt}, {last};")
        self.b(f"add.u32 {nxt}, {nxt}, {FIRST_TURN_BARRIER};", f"bar.arrive {nxt}, 256;")

    def has_prev_tile(self) -> str:
        p = self.b.pred()
        self.b(f"setp.ne.s32 {p}, {self.tile}, {self.cta_first};")  # the CTA's first tile has none
        return p

    def has_next_tile(self) -> str:
        p, after = self.b.pred(), self.b.reg()
        self.b(f"add.s32 {after}, {self.tile}, {self.grid_step};", f"setp.lt.s32 {p}, {after}, {self.tile_count};")
        return p


__all__ = ["ConsumerRole", "consumer_refusal", "users_of"]
