"""The warp-specialized attention-forward kernel (FlashAttention-3 style): PTX and metadata.

    warpgroup 0   producer: setmaxnreg.dec; one thread, per tile, loads Q once (one-shot full/
                  empty pair) and K and V of every key block into an S-stage ring (TMA boxes of
                  64 head-dim columns, rank-N tensor maps so that TMA clips at each head's end)
    warpgroups 1+ consumers: setmaxnreg.inc; each owns 64 query rows. Trip j: wait full[s]; at its
                  turn (ping-pong: named barrier 4 + c, handed on 0 -> 1 (-> 2) -> 0, so the
                  others' softmax overlaps one consumer's wgmmas) issue S_j = Q·K_jᵀ (wgmma SS, K K-major) and O += P_{j-1}·V_{j-1}
                  (wgmma RS: P from registers, V MN-major, tB = 1) as two groups; wait_group 1
                  (S_j landed) and run the online softmax on the accumulator fragments while
                  P_{j-1}·V_{j-1} still runs (row max over a quad with shfl.bfly 1, 2, of the raw
                  scores when the scale c > 0, then ex2(s·c - m·c), one FFMA each; -inf past the diagonal (causal) or past N only on the blocks that
                  need it); wait_group 0, release stage j-1, O *= alpha, P_j packed to bf16 pairs
                  in registers. After the loop the last P·V, then O / l (bf16) and
                  L = (max + log2 l) ln 2 stored under row < N.

The turns restart with every tile (consumer 0 opens it, the last consumer's last turn hands
nothing on); with two Q slots each slot's tiles take their turns on their own named barriers, or
one rotation runs on over the CTA's tiles (``AttentionPlan.turns`` says why: restarting them on
one set of barriers let consumer 0 overtake and hang the CTA).

A consumer whose 64 rows of a tile all lie past N (consumers 1 and 2 of the last query tile at
D=64, BQ=192, N=1024) runs an idle copy of the tile body: the same barrier waits, releases, turns
and ring advances, no wgmma, softmax or store (``Consumer.busy_or_idle``; causal kernels by
default, see ``attention_plan.IDLE_COPY``; not with cross-tile overlap).

Kernels are persistent (tile += nctaid, rings and phases carried on): non-causal ones launch
min(tiles, SMs) CTAs; causal ones (heaviest tiles first) that many where the key loop is short,
else one CTA per tile (attention_plan.launch_grid and SHORT_CAUSAL_TRIPS say why).
The control flow of both roles is the protocol ``attention_protocol`` builds (the standard
one-shot + pipelined-loop protocol of passes/sync_protocol.py, which the CPU checker explores).
The index arithmetic (the key/value head, the trip count, the mask offsets and scales) is the
IR's own scalar code (scalars.py); the softmax on the accumulator fragments is
attention_softmax.py's.
"""
from __future__ import annotations

from dataclasses import replace

from ...passes.sync_protocol import (Advance, IfPrevTile, IfTrips, Load, Loop, LoopPlan, Mma, MmaWait, NotFirst,
                                     OneShotUse, Protocol, Release, Ring, Tiles, Wait, producer_fill,
                                     standard_protocol)
from ..abi import Pointers, map_only, param_entries
from . import mbarrier, tma, wgmma
from .attention_match import AttentionMatch
from .attention_plan import L2_BUDGET, AttentionPlan, launch_grid, operand_k, operand_q, operand_v
from .attention_softmax import NEG_INF, SoftmaxEmitter
from .builder import Builder
from .program import ARCH, SMEM_SYMBOL, RingRegs, RoleEmitter, module_text
from .scalars import ScalarEmitter

Q_RING, KV_RING, K_RING, V_RING = "q", "kv", "k", "v"
PANEL = 64
"""Head-dim columns per 128-byte swizzled panel (one TMA box)."""
TURN_BARRIER = 4
"""Named barriers 4 + c: consumer c's turn to issue wgmmas (ping-pong); 0 is the CTA's."""


def attention_protocol(m: AttentionMatch, plan: AttentionPlan) -> Protocol:
    """Q: a one-shot ring per tile (``plan.q_slots`` slots); K and V: one ring of ``stages``. The
    one wgmma group per trip of the protocol stands for the two wgmmas that read a stage: S_j =
    Q·K_jᵀ, issued in trip j, and O += P_j·V_j, issued with S_{j+1} in trip j+1 (after the loop for
    the last stage). Both are retired by the wait_group 0 of trip j+1 (of the drain) before the
    stage is released as "prev", which is what the protocol says: the stage is held until then.
    With ``plan.split_kv`` K and V are two rings (``split_protocol``)."""
    q_bytes, kv_bytes = m.bq * m.d * 2, m.bkv * m.d * 2
    q = Ring(Q_RING, plan.q_slots, (Load("q", q_bytes),), q_bytes, plan.consumers, one_shot=True,
             where="Q, once per tile")
    if plan.cross_tile:
        return cross_tile_protocol(m.kernel.name, plan, q, kv_bytes)
    if plan.split_kv:
        return split_protocol(m.kernel.name, plan, q, kv_bytes)
    kv = Ring(KV_RING, plan.stages, (Load("k", kv_bytes), Load("v", kv_bytes)), 2 * kv_bytes,
              plan.consumers, where="the key loop")
    items = (OneShotUse(Q_RING), LoopPlan(KV_RING, ((Q_RING, KV_RING),)))
    proto = standard_protocol(m.kernel.name, plan.consumers, plan.persistent, (q, kv), items)
    return own_trips_protocol(proto) if plan.own_trips else proto


def own_trips_protocol(proto: Protocol) -> Protocol:
    """Causal tiles whose consumers' rows reach different key blocks (``plan.own_trips``): the
    standard consumer runs its loop, drain and release over its own trips only, then takes the
    tile's remaining trips idle: it waits for the stage's fill (so that its release counts toward
    this fill, not the previous one, which another consumer may still be reading), releases the
    stage at once and advances. The producer fills every trip as before."""
    (tiles,) = proto.consumer
    body = []
    for st in tiles.body:
        if isinstance(st, IfTrips) and st.ring == KV_RING:
            loop, *drain = st.body
            body += [IfTrips(KV_RING, (replace(loop, part="own"), *drain), part="own"),
                     Loop(KV_RING, (Wait(KV_RING, "full"), Release(KV_RING), Advance(KV_RING)), part="rest")]
        else:
            body.append(st)
    return replace(proto, consumer=(replace(tiles, body=tuple(body)),))


def split_protocol(name: str, plan: AttentionPlan, q: Ring, kv_bytes: int) -> Protocol:
    """K and V as two rings of the same stages, each with its own full and empty barriers. The V
    ring runs one trip behind K on the consumer side: trip j waits for K_j and (from the second
    trip on) V_{j-1}, issues S_j and O += P_{j-1}·V_{j-1} as two groups, releases K_j once both
    retired and V_{j-1} with it; the last V after the loop."""
    k = Ring(K_RING, plan.stages, (Load("k", kv_bytes),), kv_bytes, plan.consumers,
             where="the key loop, K (read by S = Q·Kᵀ)")
    v = Ring(V_RING, plan.stages, (Load("v", kv_bytes),), kv_bytes, plan.consumers,
             where="the key loop, V (read by O += P·V a trip later)")
    producer = (Tiles((*producer_fill(q), Loop(K_RING, producer_fill(k) + producer_fill(v)))),)
    last_pv = (Wait(V_RING, "full"), Mma((V_RING,)), MmaWait(0), Release(V_RING), Advance(V_RING))
    trip = (Wait(K_RING, "full"), NotFirst((Wait(V_RING, "full"),)), Mma((Q_RING, K_RING)),
            NotFirst((Mma((V_RING,)),)), MmaWait(1), MmaWait(0), Release(K_RING),
            NotFirst((Release(V_RING), Advance(V_RING))), Advance(K_RING))
    consumer = (Tiles((Wait(Q_RING, "full"), IfTrips(K_RING, (Loop(K_RING, trip), *last_pv)),
                       MmaWait(0), Release(Q_RING), Advance(Q_RING))),)
    return Protocol(name, plan.consumers, plan.persistent, (q, k, v), producer, consumer)


def cross_tile_protocol(name: str, plan: AttentionPlan, q: Ring, kv_bytes: int) -> Protocol:
    """Cross-tile overlap (``plan.cross_tile``): the split K/V rings of ``split_protocol``, the V
    ring one trip behind K across tile boundaries too. Each tile's first trip is peeled: it waits
    for its Q (the other slot), K_0 and, after the CTA's first tile, the previous tile's last V,
    and issues S_0 = Q·K_0ᵀ and that tile's last P·V in one turn; its V is released (and the
    previous tile's O stored) once both retired. The loop runs trips 1 .. T-1 (every tile of a
    non-causal kernel has a key block: ``min_trips``). A tile's Q is released at its end (its last
    S retired in its last trip); the CTA's last P·V drains after the tile loop."""
    k = Ring(K_RING, plan.stages, (Load("k", kv_bytes),), kv_bytes, plan.consumers,
             where="the key loop, K (read by S = Q·Kᵀ)")
    v = Ring(V_RING, plan.stages, (Load("v", kv_bytes),), kv_bytes, plan.consumers,
             where="the key loop, V (read by O += P·V a trip later, across tiles)")
    producer = (Tiles((*producer_fill(q), Loop(K_RING, producer_fill(k) + producer_fill(v), min_trips=1))),)
    first = (Wait(K_RING, "full"), IfPrevTile((Wait(V_RING, "full"),)), Mma((Q_RING, K_RING)),
             IfPrevTile((Mma((V_RING,)),)), MmaWait(1), MmaWait(0), Release(K_RING),
             IfPrevTile((Release(V_RING), Advance(V_RING))), Advance(K_RING))
    trip = (Wait(K_RING, "full"), Wait(V_RING, "full"), Mma((Q_RING, K_RING)), Mma((V_RING,)), MmaWait(1),
            MmaWait(0), Release(K_RING), Release(V_RING), Advance(V_RING), Advance(K_RING))
    consumer = (Tiles((Wait(Q_RING, "full"), *first, Loop(K_RING, (NotFirst(trip),), min_trips=1),
                       Release(Q_RING), Advance(Q_RING))),
                Wait(V_RING, "full"), Mma((V_RING,)), MmaWait(0), Release(V_RING), Advance(V_RING))
    return Protocol(name, plan.consumers, plan.persistent, (q, k, v), producer, consumer)


class AttentionKernel:
    """Registers and helpers both roles share."""

    def __init__(self, m: AttentionMatch, plan: AttentionPlan):
        self.m, self.plan = m, plan
        self.b = Builder()
        self.proto = attention_protocol(m, plan)
        self.entries = [entry[:3] for entry in param_entries(self.m.kernel)]
        name = m.kernel.name
        self.maps = {key: tma.TensorMap(f"{name}_tmap_{n}", idx, m.params[idx].hint, "bf16",
                                        (PANEL, rows) + (1,) * (m.params[idx].type.rank - 2), plan.swizzle,
                                        fallback=False)
                     for n, (key, idx, rows) in enumerate((("q", m.q, m.bq), ("k", m.k, m.bkv),
                                                          ("v", m.v, m.bkv)))}

    # -- the kernel -----------------------------------------------------------------------
    def emit(self) -> tuple[str, dict]:
        b, plan = self.b, self.plan
        self.prologue()
        producer, done = b.pred(), b.label("exit")
        producer_label = b.label("producer")
        b(f"setp.eq.u32 {producer}, {self.wg}, 0;", f"@{producer} bra {producer_label};")
        Consumer(self).run()
        b(f"bra.uni {done};")
        b.place(producer_label)
        b(f"setmaxnreg.dec.sync.aligned.u32 {plan.regs[0]};")
        Producer(self).run(done)
        b.place(done)
        b("ret;")
        return self.module_text(), self.metadata()

    def prologue(self) -> None:
        b, m, plan = self.b, self.m, self.plan
        tid, self.wg, self.tid_wg, self.lane = b.reg(), b.reg(), b.reg(), b.reg()
        b(f"mov.u32 {tid}, %tid.x;", f"shr.u32 {self.wg}, {tid}, 7;", f"and.b32 {self.tid_wg}, {tid}, 127;",
          f"and.b32 {self.lane}, {tid}, 31;")
        raw, self.smem = b.reg(), b.reg()
        b(f"mov.u32 {raw}, {SMEM_SYMBOL};", f"add.u32 {self.smem}, {raw}, 1023;",
          f"and.b32 {self.smem}, {self.smem}, -1024;")
        self.globals = Pointers()  # by parameter index; remembers which ones emitters read
        self.scalars = {}
        for i, (ptx, name, meta) in enumerate(self.entries):
            if meta["kind"] == "global" and i in (m.o, m.l):
                raw64, addr = b.reg("b64"), b.reg("b64")
                b(f"ld.param.u64 {raw64}, [{name}];", f"cvta.to.global.u64 {addr}, {raw64};")
                self.globals[i] = addr
            elif meta["kind"] == "scalar":
                r = b.reg("f32" if ptx == ".f32" else "b32")
                b(f"ld.param{ptx} {r}, [{name}];")
                self.scalars[m.params[i]] = r
            elif meta["kind"] == "dim":
                r = b.reg()
                b(f"ld.param.s32 {r}, [{name}];")
                b.dims[meta["name"]] = r
        from ..kernel import grid_expr
        self.counts = [b.expr(grid_expr(v, m.blocks)) for v in m.blocks.variadic()]
        self.tile_count, heads = b.reg(), b.reg()
        b(f"mul.lo.s32 {heads}, {self.counts[0]}, {self.counts[1]};",
          f"mul.lo.s32 {self.tile_count}, {heads}, {self.counts[2]};")
        self.heads = heads
        self.chunk = self.head_chunk() if plan.heavy_first else None
        self.q_full = b.reg()
        b(f"add.u32 {self.q_full}, {self.smem}, {plan.q_bars};")
        self.q_empty = b.reg()
        b(f"add.u32 {self.q_empty}, {self.q_full}, {8 * plan.q_slots};")
        self.full = b.reg()
        b(f"add.u32 {self.full}, {self.smem}, {plan.bars};")
        self.empty = b.reg()
        b(f"add.u32 {self.empty}, {self.full}, {8 * plan.stages};")
        self.bar_bases = {Q_RING: (self.q_full, self.q_empty), KV_RING: (self.full, self.empty),
                          K_RING: (self.full, self.empty)}
        if plan.split_kv:
            v_full, v_empty = b.reg(), b.reg()
            b(f"add.u32 {v_full}, {self.smem}, {plan.v_bars};", f"add.u32 {v_empty}, {v_full}, {8 * plan.stages};")
            self.bar_bases[V_RING] = (v_full, v_empty)
        leader, ready = b.pred(), b.label("barriers_ready")
        b(f"setp.ne.u32 {leader}, {tid}, 0;", f"@{leader} bra {ready};")
        for ring in self.proto.rings:
            full, empty = self.bar_bases[ring.name]
            for s in range(ring.stages):
                b(mbarrier.init(f"{full}+{8 * s}", 1), mbarrier.init(f"{empty}+{8 * s}", plan.consumers))
        b(mbarrier.INIT_FENCE)
        b.place(ready)
        b("bar.sync 0;")

    def dim(self, d) -> str:
        return self.b.dims[d] if isinstance(d, str) else self.b.mov(d)

    def head_chunk(self) -> str:
        """Heads per chunk of the causal block order: as many as keep K and V in the L2 budget."""
        b, m = self.b, self.m
        rows = self.dim(m.params[m.k].type.dims[-2])
        per_head, chunk = b.reg(), b.reg()
        b(f"mul.lo.s32 {per_head}, {rows}, {4 * m.d};", f"max.s32 {per_head}, {per_head}, 1;",
          f"div.s32 {chunk}, {L2_BUDGET}, {per_head};", f"max.s32 {chunk}, {chunk}, 1;",
          f"min.s32 {chunk}, {chunk}, {self.heads};")
        return chunk

    def tile_coords(self, t: str) -> tuple[str, str, str]:
        """(b, h, i) of linear tile ``t``."""
        b = self.b
        n_h, n_i = self.counts[1], self.counts[2]
        head, i = b.reg(), b.reg()
        if self.chunk is None:
            b(f"div.s32 {head}, {t}, {n_i};", f"mul.lo.s32 {i}, {head}, {n_i};", f"sub.s32 {i}, {t}, {i};")
        else:
            per, first, height, inside, ii, hh = (b.reg() for _ in range(6))
            b(f"mul.lo.s32 {per}, {self.chunk}, {n_i};", f"div.s32 {first}, {t}, {per};",
              f"mul.lo.s32 {inside}, {first}, {per};", f"sub.s32 {inside}, {t}, {inside};",
              f"mul.lo.s32 {first}, {first}, {self.chunk};",
              f"sub.s32 {height}, {self.heads}, {first};", f"min.s32 {height}, {height}, {self.chunk};",
              f"div.s32 {ii}, {inside}, {height};", f"mul.lo.s32 {hh}, {ii}, {height};",
              f"sub.s32 {hh}, {inside}, {hh};", f"add.s32 {head}, {first}, {hh};",
              f"sub.s32 {i}, {n_i}, 1;", f"sub.s32 {i}, {i}, {ii};")
        bb, h = b.reg(), b.reg()
        b(f"div.s32 {bb}, {head}, {n_h};", f"mul.lo.s32 {h}, {bb}, {n_h};", f"sub.s32 {h}, {head}, {h};")
        return bb, h, i

    def ring_regs(self) -> dict[str, RingRegs]:
        b, out = self.b, {}
        for ring in self.proto.rings:
            full, empty = self.bar_bases[ring.name]
            s, ph = b.reg(), b.reg()
            b(f"mov.b32 {s}, 0;", f"mov.b32 {ph}, 0;")
            out[ring.name] = RingRegs(ring, full, empty, s, ph, b.mov(0))
        return out

    @property
    def loop_ring(self) -> str:
        """The ring whose loop is the key loop (its counter is j)."""
        return K_RING if self.plan.split_kv else KV_RING

    # -- text -----------------------------------------------------------------------------
    def module_text(self) -> str:
        return module_text("attention", self.m.kernel.name, self.entries, self.maps.values(), self.plan,
                           self.b.body())

    def metadata(self) -> dict:
        from ..kernel import grid_expr
        m, plan = self.m, self.plan
        c = [grid_expr(v, m.blocks) for v in m.blocks.variadic()]
        params = [dict(meta) for _, _, meta in self.entries if meta["kind"] != "dim"]
        maps = [t.entry() for t in self.maps.values()]
        map_only(params, maps, self.globals.read)  # tensors only TMA addresses take views' strides
        params += maps
        tiles = ["mul", ["mul", c[0], c[1]], c[2]]
        grid = launch_grid(m, plan, tiles)
        return {"name": m.kernel.name, "entry": m.kernel.name, "arch": ARCH, "backend": "wgmma",
                "params": params, "dims": m.kernel.named_dims(), "grid": [grid],
                "block": [plan.threads, 1, 1], "smem_bytes": plan.smem_bytes,
                "num_warps": plan.threads // 32, "registers": list(plan.regs),
                "protocol": self.proto.text(), "decisions": list(plan.decisions)}


class Role(RoleEmitter):
    def __init__(self, k: AttentionKernel):
        super().__init__(k.b, k.proto)
        self.k, self.m = k, k.m
        self.tile_count = k.tile_count

    def run_program(self, program, leader: str | None) -> None:
        self.rings = self.k.ring_regs()
        self.leader = leader
        self.tile = self.b.reg()
        self.emit(program)

    def first_tile(self) -> None:
        self.b(f"mov.u32 {self.tile}, %ctaid.x;")

    def next_tile(self) -> None:
        step = self.b.reg()
        self.b(f"mov.u32 {step}, %nctaid.x;", f"add.s32 {self.tile}, {self.tile}, {step};")

    def tile_begin(self) -> None:
        """Tile coordinates, the IR's scalars over them, and the key loop's trip count."""
        k, m = self.k, self.m
        bb, h, i = k.tile_coords(self.tile)
        self.i = i
        env = dict(k.scalars)
        env.update(zip(m.block_args, (bb, h, i)))
        self.ev = ScalarEmitter(self.b, env)
        trips = self.ev.value(m.trips)
        for name in (self.k.loop_ring, V_RING) if self.k.plan.split_kv else (KV_RING,):
            self.b(f"mov.b32 {self.rings[name].trips}, {trips};")

    def inner(self, j: str | None = None) -> ScalarEmitter:
        """An emitter for the key loop's scalars (j = this trip, or the register ``j``), over the tile's."""
        ev = ScalarEmitter(self.b, self.ev.env)
        ev.env[self.m.j] = j or self.rings[self.k.loop_ring].counter
        return ev

    def q_slot(self, offset: int) -> str:
        """The shared address of this tile's Q slot (+ ``offset``): the Q ring's stage s."""
        b, plan = self.b, self.k.plan
        addr = b.reg()
        b(f"add.u32 {addr}, {self.k.smem}, {plan.q_offset + offset};")
        if plan.q_slots == 2:
            second = b.pred()
            b(f"setp.ne.u32 {second}, {self.rings[Q_RING].s}, 0;",
              f"@{second} add.u32 {addr}, {addr}, {plan.q_offset2 - plan.q_offset};")
        return addr


class Producer(Role):
    """One thread of warpgroup 0 issues every TMA copy."""

    def run(self, done: str) -> None:
        k, b = self.k, self.b
        others = b.pred()
        b(f"setp.ne.u32 {others}, {k.tid_wg}, 0;", f"@{others} bra {done};")
        self.maps = {}
        for key, t in k.maps.items():
            raw, addr = b.reg("b64"), b.reg("b64")
            b(*tma.generic_address(t.symbol, raw, addr), tma.prefetch(addr))
            self.maps[key] = addr
        self.run_program(k.proto.producer, None)

    def tma_load(self, step) -> None:
        m, plan, b = self.m, self.k.plan, self.b
        r = self.rings[step.ring]
        bar = self.bar(r, "full")
        if step.load == "q":
            ev, load, rows, base, row_index = self.ev, m.q_load, m.bq, 0, self.i
            dst0 = self.q_slot(0)
        else:
            ev = self.inner()
            load, rows = (m.k_load, m.bkv) if step.load == "k" else (m.v_load, m.bkv)
            base = plan.k_offset if step.load == "k" else plan.v_offset
            row_index = self.rings[self.k.loop_ring].counter
            dst0 = b.reg()
            b(f"mad.lo.u32 {dst0}, {r.s}, {plan.stage_stride}, {self.k.smem};")
        row = b.reg()
        b(f"mul.lo.s32 {row}, {row_index}, {rows};")
        lead = [ev.value(c) for c in load.variadic()[:-2]]
        for p in range(m.d // PANEL):
            dst, col = b.reg(), b.reg()
            b(f"add.u32 {dst}, {dst0}, {base + p * rows * 128};", f"mov.b32 {col}, {p * PANEL};")
            b(tma.load_nd(dst, self.maps[step.load], [col, row, *reversed(lead)], bar))


class Consumer(SoftmaxEmitter, Role):
    """Consumer warpgroups 1..N: 64 query rows each."""

    def run(self) -> None:
        k, b, m, plan = self.k, self.k.b, self.m, self.k.plan
        b(f"setmaxnreg.inc.sync.aligned.u32 {plan.regs[1]};")
        self.index = b.reg()
        b(f"sub.u32 {self.index}, {k.wg}, 1;")
        leader = b.pred()
        b(f"setp.eq.u32 {leader}, {k.tid_wg}, 0;")
        self.op_q, self.op_k, self.op_v = operand_q(m, plan), operand_k(m, plan), operand_v(m, plan)
        self.q_slab = b.reg()  # this consumer's 64 rows of Q, from its slot's start
        b(f"mul.lo.u32 {self.q_slab}, {self.index}, {64 * plan.swizzle};")
        warp, quad_col = b.reg(), b.reg()
        self.row_in_tile = b.reg()  # 64 * consumer + 16 * warp + lane / 4 (and + 8)
        b(f"shr.u32 {warp}, {k.tid_wg}, 5;", f"shr.u32 {self.row_in_tile}, {k.lane}, 2;",
          f"mad.lo.u32 {self.row_in_tile}, {warp}, 16, {self.row_in_tile};",
          f"mad.lo.u32 {self.row_in_tile}, {self.index}, 64, {self.row_in_tile};",
          f"and.b32 {quad_col}, {k.lane}, 3;", f"shl.b32 {quad_col}, {quad_col}, 1;")
        self.quad_col = quad_col
        self.o = [b.reg("f32") for _ in range(m.d // 2)]
        self.s = [b.reg("f32") for _ in range(m.bkv // 2)]
        self.p = [b.reg() for _ in range(m.bkv // 4)]
        self.mx = [b.reg("f32") for _ in range(2)]
        self.l = [b.reg("f32") for _ in range(2)]
        self.drain_pending = False
        self.peeled = False
        self.idle = False  # emitting the idle copy of the tile body (``busy_or_idle``)
        n = plan.consumers
        self.own_turn, self.next_turn = b.reg(), b.reg()  # (tile_begin: + n·slot, turns per slot)
        b(f"add.u32 {self.own_turn}, {self.index}, {TURN_BARRIER};",
          f"add.u32 {self.next_turn}, {self.index}, 1;", f"rem.u32 {self.next_turn}, {self.next_turn}, {n};",
          f"add.u32 {self.next_turn}, {self.next_turn}, {TURN_BARRIER};")
        self.kind = None  # cross-tile: which trip is being emitted ("first", "boundary", "loop", "drain")
        self.later = False  # cross-tile: emitting the copy of the tile body that has a previous tile
        if plan.cross_tile:
            self.mx_prev = [b.reg("f32") for _ in range(2)]
            self.l_prev = [b.reg("f32") for _ in range(2)]
            self.snap = (b.reg(), b.reg(), b.reg(), b.reg("f32"), b.reg("f32"), b.pred())
            self.no_tile = b.label("no_tile")
        self.run_program(k.proto.consumer, leader)
        if plan.cross_tile:
            b.place(self.no_tile)

    def tiles(self, step) -> None:
        """Every tile's body in a busy and an idle copy (``busy_or_idle``); with cross-tile overlap,
        the tile body twice, for the CTA's first tile (no previous tile: its first trip issues S_0
        alone) and for the rest (the first trip also issues the previous tile's last P·V and stores
        that tile), so that no wgmma sits under a branch (C7519). After each tile what its epilogue
        needs is kept (``snapshot``): it runs in the next tile's first trip or after the loop.
        Cross-tile has no idle copy: a tile's last P·V and store run in the next tile's first trip,
        so it would take one copy per pair of consecutive tiles."""
        if not self.k.plan.cross_tile:
            if self.k.plan.idle_copy:
                self.busy_or_idle(step)
            else:
                super().tiles(step)
            return
        b = self.b
        top, end = b.label("tile"), b.label("tiles_done")
        self.first_tile()
        for later in (False, True):
            if later:
                b.place(top)
            done = b.pred()
            b(f"setp.ge.s32 {done}, {self.tile}, {self.tile_count};",
              f"@{done} bra {end if later else self.no_tile};")
            self.later = later
            self.kind = "boundary" if later else "first"
            self.tile_begin()
            self.emit(step.body)
            self.snapshot()
            self.next_tile()
            if later:
                b(f"bra.uni {top};")
        b.place(end)
        self.kind, self.later = "drain", False

    def busy_or_idle(self, step) -> None:
        """The tile loop with the tile body twice, chosen by a warpgroup-uniform branch at the top of
        each tile: the busy copy, and the idle one for a consumer whose 64 rows all lie past N (the
        last query tile of a head that N does not fill; TMA zero-fills those rows and the
        epilogue's row < N stores none). At D=64, BQ=192, N=1024 that is consumers 1 and 2 of the
        last of 6 tiles, 2 of 18 slabs (11% of the non-causal kernel's work). Measured on the
        H200: causal D=64 N=1024 +6%, non-causal -3% (``attention_plan.IDLE_COPY``: causal kernels
        only, by default). The idle copy is emitted from the same protocol steps
        (``idle``): the same full-barrier waits, stage and Q releases, turns at the tensor cores
        (consumer 0's first-turn skip and the last hand-on included) and ring advances, in the
        same order and on the same registers, so no barrier count, phase or turn changes; it
        leaves out the wgmmas with their fences, commits and waits, the softmax, the rescale and
        the epilogue. Two copies rather than a branch around each wgmma: a wgmma under a branch
        inside the pipeline makes ptxas serialize them (C7519)."""
        b = self.b
        top, end, idle_copy, next_tile = (b.label(x) for x in ("tile", "tiles_done", "idle_tile", "tile_next"))
        self.first_tile()
        b.place(top)
        done = b.pred()
        b(f"setp.ge.s32 {done}, {self.tile}, {self.tile_count};", f"@{done} bra {end};")
        self.tile_begin()
        b(f"@{self.rows_past_n()} bra.uni {idle_copy};")
        self.emit(step.body)
        self.tile_end()
        b(f"bra.uni {next_tile};")
        b.place(idle_copy)
        self.idle = True
        self.emit(step.body)
        self.idle = False
        b.place(next_tile)
        self.next_tile()
        b(f"bra.uni {top};")
        b.place(end)

    def rows_past_n(self) -> str:
        """The predicate of an idle consumer: this tile's slab of 64 query rows starts at or past N
        (i·BQ + 64·consumer >= N; uniform over the warpgroup)."""
        m, b = self.m, self.b
        first, idle = b.reg(), b.pred()
        b(f"mul.lo.s32 {first}, {self.index}, 64;", f"mad.lo.s32 {first}, {self.i}, {m.bq}, {first};",
          f"setp.ge.s32 {idle}, {first}, {self.k.dim(m.params[m.o].type.dims[-2])};")
        return idle

    def if_prev_tile(self, step) -> None:
        """Cross-tile: the tile body is emitted once per case (``tiles``), so this is static."""
        if self.later:
            self.emit(step.body)

    def tile_begin(self) -> None:
        if self.k.plan.cross_tile:
            self.cross_tile_begin()
            return
        super().tile_begin()
        b = self.b
        if self.k.plan.own_trips:
            self.own_trips()
        self.q_base = self.q_slot(0)
        b(f"add.u32 {self.q_base}, {self.q_base}, {self.q_slab};")
        if self.k.plan.turns == "per slot":  # this Q slot's set of turn barriers
            if not hasattr(self, "turn_base"):
                self.turn_base = (self.own_turn, self.next_turn)
            n, slot = self.k.plan.consumers, self.rings[Q_RING].s
            self.own_turn, self.next_turn = b.reg(), b.reg()
            b(f"mad.lo.u32 {self.own_turn}, {slot}, {n}, {self.turn_base[0]};",
              f"mad.lo.u32 {self.next_turn}, {slot}, {n}, {self.turn_base[1]};")
        b(*(f"mov.f32 {r}, 0f00000000;" for r in self.o))
        b(*(f"mov.f32 {r}, {NEG_INF};" for r in self.mx), *(f"mov.f32 {r}, 0f00000000;" for r in self.l))
        self.qk_scale = self.ev.value(self.m.qk_scale)
        self.lse_scale = self.ev.value(self.m.lse_scale)
        self.folded = b.pred()  # scale > 0: the maxima are kept raw (see softmax)
        b(f"setp.gt.f32 {self.folded}, {self.qk_scale}, 0f00000000;")

    def own_trips(self) -> None:
        """This consumer's own trips of the tile (``plan.own_trips``): the key blocks some of its rows
        see. The mask hides key k0 + c from query row q0 + r when k0 + c > q0 + r, so with k0 = j·BKV
        every block past (q0 + 64·consumer + 63) / BKV is wholly masked for its rows: own = min(T,
        max(q0 + 64·consumer + 63, 0) / BKV + 1). The mask applies where the IR's condition holds, so
        the condition is evaluated on every later trip, and if it fails on one all T are its own."""
        m, b = self.m, self.b
        trips = self.tile_trips = self.rings[KV_RING].trips  # (if_trips swaps the ring's for own)
        if not hasattr(self, "own"):
            self.own = b.reg()
        q0, reach = self.ev.value(m.mask.operands[1]), b.reg()
        b(f"mad.lo.s32 {reach}, {self.index}, 64, {q0};", f"add.s32 {reach}, {reach}, 63;",
          f"max.s32 {reach}, {reach}, 0;", f"div.u32 {self.own}, {reach}, {m.bkv};",
          f"add.s32 {self.own}, {self.own}, 1;", f"min.s32 {self.own}, {self.own}, {trips};")
        j, top, end, done = b.reg(), b.label("own_check"), b.label("own_checked"), b.pred()
        b(f"mov.b32 {j}, {self.own};")
        b.place(top)
        b(f"setp.ge.s32 {done}, {j}, {trips};", f"@{done} bra {end};")
        masked = self.inner(j).value(m.mask_cond)
        b(f"@!{masked} mov.b32 {self.own}, {trips};", f"@!{masked} bra {end};",
          f"add.s32 {j}, {j}, 1;", f"bra {top};")
        b.place(end)

    def if_trips(self, step) -> None:
        """``part`` "own": the loop, drain and release over this consumer's own trips."""
        if step.part != "own":
            super().if_trips(step)
            return
        r = self.rings[step.ring]
        tile_trips, r.trips = r.trips, self.own
        super().if_trips(step)
        r.trips = tile_trips

    def idle_trips(self, step) -> None:
        """The tile's key blocks past this consumer's own (``plan.own_trips``): per trip its turn at
        the tensor cores, taken and handed on (every consumer takes the tile's trips + 1 turns, so the
        rotation goes on unchanged; the last consumer's last turn hands nothing on), then the
        protocol's steps: wait for the stage's fill, release it, advance."""
        b, r = self.b, self.rings[step.ring]
        r.counter = b.reg()
        top, end, done, again = b.label("idle_trip"), b.label("idle_trips_done"), b.pred(), b.pred()
        b(f"mov.b32 {r.counter}, {self.own};", f"setp.ge.s32 {done}, {r.counter}, {r.trips};",
          f"@{done} bra {end};")
        b.place(top)
        after = b.reg()
        b(f"add.s32 {after}, {r.counter}, 1;")
        last = self.last_turn(after)
        self.turn_begin(False)
        self.turn_end(last)
        self.emit(step.body)
        b(f"add.s32 {r.counter}, {r.counter}, 1;", f"setp.lt.s32 {again}, {r.counter}, {r.trips};",
          f"@{again} bra {top};")
        b.place(end)
        r.counter = None

    def cross_tile_begin(self) -> None:
        """Cross-tile: the tile's coordinates and Q slot; the previous tile's row state kept for
        its epilogue (in this tile's first trip), O left to that epilogue (zeroed after it)."""
        Role.tile_begin(self)
        b = self.b
        self.q_base = self.q_slot(0)
        b(f"add.u32 {self.q_base}, {self.q_base}, {self.q_slab};")
        if self.later:
            b(*(f"mov.f32 {p}, {r};" for p, r in zip(self.mx_prev + self.l_prev, self.mx + self.l)))
        else:
            b(*(f"mov.f32 {r}, 0f00000000;" for r in self.o))
        b(*(f"mov.f32 {r}, {NEG_INF};" for r in self.mx), *(f"mov.f32 {r}, 0f00000000;" for r in self.l))
        self.qk_scale = self.ev.value(self.m.qk_scale)
        self.lse_scale = self.ev.value(self.m.lse_scale)
        self.folded = b.pred()
        b(f"setp.gt.f32 {self.folded}, {self.qk_scale}, 0f00000000;")
        self.rings[K_RING].counter = b.mov(0)  # the peeled first trip is trip 0

    def snapshot(self) -> None:
        """Cross-tile: what this tile's epilogue needs, kept in registers of their own (the next
        tile's coordinates and scales overwrite the tile's)."""
        b = self.b
        self.rings[K_RING].counter = None
        row0, o_lead, l_lead, qk, lse, folded = self.snap
        q_row0, o_l, l_l = self.epilogue_coords()
        b(f"mov.b32 {row0}, {q_row0};", f"mov.b32 {o_lead}, {o_l};", f"mov.b32 {l_lead}, {l_l};",
          f"mov.f32 {qk}, {self.qk_scale};", f"mov.f32 {lse}, {self.lse_scale};",
          f"mov.pred {folded}, {self.folded};")

    def cross_mma(self, step) -> None:
        """Cross-tile: S_j opens the turn (the CTA's first trip: consumer 0 without waiting, S_0
        alone in it); P_{j-1}·V_{j-1} -- at a tile's first trip the previous tile's last -- closes
        it; after the tile loop the CTA's last P·V takes a turn of its own (the last consumer's
        hands nothing on)."""
        self.turned_mma(step, alone=self.kind == "first", draining=self.kind == "drain")

    def cross_mma_wait(self, step) -> None:
        """Cross-tile: wait_group 1 (S_j; 0 in the CTA's first trip) and the softmax; wait_group 0,
        then at a tile's first trip the previous tile's O and L (its last P·V has retired) and O
        zeroed, else O rescaled; P_j packed. After the loop: the CTA's last tile's O and L."""
        b = self.b
        if self.kind == "drain":
            b(wgmma.wait(0))
            row0, o_lead, l_lead, qk, lse, folded = self.snap
            self.epilogue(row0, o_lead, l_lead, self.mx, self.l, qk, lse, folded)
            return
        if step.pending == 1:
            b(wgmma.wait(0 if self.kind == "first" else 1))
            self.softmax()
            return
        b(wgmma.wait(0))
        if self.kind == "boundary":
            row0, o_lead, l_lead, qk, lse, folded = self.snap
            self.epilogue(row0, o_lead, l_lead, self.mx_prev, self.l_prev, qk, lse, folded)
            b(*(f"mov.f32 {r}, 0f00000000;" for r in self.o))
            self.rescale_and_pack(rescale=False)
        else:
            self.rescale_and_pack()

    def cross_loop(self, step) -> None:
        """Cross-tile: the key loop runs trips 1 .. T-1 (trip 0 is the tile's peeled first trip),
        its NotFirst steps unconditionally."""
        b, r = self.b, self.rings[step.ring]
        r.counter = b.reg()
        end, top, done, again = b.label("kv_done"), b.label("kv_loop"), b.pred(), b.pred()
        b(f"mov.b32 {r.counter}, 1;", f"setp.ge.s32 {done}, {r.counter}, {r.trips};", f"@{done} bra {end};")
        b.place(top)
        kind, self.kind = self.kind, "loop"
        self.emit(step.body)
        self.kind = kind
        b(f"add.s32 {r.counter}, {r.counter}, 1;", f"setp.lt.s32 {again}, {r.counter}, {r.trips};",
          f"@{again} bra {top};")
        b.place(end)

    def stage(self, offset: int, stage: str | None = None) -> str:
        b, r = self.b, self.rings[self.k.loop_ring]
        addr = b.reg()
        b(f"mad.lo.u32 {addr}, {stage or r.s}, {self.k.plan.stage_stride}, {self.k.smem};",
          f"add.u32 {addr}, {addr}, {offset};")
        return addr

    def mma(self, step) -> None:
        """Trip j's turn at the tensor cores: S_j = Q·K_jᵀ, then (from the second trip on) O += P_{j-1}·V_{j-1},
        committed as two groups (S first: wait_group 1 then retires S_j alone). The first trip is
        peeled (``loop``), so no wgmma sits under a branch (ptxas would serialize them)."""
        if self.k.plan.cross_tile:
            self.cross_mma(step)
            return
        if self.k.plan.split_kv:
            self.split_mma(step)
            return
        first = self.peeled
        self.turn_begin(first)
        self.scores()
        if not first:  # (on the first trip an empty group would cost ptxas a dummy wgmma)
            self.pv(self.prev_stage())
        self.turn_end(None)

    def mma_wait(self, step) -> None:
        """In the loop (wait_group 1): S_j has landed: the softmax, then wait_group 0 (P_{j-1}·V_{j-1}
        done), O rescaled and P_j packed. After it (wait_group 0): the last P·V first. Idle: only
        the last P·V's turn."""
        b = self.b
        if self.k.plan.cross_tile:
            self.cross_mma_wait(step)
            return
        if self.k.plan.split_kv:
            self.split_mma_wait(step)
            return
        if step.pending == 1:
            if not self.idle:
                b(wgmma.wait(0 if self.peeled else 1))
                self.softmax()
                b(wgmma.wait(0))
                self.rescale_and_pack()
            return
        if self.drain_pending:
            self.drain_pending = False
            last = self.last_turn()
            self.turn_begin(False)
            self.pv(self.prev_stage())
            self.turn_end(last)
        if not self.idle:
            b(wgmma.wait(0))

    def loop(self, step) -> None:
        """The key loop with its first trip peeled (the loop runs at least once: IfTrips)."""
        if step.ring != self.k.loop_ring:
            super().loop(step)
            return
        if step.part == "rest":
            self.idle_trips(step)
            return
        if self.k.plan.cross_tile:
            self.cross_loop(step)
            return
        b, r = self.b, self.rings[step.ring]
        r.counter = b.reg()
        b(f"mov.b32 {r.counter}, 0;")
        self.peeled = True
        self.emit(step.body)
        self.peeled = False
        top, end = b.label("kv_loop"), b.label("kv_done")
        done = b.pred()
        b(f"add.s32 {r.counter}, {r.counter}, 1;", f"setp.ge.s32 {done}, {r.counter}, {r.trips};",
          f"@{done} bra {end};")
        b.place(top)
        self.emit(step.body)
        again = b.pred()
        b(f"add.s32 {r.counter}, {r.counter}, 1;", f"setp.lt.s32 {again}, {r.counter}, {r.trips};",
          f"@{again} bra {top};")
        b.place(end)
        r.counter = None
        self.drain_pending = True

    def split_mma(self, step) -> None:
        """Separate K/V rings: S_j (reads K) opens the turn; in the loop P_{j-1}·V_{j-1} (reads V,
        the V ring one trip behind) follows it in the same turn, after the loop the last P·V takes
        a turn of its own (the last consumer's hands nothing on). The peeled trip's turn holds S
        alone."""
        self.turned_mma(step, alone=self.peeled, draining=self.rings[K_RING].counter is None)

    def turned_mma(self, step, *, alone: bool, draining: bool) -> None:
        """Separate K/V rings' products in the consumers' turns: S (reads K) opens a turn, closed at
        once when S is ``alone`` in it; P·V (reads V) closes the turn S opened or, ``draining``
        after the loop, takes a turn of its own, whose last consumer hands nothing on."""
        if K_RING in step.rings:
            self.turn_begin(alone)
            self.scores()
            if alone:
                self.turn_end(None)
            return
        stage = self.rings[V_RING].s
        if not draining:
            self.pv(stage)
            self.turn_end(None)
            return
        last = self.last_turn()
        self.turn_begin(False)
        self.pv(stage)
        self.turn_end(last)

    def split_mma_wait(self, step) -> None:
        """In the loop: wait_group 1 (S_j landed; 0 in the peeled trip, the only group) and the
        softmax, then wait_group 0 (P_{j-1}·V_{j-1} done), O rescaled and P_j packed. Idle: nothing."""
        b = self.b
        if self.idle:
            return
        in_loop = self.rings[K_RING].counter is not None
        if in_loop and step.pending == 1:
            b(wgmma.wait(0 if self.peeled else 1))
            self.softmax()
            return
        b(wgmma.wait(0))
        if in_loop:
            self.rescale_and_pack()

    def not_first(self, step) -> None:
        """The loop's first trip is peeled: its copy has no NotFirst steps, the rest has them all."""
        if self.k.plan.cross_tile:  # the loop starts at trip 1
            self.emit(step.body)
        elif not self.k.plan.split_kv:
            super().not_first(step)
        elif not self.peeled:
            self.emit(step.body)

    def turn_begin(self, first: bool) -> None:
        """Ping-pong: wait for this consumer's turn at the tensor cores (named barrier 4 + c, the
        previous consumer arrives on it once it has issued); consumer 0 goes first (in every tile,
        or with turns "across tiles" in the CTA's first tile only)."""
        if self.k.plan.consumers < 2:
            return
        b = self.b
        skip = b.label("first_turn")
        if first:
            starts = b.pred()
            b(f"setp.eq.u32 {starts}, {self.index}, 0;")
            if self.k.plan.turns == "across tiles" and not self.k.plan.cross_tile:
                cta, first_tile = b.reg(), b.pred()  # the CTA's first tile: tile == ctaid
                b(f"mov.u32 {cta}, %ctaid.x;", f"setp.eq.s32 {first_tile}, {self.tile}, {cta};",
                  f"and.pred {starts}, {starts}, {first_tile};")
            b(f"@{starts} bra.uni {skip};")
        b(f"bar.sync {self.own_turn}, {2 * 128};")
        b.place(skip)

    def last_turn(self, through: str | None = None) -> str:
        """The predicate of the turn that hands nothing on: the last consumer's last turn of the
        tile (with turns "across tiles", of the CTA's last tile only). With per-consumer trips the
        last turn is the one after which ``through`` (default: its own) trips are done: all of the
        tile's."""
        b, last = self.b, self.b.pred()
        b(f"setp.eq.u32 {last}, {self.index}, {self.k.plan.consumers - 1};")
        if self.k.plan.own_trips:
            tile_done = b.pred()
            b(f"setp.ge.s32 {tile_done}, {through or self.own}, {self.tile_trips};",
              f"and.pred {last}, {last}, {tile_done};")
        if self.k.plan.turns == "across tiles" and not self.k.plan.cross_tile:
            step, after, last_tile = b.reg(), b.reg(), b.pred()  # no tile after: tile + nctaid >= tiles
            b(f"mov.u32 {step}, %nctaid.x;", f"add.s32 {after}, {self.tile}, {step};",
              f"setp.ge.s32 {last_tile}, {after}, {self.tile_count};", f"and.pred {last}, {last}, {last_tile};")
        return last

    def turn_end(self, last: str | None) -> None:
        """Hand the tensor cores to the next consumer (the last consumer's last turn hands nothing:
        consumer 0 does not wait before its first)."""
        if self.k.plan.consumers < 2:
            return
        if last is not None:
            self.b(f"@!{last} bar.arrive {self.next_turn}, {2 * 128};")
        else:
            self.b(f"bar.arrive {self.next_turn}, {2 * 128};")

    def prev_stage(self) -> str:
        b, r = self.b, self.rings[KV_RING]
        stage, wrap = b.reg(), b.pred()
        b(f"add.s32 {stage}, {r.s}, -1;", f"setp.lt.s32 {wrap}, {stage}, 0;",
          f"@{wrap} mov.b32 {stage}, {r.ring.stages - 1};")
        return stage

    def scores(self) -> None:
        """S = Q·Kᵀ over the head dim: m64n{BKV}k16 x D/16, SS, both K-major (none when idle)."""
        if self.idle:
            return
        m, b = self.m, self.b
        dq = self.descriptor(self.q_base, self.op_q)
        dk = self.descriptor(self.stage(self.k.plan.k_offset), self.op_k)
        lines = [wgmma.FENCE]
        for ks in range(m.d // 16):
            lines.append(wgmma.mma_instruction(m.bkv, "bf16", self.s, self.at(dq, self.op_q.offset(ks, 0)),
                                               self.at(dk, self.op_k.offset(ks, 0)), 0,
                                               "0" if ks == 0 else "1"))
        lines.append(wgmma.COMMIT)
        b(*lines)

    def pv(self, stage: str) -> None:
        """O += P·V: m64n{D}k16 x BKV/16, P from registers, V MN-major (tB = 1), committed as a group
        of its own (none when idle)."""
        if self.idle:
            return
        m, b = self.m, self.b
        dv = self.descriptor(self.stage(self.k.plan.v_offset, stage), self.op_v)
        lines = [wgmma.FENCE]
        for ks in range(m.bkv // 16):
            lines.append(wgmma.mma_rs_instruction(m.d, "bf16", self.o, self.p[4 * ks:4 * ks + 4],
                                                  self.at(dv, self.op_v.offset(ks, 0)), 1))
        b(*lines, wgmma.COMMIT)

    def tile_end(self) -> None:
        """O / l to bf16 and L = (max + log2 l) · ln 2, stored for the rows below N (none: idle)."""
        if self.idle:
            return
        q_row0, o_lead, l_lead = self.epilogue_coords()
        self.epilogue(q_row0, o_lead, l_lead, self.mx, self.l, self.qk_scale, self.lse_scale, self.folded)

    def epilogue_coords(self) -> tuple[str, str, str]:
        """This tile's first query row (of this thread) and the linear index of O's and L's
        leading coordinates."""
        m, b = self.m, self.b
        q_row0 = b.reg()
        b(f"mad.lo.s32 {q_row0}, {self.i}, {m.bq}, {self.row_in_tile};")
        o_lead = self.linear([self.ev.value(c) for c in m.o_store.variadic()[:-2]], m.params[m.o].type.dims[:-2])
        l_lead = self.linear([self.ev.value(c) for c in m.l_store.variadic()[:-1]], m.params[m.l].type.dims[:-1])
        return q_row0, o_lead, l_lead

    def epilogue(self, q_row0: str, o_lead: str, l_lead: str, mx: list[str], l: list[str], qk_scale: str,
                 lse_scale: str, folded: str) -> None:
        k, m, b = self.k, self.m, self.b
        n_rows = k.dim(m.params[m.o].type.dims[-2])
        mx_row = mx
        quad_leader = b.pred()
        lane4 = b.reg()
        b(f"and.b32 {lane4}, {k.lane}, 3;", f"setp.eq.u32 {quad_leader}, {lane4}, 0;")
        for half in (0, 1):
            total = l[half]
            for lane_mask in (1, 2):
                other, t = b.reg("f32"), b.reg("f32")
                b(f"shfl.sync.bfly.b32 {other}, {total}, {lane_mask}, 31, -1;", f"add.f32 {t}, {total}, {other};")
                total = t
            inv, row, inside = b.reg("f32"), b.reg(), b.pred()
            b(f"rcp.rn.f32 {inv}, {total};", f"add.s32 {row}, {q_row0}, {8 * half};",
              f"setp.lt.s32 {inside}, {row}, {n_rows};")
            o_row = b.reg("b64")
            self.address(o_row, o_lead, n_rows, row, m.d, 2, k.globals[m.o])
            regs = self.rows(self.o, half)
            for n in range(0, len(regs), 2):
                col = 8 * (n >> 1)  # the n-th register of this row half: column 8 (n/2) + 2 (lane%4)
                lo, hi, packed = b.reg("f32"), b.reg("f32"), b.reg()
                b(f"mul.f32 {lo}, {regs[n]}, {inv};", f"mul.f32 {hi}, {regs[n + 1]}, {inv};",
                  f"cvt.rn.bf16x2.f32 {packed}, {hi}, {lo};",
                  f"@{inside} st.global.b32 [{o_row}+{2 * col}], {packed};")
            lse, l_addr, store = b.reg("f32"), b.reg("b64"), b.pred()
            mx = b.reg("f32")  # the row maximum in scaled units (raw when the scale was folded)
            b(f"mul.f32 {mx}, {mx_row[half]}, {qk_scale};", f"@!{folded} mov.f32 {mx}, {mx_row[half]};")
            b(f"lg2.approx.f32 {lse}, {total};", f"add.f32 {lse}, {lse}, {mx};",
              f"mul.f32 {lse}, {lse}, {lse_scale};")
            self.address(l_addr, l_lead, n_rows, row, 1, 4, k.globals[m.l], column=False)
            b(f"and.pred {store}, {inside}, {quad_leader};", f"@{store} st.global.f32 [{l_addr}], {lse};")

    def linear(self, coords: list[str], dims) -> str:
        """The linear index of the leading coordinates (row-major over ``dims``)."""
        b = self.b
        acc = b.mov(0)
        for c, d in zip(coords, dims):
            t = b.reg()
            b(f"mad.lo.s32 {t}, {acc}, {self.k.dim(d)}, {c};")
            acc = t
        return acc

    def address(self, out: str, lead: str, n_rows: str, row: str, width: int, esize: int, base: str,
                column: bool = True) -> None:
        """out = base + ((lead · N + row) · width + (2 (lane % 4) when ``column``)) · esize."""
        b = self.b
        idx, wide = b.reg(), b.reg("b64")
        b(f"mad.lo.s32 {idx}, {lead}, {n_rows}, {row};", f"mul.lo.s32 {idx}, {idx}, {width};")
        if column:
            b(f"add.s32 {idx}, {idx}, {self.quad_col};")
        b(f"mul.wide.s32 {wide}, {idx}, {esize};", f"add.s64 {out}, {base}, {wide};")
