"""The warp-specialized GEMM kernel: PTX text and launch metadata.

    warpgroup 0   producer: setmaxnreg.dec; one thread walks the tiles and, per K step, waits
                  for a free stage (empty[s]), arms full[s] with the stage's bytes and issues
                  the TMA boxes of A and B into it. When A's or B's rows are not a multiple of
                  16 bytes (TMA cannot address them; the kernel checks the dims) all 128
                  producer threads copy the stage instead (copy.py)
    warpgroups 1+ consumers: setmaxnreg.inc; each owns BM/consumers rows of the tile (ping-pong:
                  two consumers own whole tiles, the CTA's tiles alternating between them, and
                  take turns on the tensor cores through named barriers 4 + c); per K
                  step waits on full[s], issues one wgmma group over the stage, keeps it in
                  flight (wait_group 1) and releases the previous stage; after the loop it
                  drains and stores its rows of C: stmatrix into 128B-swizzled staging panels
                  and TMA stores that run under the next tile's wgmmas (TMA clips them at C's
                  edges), or, without room for staging or with C rows TMA cannot address,
                  straight from registers under row/column predicates (epilogue.py)

The control flow of both roles is the protocol (passes/sync_protocol.py) built by
``gemm_protocol``: the same object the CPU checker explores. Tiles come from a tile loop over
``blockIdx.x, += gridDim.x`` (one trip per CTA on a plain grid, many when persistent), in
grouped order when the block loop asks for ``group``.

Parameter ABI (docs/architecture.md): the kernel's parameters (a global is a ``.u64``
pointer, a scalar its own type), every named dimension as ``.s32``, then one 128-byte tensor
map per TMA operand (metadata entries of kind "tensormap").
"""
from __future__ import annotations

from contextlib import nullcontext

from ...passes.sync_protocol import (Load, LoopPlan, Loop, Protocol, Ring, Tiles, consumer_loop, pingpong_consumer,
                                     producer_fill)
from ..abi import Pointers, map_only, param_entries
from . import copy, mbarrier, tma, wgmma  # multicast, reduce, streamk: where a plan asks for them
from .builder import Builder
from .epilogue import PANEL_COLS, Fragment, Staging, pack_tile, packed_registers, staging_lanes, store_fragment, store_staged
from .match import GemmMatch
from .plan import TURN_BARRIER, Plan, consumer_rows, operand_a, operand_b
from .program import ARCH, SMEM_SYMBOL, RingRegs, RoleEmitter, module_text

RING = "k"
FIRST_CONSUMER_BARRIER = 2
"""Named barriers: 0 the CTA's, 1 the copying producer's, 2 + c consumer c's (its epilogue)."""


def gemm_protocol(g: GemmMatch, plan: Plan) -> Protocol:
    """One ring (the K loop's A and B tiles), filled by the producer, read by every consumer
    (ping-pong: each fill by the consumer of its tile)."""
    a_bytes, b_bytes = g.bm * g.bk * 2, g.bk * g.bn * 2
    ring = Ring(RING, plan.stages, (Load("a", a_bytes), Load("b", b_bytes)), a_bytes + b_bytes,
                1 if plan.pingpong else plan.consumers, where="the K loop", cluster=plan.multicast)
    producer = (Tiles((Loop(RING, producer_fill(ring)),)),)
    if plan.pingpong:
        consumer = pingpong_consumer(LoopPlan(RING, ((RING,),)), plan.stages)
    else:
        consumer = (Tiles(consumer_loop(LoopPlan(RING, ((RING,),)), plan.stages)),)
    return Protocol(g.kernel.name, plan.consumers, plan.persistent, (ring,), producer, consumer)


def streamk_slot_bytes(g: GemmMatch, plan: Plan) -> int:
    """A stream-K workspace slot: one f32 tile (every consumer thread's accumulators)."""
    return g.bm * g.bn * 4


class GemmKernel:
    """Registers and helpers both roles share."""

    def __init__(self, g: GemmMatch, plan: Plan, *, unaligned_rows: bool = True):
        self.g, self.plan = g, plan
        self.assumed_aligned = [] if unaligned_rows else [
            g.params[i].hint for i in (g.a, g.b, g.c) if isinstance(g.params[i].type.dims[-1], str)]
        """Operands whose rows are assumed to be whole 16-byte units (compile option unaligned_rows
        off): their fallback paths are left out and the launcher refuses other rows (to the kernel
        object, which compiles the variant with them)."""
        self.b = Builder()
        self.proto = gemm_protocol(g, plan)
        self.maps = self._tensor_maps()
        self.entries = [entry[:3] for entry in param_entries(self.g.kernel)]

    # -- parameters -----------------------------------------------------------------------
    def _tensor_maps(self) -> dict[str, tma.TensorMap]:
        g, plan, name = self.g, self.plan, self.g.kernel.name
        a_box = (plan.span_a // 2, g.bm)
        b_box = (plan.span_b // 2, g.bk if g.b_major == "MN" else g.bn // plan.multicast)
        fallback = {i: g.params[i].hint not in self.assumed_aligned for i in (g.a, g.b, g.c)}
        maps = {"a": tma.TensorMap(f"{name}_tmap_0", g.a, g.params[g.a].hint, g.dtype, a_box, plan.span_a,
                                   fallback[g.a]),
                "b": tma.TensorMap(f"{name}_tmap_1", g.b, g.params[g.b].hint, g.dtype, b_box, plan.span_b,
                                   fallback[g.b])}
        if plan.staging is not None:
            maps["c"] = tma.TensorMap(f"{name}_tmap_2", g.c, g.params[g.c].hint, g.c_dtype,
                                      (PANEL_COLS, 64), 128, fallback[g.c])
        return maps

    # -- the kernel -----------------------------------------------------------------------
    def emit(self) -> tuple[str, dict]:
        b, plan = self.b, self.plan
        self.prologue()
        producer, done = b.pred(), b.label("exit")
        b(f"setp.eq.u32 {producer}, {self.wg}, 0;", f"@{producer} bra {self.producer_label};")
        Consumer(self).run()
        b(f"bra.uni {done};")
        b.place(self.producer_label)
        copying = b.label("copy_producer")
        b(f"setmaxnreg.dec.sync.aligned.u32 {plan.regs[0]};", f"@!{self.tma_ok} bra {copying};")
        Producer(self).run(done)
        b(f"bra.uni {done};")
        b.place(copying)
        with self.globals.fallback():  # runs only where A's or B's rows are not 16-byte units
            CopyProducer(self).run()
        b.place(done)
        b("ret;")
        return self.module_text(), self.metadata()

    def prologue(self) -> None:
        b, g, plan = self.b, self.g, self.plan
        self.producer_label = b.label("producer")
        tid, self.wg, self.tid_wg = b.reg(), b.reg(), b.reg()
        b(f"mov.u32 {tid}, %tid.x;", f"shr.u32 {self.wg}, {tid}, 7;", f"and.b32 {self.tid_wg}, {tid}, 127;")
        self.lane = b.reg()
        b(f"and.b32 {self.lane}, {tid}, 31;")
        raw, self.smem = b.reg(), b.reg()
        b(f"mov.u32 {raw}, {SMEM_SYMBOL};", f"add.u32 {self.smem}, {raw}, 1023;",
          f"and.b32 {self.smem}, {self.smem}, -1024;")
        self.globals = Pointers()  # by parameter index; remembers which ones emitters read
        for i, (ptx, name, meta) in enumerate(self.entries):
            if meta["kind"] == "global" and i in (g.a, g.b, g.c):
                raw64, addr = b.reg("b64"), b.reg("b64")
                b(f"ld.param.u64 {raw64}, [{name}];", f"cvta.to.global.u64 {addr}, {raw64};")
                self.globals[i] = addr
            elif meta["kind"] == "dim":
                r = b.reg()
                b(f"ld.param.s32 {r}, [{name}];")
                b.dims[meta["name"]] = r
        self.trips = b.expr(g.trips)
        self.tiles_m, self.tiles_n = (b.expr(c) for c in g.counts)
        self.tile_count, self.grid_step, self.first = b.reg(), b.reg(), b.reg()
        b(f"mul.lo.s32 {self.tile_count}, {self.tiles_m}, {self.tiles_n};")
        self.pair_rank = self.peer = None
        if plan.multicast > 1:  # a cluster walks pair units: tile rows 2mp and 2mp + 1 of column n
            self.pair_rank, self.peer, self.units_m = b.reg(), b.reg(), b.reg()
            b(f"mov.u32 {self.pair_rank}, %cluster_ctarank;", f"xor.b32 {self.peer}, {self.pair_rank}, 1;",
              f"add.s32 {self.units_m}, {self.tiles_m}, 1;", f"shr.s32 {self.units_m}, {self.units_m}, 1;",
              f"mul.lo.s32 {self.tile_count}, {self.units_m}, {self.tiles_n};")
        if plan.split > 1:  # a cluster per tile; CTA r of it runs K steps [k_first, k_first + trips)
            self.rank, per, self.k_first = b.reg(), b.reg(), b.reg()
            b(f"mov.u32 {self.first}, %clusterid.x;", f"mov.u32 {self.grid_step}, %nclusterid.x;",
              f"mov.u32 {self.rank}, %cluster_ctarank;",
              f"add.s32 {per}, {self.trips}, {plan.split - 1};", f"div.s32 {per}, {per}, {plan.split};",
              f"mul.lo.s32 {self.k_first}, {self.rank}, {per};",
              f"sub.s32 {self.trips}, {self.trips}, {self.k_first};",
              f"min.s32 {self.trips}, {self.trips}, {per};", f"max.s32 {self.trips}, {self.trips}, 0;")
        elif plan.multicast > 1:
            self.rank = self.k_first = None
            b(f"mov.u32 {self.first}, %clusterid.x;", f"mov.u32 {self.grid_step}, %nclusterid.x;")
        else:
            self.rank = self.k_first = None
            b(f"mov.u32 {self.first}, %ctaid.x;", f"mov.u32 {self.grid_step}, %nctaid.x;")
        self.sk = None
        if plan.stream_k:  # the tail's K trips split over every CTA (streamk.py), decided at run time
            from . import streamk
            self.sk = streamk.Split(b, self.tile_count, lambda: self.fresh(g.trips))
        self.tma_ok = self.rows_aligned(g.a, g.b)
        self.c_tma_ok = self.rows_aligned(g.c) if plan.staging is not None else None
        self.full = b.reg()
        b(f"add.u32 {self.full}, {self.smem}, {plan.bars};")
        self.empty = b.reg()
        b(f"add.u32 {self.empty}, {self.full}, {8 * plan.stages};")
        self.init_barriers(tid)

    def fresh(self, expr) -> str:
        """``expr`` evaluated from the parameters again (reads of the constant bank), so that no
        register holds it between uses."""
        b, saved = self.b, self.b.dims
        b.dims = dict(saved)
        for _, name, meta in self.entries:
            if meta["kind"] == "dim":
                r = b.reg()
                b(f"ld.param.s32 {r}, [{name}];")
                b.dims[meta["name"]] = r
        try:
            return b.expr(expr)
        finally:
            b.dims = saved

    def dim(self, d) -> str:
        return self.b.dims[d] if isinstance(d, str) else self.b.mov(d)

    def shape(self, param: int) -> tuple[str, str]:
        rows, cols = (self.dim(d) for d in self.g.params[param].type.dims)
        return rows, cols

    def rows_aligned(self, *params: int) -> str:
        """The predicate 'TMA can address these 16-bit tensors': their rows are multiples of 16
        bytes (the launcher has checked the base addresses). Otherwise the producer copies
        (copy.py) and the epilogue stores registers. Known when the row lengths are constants, or
        assumed aligned: then ptxas drops the other path before it costs any compile time."""
        b, g = self.b, self.g
        inner = [g.params[i].type.dims[-1] for i in params]
        ok = b.pred()
        if self.assumed_aligned or all(isinstance(d, int) for d in inner):
            b(f"setp.eq.u32 {ok}, {int(all(d % 8 == 0 for d in inner if isinstance(d, int)))}, 1;")
            return ok
        bits = b.reg()
        b(f"mov.b32 {bits}, 0;")
        for d in inner:
            b(f"or.b32 {bits}, {bits}, {self.dim(d)};")
        b(f"and.b32 {bits}, {bits}, 7;", f"setp.eq.u32 {ok}, {bits}, 0;")
        return ok

    def init_barriers(self, tid: str) -> None:
        b, plan = self.b, self.plan
        leader, done = b.pred(), b.label("barriers_ready")
        b(f"setp.ne.u32 {leader}, {tid}, 0;", f"@{leader} bra {done};")
        for s in range(plan.stages):
            b(mbarrier.init(f"{self.full}+{8 * s}", 1),
              mbarrier.init(f"{self.empty}+{8 * s}", self.proto.ring(RING).empty_arrivals * plan.multicast))
        b(mbarrier.INIT_FENCE)
        b.place(done)
        if plan.multicast > 1:  # the peer arrives here and multicasts into this CTA from now on
            from . import multicast
            multicast.cluster_sync(b)
        else:
            b("bar.sync 0;")

    def tile_coords(self, t: str) -> tuple[str, str]:
        """(m, n) of linear tile ``t``: row-major, or grouped by ``group`` tile rows. With
        multicast ``t`` is a pair unit (rows of units_m, groups of group/2 unit rows) and this
        CTA's tile row is 2·mp + its rank."""
        if self.plan.multicast > 1:
            mp, n = self.grouped(t, self.units_m, max(1, self.plan.group // 2))
            m = self.b.reg()
            self.b(f"mad.lo.s32 {m}, {mp}, 2, {self.pair_rank};")
            return m, n
        return self.grouped(t, self.tiles_m, self.plan.group)

    def grouped(self, t: str, rows: str, group: int) -> tuple[str, str]:
        b = self.b
        m, n = b.reg(), b.reg()
        if group <= 1:
            b(f"div.s32 {m}, {t}, {self.tiles_n};", f"mul.lo.s32 {n}, {m}, {self.tiles_n};",
              f"sub.s32 {n}, {t}, {n};")
            return m, n
        per_group, first, height, inside = b.reg(), b.reg(), b.reg(), b.reg()
        b(f"mul.lo.s32 {per_group}, {self.tiles_n}, {group};",
          f"div.s32 {first}, {t}, {per_group};", f"mul.lo.s32 {first}, {first}, {group};",
          f"sub.s32 {height}, {rows}, {first};", f"min.s32 {height}, {height}, {group};",
          f"rem.s32 {inside}, {t}, {per_group};",
          f"rem.s32 {m}, {inside}, {height};", f"add.s32 {m}, {m}, {first};",
          f"div.s32 {n}, {inside}, {height};")
        return m, n

    def ring_regs(self) -> dict[str, RingRegs]:
        b = self.b
        s, ph = b.reg(), b.reg()
        b(f"mov.b32 {s}, 0;", f"mov.b32 {ph}, 0;")
        return {RING: RingRegs(self.proto.ring(RING), self.full, self.empty, s, ph, self.trips)}

    # -- text -----------------------------------------------------------------------------
    def module_text(self) -> str:
        plan, decls = self.plan, ()
        if plan.stream_k:
            from . import streamk
            decls = streamk.declarations(self.g.kernel.name, streamk_slot_bytes(self.g, plan), plan.consumers)
        return module_text("GEMM", self.g.kernel.name, self.entries, self.maps.values(), plan, self.b.body(),
                           cluster=plan.split if plan.split > 1 else plan.multicast, globals_=decls)

    def metadata(self) -> dict:
        g, plan = self.g, self.plan
        total = ["mul", g.counts[0], g.counts[1]]
        grid = [["min", total, ["num_sms"]]] if plan.persistent else [total]
        if plan.split > 1:
            grid = [["mul", total, plan.split]]
        elif plan.multicast > 1:  # pair units, at most one cluster per two SMs; whole clusters
            units = ["mul", ["cdiv", g.counts[0], 2], g.counts[1]]
            grid = [["mul", ["min", units, ["cdiv", ["add", ["num_sms"], -1], 2]], 2]]
        params = [dict(meta) for _, _, meta in self.entries if meta["kind"] != "dim"]
        maps = [m.entry() for m in self.maps.values()]
        map_only(params, maps, self.globals.read)  # tensors only TMA addresses take views' strides
        params += maps
        return {"name": g.kernel.name, "entry": g.kernel.name, "arch": ARCH, "backend": "wgmma",
                "params": params, "dims": g.kernel.named_dims(), "grid": grid,
                "block": [plan.threads, 1, 1], "smem_bytes": plan.smem_bytes,
                "num_warps": plan.threads // 32, "registers": list(plan.regs),
                "protocol": self.proto.text(), "decisions": list(plan.decisions) + self.row_decision(),
                "gemm": {"tile": [g.bm, g.bn, g.bk], "split": plan.split, "k_trips": g.trips}
                | ({"multicast": plan.multicast} if plan.multicast > 1 else {})
                | ({"pingpong": True} if plan.pingpong else {})
                | ({"stream_k": True} if plan.stream_k else {})} \
            | ({"assumes_aligned_rows": True} if self.assumed_aligned else {}) \
            | ({"serial_launches": True} if plan.stream_k else {})  # the module's workspace (launcher.py)


    def row_decision(self) -> list[dict]:
        if not self.assumed_aligned:
            return []
        return [{"decision": "aligned rows", "value": ", ".join(self.assumed_aligned),
                 "why": "rows of whole 16-byte units assumed (last dims multiples of 8), so the copying "
                        "producer and the register-store epilogue for other rows are left out: ptxas "
                        "runs about 40% faster. A launch with other rows compiles the variant that has "
                        "them (compile option unaligned_rows)"}]


class GemmRole(RoleEmitter):
    def __init__(self, k: GemmKernel):
        super().__init__(k.b, k.proto)
        self.k = k
        self.tile_count = k.tile_count
        self.peer = k.peer

    def run_program(self, program, leader: str | None) -> None:
        """Emit ``program`` with fresh ring state (s = 0, ph = 0) once the role is set up."""
        self.rings = self.k.ring_regs()
        self.leader = leader
        self.tile = self.b.reg()
        self.unit_first = None
        if self.k.sk is not None:  # a unit's K trips: [unit_first, unit_first + unit_trips)
            self.unit_trips = self.b.reg()
            self.rings[RING].trips = self.unit_trips
            if not isinstance(self, Consumer):  # the consumers find it again at the tile's end
                self.unit_first = self.b.reg()
        self.emit(program)

    # The walk with stream-K (streamk.py): whole tiles c, c + P, ... below T_dp, then the tiles
    # of this CTA's range of the tail's trips, [begin, end); a tile >= T_dp is a stream-K unit.
    def first_tile(self) -> None:
        self.b(f"mov.u32 {self.tile}, {self.k.first};")
        if self.k.sk is not None:
            self.enter_stream_k()

    def next_tile(self) -> None:
        if self.k.sk is None:
            self.b(f"add.s32 {self.tile}, {self.tile}, {self.k.grid_step};")
            return
        b, sk = self.b, self.k.sk
        tail, done, out = b.label("streamk_next"), b.label("next_unit"), b.pred()
        dp, total = sk.tail()
        b(f"setp.ge.s32 {out}, {self.tile}, {dp};", f"@{out} bra {tail};",
          f"add.s32 {self.tile}, {self.tile}, {self.k.grid_step};")
        self.enter_stream_k(dp, total)
        b(f"bra.uni {done};")
        b.place(tail)  # the next tile, if this CTA's range reaches into it
        start = b.reg()
        b(f"add.s32 {self.tile}, {self.tile}, 1;", f"sub.s32 {start}, {self.tile}, {dp};",
          f"mul.lo.s32 {start}, {start}, {sk.trips};",
          f"setp.ge.s32 {out}, {start}, {sk.range_start(sk.cta(), total, 1)};",
          f"@{out} mov.b32 {self.tile}, {self.tile_count};")
        b.place(done)

    def enter_stream_k(self, dp: str | None = None, total: str | None = None) -> None:
        """Past the whole tiles: the tile where this CTA's stream-K range begins (an empty range:
        the walk ends)."""
        b, sk = self.b, self.k.sk
        if dp is None:
            dp, total = sk.tail()
        whole, out, q, begin = b.label("whole_tiles"), b.pred(), b.reg(), b.reg()
        b(f"setp.lt.s32 {out}, {self.tile}, {dp};", f"@{out} bra {whole};")
        b(f"mov.b32 {begin}, {sk.range_start(sk.cta(), total)};",
          f"div.s32 {q}, {begin}, {sk.trips};", f"add.s32 {self.tile}, {dp}, {q};",
          f"setp.ge.s32 {out}, {begin}, {sk.range_start(sk.cta(), total, 1)};",
          f"@{out} mov.b32 {self.tile}, {self.tile_count};")
        b.place(whole)

    def tile_begin(self) -> None:
        self.m, self.n = self.k.tile_coords(self.tile)
        if self.k.sk is not None:
            first, trips = self.unit_bounds()
            self.b(f"mov.b32 {self.unit_trips}, {trips};")
            if self.unit_first is not None:
                self.b(f"mov.b32 {self.unit_first}, {first};")

    def unit_bounds(self) -> tuple[str, str]:
        """(first trip, trips) of this tile's unit: (0, Kt) for a whole tile, else the part of
        this CTA's range in it. Computed where needed, not kept (registers are short)."""
        b, sk = self.b, self.k.sk
        dp, total = sk.tail()
        first, trips, rel, last, whole, unit = b.reg(), b.reg(), b.reg(), b.reg(), b.pred(), b.label("unit")
        b(f"mov.b32 {first}, 0;", f"mov.b32 {trips}, {sk.trips};",
          f"setp.lt.s32 {whole}, {self.tile}, {dp};", f"@{whole} bra {unit};",
          f"sub.s32 {rel}, {self.tile}, {dp};", f"mul.lo.s32 {rel}, {rel}, {sk.trips};",
          f"sub.s32 {first}, {sk.range_start(sk.cta(), total)}, {rel};",
          f"max.s32 {first}, {first}, 0;",
          f"sub.s32 {last}, {sk.range_start(sk.cta(), total, 1)}, {rel};", f"min.s32 {last}, {last}, {sk.trips};",
          f"sub.s32 {trips}, {last}, {first};")
        b.place(unit)
        return first, trips


class Producer(GemmRole):
    """One thread of warpgroup 0 issues every TMA copy."""

    def run(self, done: str) -> None:
        k, b = self.k, self.k.b
        others = b.pred()
        b(f"setp.ne.u32 {others}, {k.tid_wg}, 0;", f"@{others} bra {done};")
        self.maps = {}
        for key in ("a", "b"):
            m = k.maps[key]
            raw, addr = b.reg("b64"), b.reg("b64")
            b(*tma.generic_address(m.symbol, raw, addr), tma.prefetch(addr))
            self.maps[key] = addr
        self.run_program(k.proto.producer, None)

    def k_origin(self, counter: str) -> str:
        """The first K column of this trip's tiles: (k_first + trip) * BK."""
        b, k = self.b, self.k
        k0 = b.reg()
        if self.unit_first is not None:
            b(f"add.s32 {k0}, {counter}, {self.unit_first};", f"mul.lo.s32 {k0}, {k0}, {k.g.bk};")
        elif k.k_first is None:
            b(f"mul.lo.s32 {k0}, {counter}, {k.g.bk};")
        else:
            b(f"add.s32 {k0}, {counter}, {k.k_first};", f"mul.lo.s32 {k0}, {k0}, {k.g.bk};")
        return k0

    def tile_begin(self) -> None:
        super().tile_begin()
        g, b = self.k.g, self.b
        self.m0, self.n0 = b.reg(), b.reg()
        b(f"mul.lo.s32 {self.m0}, {self.m}, {g.bm};", f"mul.lo.s32 {self.n0}, {self.n}, {g.bn};")

    def tma_load(self, step) -> None:
        g, plan, b = self.k.g, self.k.plan, self.b
        r = self.rings[step.ring]
        bar = self.bar(r, "full")
        k0 = self.k_origin(r.counter)
        if step.load == "a":
            op, base, inner_k = operand_a(g, plan), plan.a_offset, True
            outer = self.m0
        else:
            op, base, inner_k = operand_b(g, plan), plan.b_offset, g.b_major == "K"
            outer = k0 if g.b_major == "MN" else self.n0
        stage = b.reg()
        b(f"mad.lo.u32 {stage}, {r.s}, {plan.stage_stride}, {self.k.smem};")
        if step.load == "b" and plan.multicast > 1:
            self.multicast_half(op, stage, base, k0, bar)
            return
        width = g.bk if inner_k else g.bn
        start = k0 if inner_k else self.n0
        for p in range(width // op.panel_cols):
            dst, inner = b.reg(), b.reg()
            b(f"add.u32 {dst}, {stage}, {base + p * op.panel_bytes};",
              f"add.s32 {inner}, {start}, {p * op.panel_cols};")
            b(tma.load_2d(dst, self.maps[step.load], inner, outer, bar))


    def multicast_half(self, op, stage: str, base: int, k0: str, bar: str) -> None:
        """This CTA's half of B's stage, into both CTAs of the pair (multicast.py): MN-major B
        in half of its panels (this CTA's rank-th half), K-major B as the rank-th half of its
        rows in every panel (the map's box is BN/2 rows)."""
        from . import multicast
        g, b, rank = self.k.g, self.b, self.k.pair_rank
        if g.b_major == "MN":
            panels = g.bn // op.panel_cols // 2
            for p in range(panels):
                which, dst, inner = b.reg(), b.reg(), b.reg()
                b(f"mad.lo.u32 {which}, {rank}, {panels}, {p};",
                  f"mad.lo.u32 {dst}, {which}, {op.panel_bytes}, {stage};", f"add.u32 {dst}, {dst}, {base};",
                  f"mad.lo.s32 {inner}, {which}, {op.panel_cols}, {self.n0};")
                b(multicast.load_2d(dst, self.maps["b"], inner, k0, bar))
            return
        half = g.bn // 2
        for p in range(g.bk // op.panel_cols):
            dst, inner, outer = b.reg(), b.reg(), b.reg()
            b(f"mad.lo.u32 {dst}, {rank}, {half * op.span}, {stage};",
              f"add.u32 {dst}, {dst}, {base + p * op.panel_bytes};",
              f"add.s32 {inner}, {k0}, {p * op.panel_cols};", f"mad.lo.s32 {outer}, {rank}, {half}, {self.n0};")
            b(multicast.load_2d(dst, self.maps["b"], inner, outer, bar))


class CopyProducer(Producer):
    """All 128 producer threads copy each stage (rows TMA cannot address): the same protocol,
    with the stage's arrival made once its bytes are written and published (copy.py)."""

    def run(self) -> None:
        k, b = self.k, self.k.b
        leader = b.pred()
        b(f"setp.eq.u32 {leader}, {k.tid_wg}, 0;")
        self.run_program(k.proto.producer, leader)

    def expect_tx(self, step) -> None:
        pass  # the arrival follows the copies (tma_load of the stage's last load)

    def tma_load(self, step) -> None:
        k, g, plan, b = self.k, self.k.g, self.k.plan, self.b
        r = self.rings[step.ring]
        k0, stage = self.k_origin(r.counter), b.reg()
        b(f"mad.lo.u32 {stage}, {r.s}, {plan.stage_stride}, {k.smem};")
        if step.load == "a":
            param, op, offset, origin = g.a, operand_a(g, plan), plan.a_offset, (self.m0, k0)
        else:
            param, op, offset = g.b, operand_b(g, plan), plan.b_offset
            origin = (k0, self.n0) if g.b_major == "MN" else (self.n0, k0)
        dst = b.reg()
        b(f"add.u32 {dst}, {stage}, {offset};")
        copy.copy_tile(b, op, k.tid_wg, k.globals[param], *k.shape(param), *origin, dst)
        if step.load == r.ring.loads[-1].name:
            b(*copy.publish(), self.leading(mbarrier.arrive(self.bar(r, "full"))))


class Consumer(GemmRole):
    """Consumer warpgroups 1..N: wgmma over the ring, then the epilogue of their rows."""

    def run(self) -> None:
        k, b, g, plan = self.k, self.k.b, self.k.g, self.k.plan
        b(f"setmaxnreg.inc.sync.aligned.u32 {plan.regs[1]};")
        index = self.index = b.reg()
        b(f"sub.u32 {index}, {k.wg}, 1;")
        leader = b.pred()
        b(f"setp.eq.u32 {leader}, {k.tid_wg}, 0;")
        self.rows = consumer_rows(g, plan.consumers)
        self.share = index  # which share of a tile's rows this consumer computes
        if plan.pingpong:  # all of them, for the CTA's tiles index, index + 2, ...
            self.share = b.mov(0)
            self.own_turn, self.next_turn = b.reg(), b.reg()
            b(f"add.u32 {self.own_turn}, {index}, {TURN_BARRIER};", f"xor.b32 {self.next_turn}, {index}, 1;",
              f"add.u32 {self.next_turn}, {self.next_turn}, {TURN_BARRIER};")
        self.op_a, self.op_b = operand_a(g, plan), operand_b(g, plan)
        self.a_base, self.b_base = b.reg(), b.reg()
        b(f"mad.lo.u32 {self.a_base}, {self.share}, {self.rows * plan.span_a}, {k.smem};",
          f"add.u32 {self.a_base}, {self.a_base}, {plan.a_offset};",
          f"add.u32 {self.b_base}, {k.smem}, {plan.b_offset};")
        self.thread_row, self.thread_col = self.fragment_origin(self.share)
        self.acc = [[[b.reg("f32") for _ in range(plan.wgmma_n // 2)] for _ in range(g.bn // plan.wgmma_n)]
                    for _ in range(self.rows // 64)]
        self.staging = self.staging_setup(index, leader) if plan.staging is not None else None
        self.pending = None
        if plan.deferred_epilogue:  # a tile's stores wait, packed, until the next tile's first wgmmas
            self.pending, self.pending_row, self.pending_col = b.pred(), b.reg(), b.reg()
            self.packed = packed_registers(b, len(self.acc), g.bn)
            b(f"setp.ne.u32 {self.pending}, 0, 0;")
        self.run_program(k.proto.consumer, leader)
        self.store_pending()
        if self.staging is not None:  # the CTA's shared memory must outlive the last TMA store
            b(f"@{leader} {tma.store_wait(0, read_only=False)}")
        if plan.multicast > 1:  # the peer's consumers may still arrive on this CTA's barriers
            from . import multicast
            multicast.cluster_sync(b)

    def staging_setup(self, index: str, leader: str) -> Staging:
        k, b, plan = self.k, self.b, self.k.plan
        base, warp, barrier = b.reg(), b.reg(), b.reg()
        b(f"mad.lo.u32 {base}, {index}, {self.rows * plan.staging_cols * 2}, {k.smem};",
          f"add.u32 {base}, {base}, {plan.staging};", f"shr.u32 {warp}, {k.tid_wg}, 5;",
          f"add.u32 {barrier}, {index}, {FIRST_CONSUMER_BARRIER};")
        raw, tmap = b.reg("b64"), b.reg("b64")
        b(*tma.generic_address(k.maps["c"].symbol, raw, tmap))
        return Staging(base, staging_lanes(b, base, k.lane, warp), barrier, leader, plan.staging_cols, tmap)

    def fragment_origin(self, index: str) -> tuple[str, str]:
        """The thread's first accumulator row (within the tile) and column: 16w + l/4, 2(l%4)."""
        b = self.b
        warp, row, col = b.reg(), b.reg(), b.reg()
        b(f"shr.u32 {warp}, {self.k.tid_wg}, 5;", f"shr.u32 {row}, {self.k.lane}, 2;",
          f"mad.lo.u32 {row}, {warp}, 16, {row};", f"mad.lo.u32 {row}, {index}, {self.rows}, {row};",
          f"and.b32 {col}, {self.k.lane}, 3;", f"shl.b32 {col}, {col}, 1;")
        return row, col

    # -- ping-pong: the CTA's tiles index, index + 2, ..., turns on the tensor cores ----------
    def first_tile(self) -> None:
        if not self.k.plan.pingpong:
            return super().first_tile()
        self.b(f"mad.lo.s32 {self.tile}, {self.index}, {self.k.grid_step}, {self.k.first};")

    def next_tile(self) -> None:
        if not self.k.plan.pingpong:
            return super().next_tile()
        self.b(f"mad.lo.s32 {self.tile}, {self.k.grid_step}, {self.k.plan.consumers}, {self.tile};")

    def has_prev_tile(self) -> str:
        p = self.b.pred()
        self.b(f"setp.ne.s32 {p}, {self.tile}, {self.k.first};")
        return p

    def has_next_tile(self) -> str:
        p, after = self.b.pred(), self.b.reg()
        self.b(f"add.s32 {after}, {self.tile}, {self.k.grid_step};", f"setp.lt.s32 {p}, {after}, {self.tile_count};")
        return p

    def turn_wait(self, step) -> None:
        self.b(f"bar.sync {self.own_turn}, {2 * 128};")

    def turn_pass(self, step) -> None:
        self.b(f"bar.arrive {self.next_turn}, {2 * 128};")

    def tile_begin(self) -> None:
        super().tile_begin()
        zero = "0f00000000"
        for slab in self.acc:
            for piece in slab:
                self.b(*(f"mov.f32 {r}, {zero};" for r in piece))

    def mma(self, step) -> None:
        g, plan, b = self.k.g, self.k.plan, self.b
        r = self.rings[step.rings[0]]
        stage_off, a_addr, b_addr = b.reg(), b.reg(), b.reg()
        b(f"mul.lo.u32 {stage_off}, {r.s}, {plan.stage_stride};",
          f"add.u32 {a_addr}, {self.a_base}, {stage_off};", f"add.u32 {b_addr}, {self.b_base}, {stage_off};")
        desc_a, desc_b = self.descriptor(a_addr, self.op_a), self.descriptor(b_addr, self.op_b)
        lines = [wgmma.FENCE]
        tb = 1 if g.b_major == "MN" else 0
        for ks in range(g.bk // 16):
            a_descs = [self.at(desc_a, self.op_a.offset(ks, 64 * slab))
                       for slab in range(len(self.acc))]
            b_descs = [self.at(desc_b, self.op_b.offset(ks, plan.wgmma_n * piece))
                       for piece in range(len(self.acc[0]))]
            for slab, pieces in enumerate(self.acc):
                for piece, regs in enumerate(pieces):
                    lines.append(wgmma.mma_instruction(plan.wgmma_n, g.dtype, regs, a_descs[slab],
                                                       b_descs[piece], tb))
        lines.append(wgmma.COMMIT)
        b(*lines)
        self.store_pending()

    def store_pending(self) -> None:
        """The deferred epilogue: when the last tile's packed accumulators wait (``pending``),
        stmatrix and TMA-store them now -- after this tile's first wgmma group is issued, so the
        tensor cores work under the stores -- or after the last tile."""
        if self.pending is None:
            return
        g, plan, b = self.k.g, self.k.plan, self.b
        skip = b.label("no_pending_tile")
        b(f"@!{self.pending} bra {skip};")
        store_staged(b, self.staging, self.acc, plan.wgmma_n, g.bn, self.pending_row, self.pending_col,
                     g.c_dtype, self.packed)
        b(f"setp.ne.u32 {self.pending}, 0, 0;")
        b.place(skip)

    def tile_end(self) -> None:
        k, g, plan, b = self.k, self.k.g, self.k.plan, self.b
        dim_m, dim_n = k.shape(g.c)
        row0, col0 = b.reg(), b.reg()
        b(f"mad.lo.s32 {row0}, {self.m}, {g.bm}, {self.thread_row};",
          f"mad.lo.s32 {col0}, {self.n}, {g.bn}, {self.thread_col};")
        registers, done = b.label("register_stores"), b.label("tile_stored")
        if plan.split > 1:
            self.store_split_part(row0, col0, dim_m, dim_n)
            return
        if k.sk is not None:
            self.stream_k_fixup(done)
        if self.staging is not None:
            tile_row, tile_col = b.reg(), b.reg()
            b(f"mul.lo.s32 {tile_row}, {self.m}, {g.bm};", f"mad.lo.s32 {tile_row}, {self.share}, {self.rows}, {tile_row};",
              f"mul.lo.s32 {tile_col}, {self.n}, {g.bn};", f"@!{k.c_tma_ok} bra {registers};")
            if self.pending is not None:
                self.store_pending()  # a tile without K steps issued no wgmma: its predecessor waits
                pack_tile(b, self.acc, plan.wgmma_n, g.c_dtype, self.packed)
                b(f"mov.b32 {self.pending_row}, {tile_row};", f"mov.b32 {self.pending_col}, {tile_col};",
                  f"setp.eq.u32 {self.pending}, 0, 0;")
            else:
                store_staged(b, self.staging, self.acc, plan.wgmma_n, g.bn, tile_row, tile_col, g.c_dtype)
            b(f"bra.uni {done};")
        b.place(registers)
        inside = self.tile_inside(dim_m, dim_n)
        with k.globals.fallback() if self.staging is not None else nullcontext():  # staged: C's rows unaligned
            c_address = k.globals[g.c]
        for slab, pieces in enumerate(self.acc):
            for piece, regs in enumerate(pieces):
                row, col = b.reg(), b.reg()
                b(f"add.s32 {row}, {row0}, {64 * slab};", f"add.s32 {col}, {col0}, {plan.wgmma_n * piece};")
                store_fragment(b, Fragment(tuple(regs), row, col, plan.wgmma_n), c_address,
                               dim_m, dim_n, g.c_dtype, inside)
        b.place(done)

    def stream_k_fixup(self, stored: str) -> None:
        """A stream-K unit (streamk.py): a contribution stores its accumulators to the workspace
        and skips the tile's store (to ``stored``); an owned unit adds the contributions first."""
        from . import streamk
        k, b, plan = self.k, self.b, self.k.plan
        regs = [r for slab in self.acc for piece in slab for r in piece]
        owned, whole, p = b.label("streamk_owned"), b.label("streamk_whole"), b.pred()
        slot_bytes = streamk_slot_bytes(k.g, plan)
        first, trips = self.unit_bounds()
        b(f"setp.eq.s32 {p}, {first}, 0;", f"@{p} bra {owned};")
        self.store_pending()
        streamk.contribute(b, k.g.kernel.name, regs, k.sk.cta(), slot_bytes, plan.consumers, self.index, k.tid_wg)
        b(f"bra.uni {stored};")
        b.place(owned)
        b(f"setp.ge.s32 {p}, {trips}, {k.sk.trips};", f"@{p} bra {whole};")
        streamk.gather(b, k.g.kernel.name, k.sk, regs, self.tile, slot_bytes, plan.consumers, self.index, k.tid_wg)
        b.place(whole)

    def store_split_part(self, row0: str, col0: str, dim_m: str, dim_n: str) -> None:
        """Add the cluster's partials of this CTA's part (reduce.py) and store that part to C
        from registers (the part is whole 8-column groups of one slab and wgmma piece each)."""
        from . import reduce
        k, g, plan, b = self.k, self.k.g, self.k.plan, self.b
        flat = [(slab, piece, i) for slab, pieces in enumerate(self.acc)
                for piece, regs in enumerate(pieces) for i in range(len(regs))]
        regs = [self.acc[s][p][i] for s, p, i in flat]
        buffer = b.reg()
        b(f"add.u32 {buffer}, {k.smem}, {plan.reduce_offset};")
        reduce.reduce_scatter(b, regs, plan.split, k.rank, buffer, self.index, plan.consumers, k.tid_wg)
        inside = self.tile_inside(dim_m, dim_n)
        done = b.label("part_stored")
        n = len(regs) // plan.split
        for p in range(plan.split):
            other, end = b.pred(), b.label(f"part_{p}_stored")
            b(f"setp.ne.u32 {other}, {k.rank}, {p};", f"@{other} bra.uni {end};")
            part = flat[p * n:(p + 1) * n]
            for (slab, piece) in dict.fromkeys((s_, p_) for s_, p_, _ in part):
                idx = [i for s_, p_, i in part if (s_, p_) == (slab, piece)]
                row, col = b.reg(), b.reg()
                b(f"add.s32 {row}, {row0}, {64 * slab};",
                  f"add.s32 {col}, {col0}, {plan.wgmma_n * piece + 2 * idx[0]};")
                frag = Fragment(tuple(self.acc[slab][piece][i] for i in idx), row, col, 2 * len(idx))
                store_fragment(b, frag, k.globals[g.c], dim_m, dim_n, g.c_dtype, inside)
            b(f"bra.uni {done};")
            b.place(end)
        b.place(done)

    def tile_inside(self, dim_m: str, dim_n: str) -> str:
        """'The whole tile lies inside C and N is even' (pairs of columns are aligned)."""
        g, b = self.k.g, self.b
        end_m, end_n, odd = b.reg(), b.reg(), b.reg()
        p_m, p_n, p_even, inside = b.pred(), b.pred(), b.pred(), b.pred()
        b(f"mad.lo.s32 {end_m}, {self.m}, {g.bm}, {g.bm};", f"mad.lo.s32 {end_n}, {self.n}, {g.bn}, {g.bn};",
          f"setp.le.s32 {p_m}, {end_m}, {dim_m};", f"setp.le.s32 {p_n}, {end_n}, {dim_n};",
          f"and.b32 {odd}, {dim_n}, 1;", f"setp.eq.s32 {p_even}, {odd}, 0;",
          f"and.pred {inside}, {p_m}, {p_n};", f"and.pred {inside}, {inside}, {p_even};")
        return inside

