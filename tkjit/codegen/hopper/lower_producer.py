"""The producer warpgroup of the general lowering: it walks the protocol's producer program, and
each ``TmaLoad`` step copies its IR ``load`` with TMA.

One elected thread runs the program (the others wait at the exit). It computes the scalars the
loads need from the IR itself, through the register-tile backend's scalar emitters: the block
body's scalars once per tile (``tile_begin``), a ring loop's scalars once per trip with the loop
variable ``lo + trip * step`` (``trip``). A load of an ``[R, C]`` tile at coordinates
``(.., i, j)`` of a rank-n tensor is one box per swizzle panel: ``C * elem / span`` boxes of
``span / elem`` columns x R rows, at element coordinates ``(j*C + panel*span/elem, i*R, ..)``
(innermost first; leading coordinates are plain indices). Boxes past the tensor are zero-filled
by TMA and still complete their bytes.
"""
from __future__ import annotations

from ...ir.core import Block, Op
from ...ir.ops import For, Load
from ...ir.types import I32, ScalarType
from ...passes.sync_protocol import Loop, TmaLoad
from ..context import Ctx
from ..layout import WarpGrid
from ..padding import PaddingInfo
from ..smem import SmemPlan
from ..emit_scalar import emit_scalar_binary
from ..table import EmitterTable
from ..values import Scalar
from . import tma
from .program import RingRegs, RoleEmitter


def role_ctx(k, warps: int, slab_warps: int = 0, pads: PaddingInfo | None = None,
             grid: WarpGrid | None = None, plan: SmemPlan | None = None) -> Ctx:
    """A register-tile emission context for one role, sharing the kernel's register namer, its
    parameters and named dims (loaded in the common prologue). ``grid``: the role's warp grid
    (default ``warps x 1``, rows by slabs of ``slab_warps``); ``plan``: its shared scratch
    (default none: the ops that would need it are refused by ``lower.refusal``)."""
    grid = grid or WarpGrid(warps, warps, 1, slab_warps)
    ctx = Ctx(k.kernel, grid, plan or SmemPlan({}, {}, 0, []), pads or PaddingInfo(), {},
              scalar_table(EmitterTable()))
    ctx.namer = k.b.namer
    ctx.globals = k.globals
    ctx.check_buffer = k.check_buffer
    ctx.strides = k.strides
    ctx.dims = k.b.dims
    for p in k.kernel.params:
        if id(p) in k.scalars:
            reg, dtype = k.scalars[id(p)]
            ctx.bind(p, Scalar(reg, dtype))
    return ctx


def scalar_table(table: EmitterTable) -> EmitterTable:
    """``table`` with the general lowering's integer divisions by a constant power of two as
    shifts (``cdiv``, ``//``): ptxas keeps a generic 32-bit division for a constant that reaches
    it through a register, and the tile counts and loop bounds (M / BM, K / BK) are on every
    CTA's path to its first load. The register-tile backend keeps its own (its PTX unchanged)."""
    from ...ir.ops import CDiv, FloorDiv
    table.entries[(CDiv, "scalar")] = table.entries[(FloorDiv, "scalar")] = emit_division
    return table


def emit_division(ctx, op) -> list[str]:
    """``cdiv(a, 2^s)`` = -((-a) >> s) and ``a // 2^s`` = a >> s (arithmetic shifts: floor, exact
    for negative a too); other divisors through the shared emitter."""
    from ...ir.ops import CDiv, Const
    c = op.operands[1].owner
    d = c.attrs["value"] if isinstance(c, Const) else None
    a = ctx.get(op.operands[0])
    if not isinstance(d, int) or isinstance(d, bool) or d <= 0 or d & (d - 1) or a.dtype != I32:
        return emit_scalar_binary(ctx, op)
    shift, r = d.bit_length() - 1, ctx.new("b32")
    if isinstance(op, CDiv):
        out = [f"neg.s32 {r}, {a.reg};", f"shr.s32 {r}, {r}, {shift};", f"neg.s32 {r}, {r};"]
    else:
        out = [f"shr.s32 {r}, {a.reg}, {shift};"]
    ctx.bind(op.result, Scalar(r, I32))
    return out


def is_scalar_op(op: Op) -> bool:
    return not op.regions and bool(op.results) and all(isinstance(v.type, ScalarType) for v in op.results) \
        and all(isinstance(v.type, ScalarType) for v in op.operands)


class ProducerRole(RoleEmitter):
    marks = True

    def __init__(self, k):
        super().__init__(k.b, k.proto)
        self.k = k
        self.ctx = role_ctx(k, 4)
        self.loads = {names: op for op, names in k.schedule.load_of.items()}
        self.loop_of = {ring: loop for loop, ring in k.schedule.loop_of.items()}
        self.hoisted: set[int] = set()  # block-body scalars emitted once before the tile walk

    def run(self) -> None:
        k, b = self.k, self.b
        if k.regs is not None:  # (reg-budget's split; none for a kernel with no product)
            b(f"setmaxnreg.dec.sync.aligned.u32 {k.regs[0]};")
        leader, done = b.pred(), b.label("producer_done")
        if k.rows_ok is not None:  # rows TMA cannot address may come: where they do, all threads copy
            from .lower_copy import CopyingProducer
            tma_path = b.label("tma_producer")
            b(f"@{k.rows_ok} bra {tma_path};")
            with k.globals.fallback():  # runs only where a loaded tensor's rows are not 16-byte units
                CopyingProducer(k).walk()
            b(f"bra {done};")
            b.place(tma_path)
        self.emit(self.together())  # multicast: the pair's cluster barrier, every producer thread
        b(f"setp.ne.u32 {leader}, {k.tid_wg}, 0;", f"@{leader} bra {done};")
        self.walk()
        b.place(done)

    def walk(self) -> None:
        """The elected thread's program: prefetch the tensor maps, then the protocol."""
        b = self.b
        for name in dict.fromkeys(m.symbol for m in self.maps()):  # in load order (deterministic PTX)
            raw, addr = b.reg("b64"), b.reg("b64")
            b(*tma.generic_address(name, raw, addr), tma.prefetch(addr))
        self.walk_rings()

    def walk_rings(self) -> None:
        k, b = self.k, self.b
        self.rings = {}
        for ring in k.proto.rings:
            full, empty = k.bar_base(ring.name)
            s, ph = b.mov(0), b.mov(0)
            self.rings[ring.name] = RingRegs(ring, full, empty, s, ph, b.mov(1))
        self.tile, self.tile_count = b.reg(), b.reg()
        self.counts = None
        steps = k.proto.producer
        self.emit(steps[len(self.together()):len(steps) - len(self.apart())])

    def together(self) -> tuple:
        """The producer program's leading ``ClusterSync`` (``ClusterArrive``) steps: all the
        producer's threads run them (``barrier.cluster`` ``.aligned``), before one is elected for
        the rest."""
        from ...passes.sync_protocol import ClusterArrive, ClusterSync
        steps = self.k.proto.producer
        n = 0
        while n < len(steps) and isinstance(steps[n], (ClusterSync, ClusterArrive)):
            n += 1
        return tuple(steps[:n])

    def finish(self, guard: str) -> None:
        """The producer program's trailing steps (``apart``) at the kernel's exit, where every
        thread meets, predicated on ``guard`` (the producer's threads)."""
        self.guard = guard
        self.emit(self.apart())

    guard: str | None = None
    """``finish``: the predicate of the producer's threads at the kernel's exit."""

    def cluster_wait(self, step) -> None:
        self.b(f"@{self.guard} barrier.cluster.wait.acquire;" if self.guard else "barrier.cluster.wait.acquire;")

    def apart(self) -> tuple:
        """The producer program's trailing ``ClusterWait`` steps: all its threads run them, after
        the elected thread's program, at the kernel's exit (``finish``)."""
        from ...passes.sync_protocol import ClusterWait
        steps = self.k.proto.producer
        n = 0
        while n < len(steps) and isinstance(steps[len(steps) - 1 - n], ClusterWait):
            n += 1
        return tuple(steps[len(steps) - n:])

    def maps(self):
        return [self.k.tensor_map(op) for op in self.loads.values()]

    # -- the tile walk --------------------------------------------------------------------
    def first_tile(self) -> None:
        tile_walk_begin(self)

    def next_tile(self) -> None:
        tile_walk_next(self)

    def tile_begin(self) -> None:
        """The block indices of this tile, then the block body's scalars and every ring loop's
        trip count."""
        bind_block_indices(self)
        self.emit_scalars(self.k.blocks.regions[0])
        for ring, loop in self.loop_of.items():
            ring_trips(self, ring, loop)

    def emit_scalars(self, block: Block) -> None:
        for op in block.ops:
            if is_scalar_op(op) and id(op) not in self.hoisted:
                self.b(*self.ctx.emit_op(op))

    def trip(self, step: Loop) -> None:
        """The trip's scalars (the loop variable, the load coordinates), then its steps."""
        loop = self.loop_of[step.ring]
        r = self.rings[step.ring]
        bind_loop_index(self.ctx, self.b, loop, r.counter, r.first)
        self.emit_scalars(loop.regions[0])
        self.emit(step.body)

    # -- events ---------------------------------------------------------------------------
    def tma_load(self, step: TmaLoad) -> None:
        b, ctx = self.b, self.ctx
        load: Load = self.loads[(step.ring, step.load)]
        r = self.rings[step.ring]
        tmap = self.k.tensor_map(load)
        t = load.result.type
        coords = [ctx.get(v).reg for v in load.variadic()]
        stage = b.reg()
        stride = load_stage_stride(self.k.schedule.ring_loop.get(step.ring), load)
        b(f"mad.lo.u32 {stage}, {r.s}, {stride}, {self.k.smem};",
          f"add.u32 {stage}, {stage}, {load.attrs['smem']};")
        bar = self.bar(r, "full")
        panel_cols = tmap.box[0]
        panel_bytes = t.rows * tmap.swizzle
        col0, row0 = b.reg(), b.reg()
        b(f"mul.lo.s32 {col0}, {coords[-1]}, {t.cols};", f"mul.lo.s32 {row0}, {coords[-2]}, {t.rows};")
        raw, addr = b.reg("b64"), b.reg("b64")
        b(*tma.generic_address(tmap.symbol, raw, addr))
        lead = list(reversed(coords[:-2]))
        half = self.k.halves(load)
        if half:
            self.half_load(t, tmap, stage, col0, row0, lead, addr, bar, half)
            return
        for p in range(t.cols // panel_cols):
            dst, inner = b.reg(), b.reg()
            b(f"add.u32 {dst}, {stage}, {p * panel_bytes};", f"add.s32 {inner}, {col0}, {p * panel_cols};")
            b(tma.load_nd(dst, addr, [inner, row0, *lead], bar))

    def half_load(self, t, tmap, stage, col0, row0, lead, addr, bar, half: str) -> None:
        """This CTA's half of a load the pair shares, multicast into both CTAs (passes/pairs.py):
        panels [r P/2, (r+1) P/2) of its P ("panels"), or rows [r R/2, (r+1) R/2) of every panel
        through a map of R/2-row boxes ("rows"); r is the CTA's rank in the pair."""
        from ...passes.pairs import CTAS
        b, rank = self.b, self.k.rank
        panel_cols, panels = tmap.box[0], t.cols // tmap.box[0]
        panel_bytes = t.rows * tmap.swizzle
        mine, first = b.reg(), b.reg()
        if half == "panels":
            per = panels // CTAS
            b(f"mad.lo.u32 {mine}, {rank}, {per * panel_bytes}, {stage};",
              f"mad.lo.s32 {first}, {rank}, {per * panel_cols}, {col0};")
            for p in range(per):
                dst, inner = b.reg(), b.reg()
                b(f"add.u32 {dst}, {mine}, {p * panel_bytes};", f"add.s32 {inner}, {first}, {p * panel_cols};")
                b(tma.load_nd_multicast(dst, addr, [inner, row0, *lead], bar, (1 << CTAS) - 1))
            return
        rows = t.rows // CTAS
        b(f"mad.lo.u32 {mine}, {rank}, {rows * tmap.swizzle}, {stage};",
          f"mad.lo.s32 {first}, {rank}, {rows}, {row0};")
        for p in range(panels):
            dst, inner = b.reg(), b.reg()
            b(f"add.u32 {dst}, {mine}, {p * panel_bytes};", f"add.s32 {inner}, {col0}, {p * panel_cols};")
            b(tma.load_nd_multicast(dst, addr, [inner, first, *lead], bar, (1 << CTAS) - 1))


def load_stage_stride(loop: For | None, load: Load | None = None) -> int:
    """Bytes between two stages of a ring (for a tile loaded once per tile, ``load``: between its
    two slots where the pipeline pass gave it two, else 0: one stage)."""
    if loop is not None:
        return loop.attrs["stage_stride"]
    return load.attrs.get("slot_stride", 0) if load is not None else 0


def trip_count(ctx: Ctx, b, loop: For) -> str:
    """max(0, ceil((hi - lo) / step)) from the loop's operands (emitted already); a constant step
    of 1 needs no division (ptxas keeps a generic 32-bit division even by a constant 1)."""
    lo, hi, step = (ctx.get(v).reg for v in loop.operands[:3])
    n = b.reg()
    if _constant(loop.operands[2]) == 1:
        b(f"sub.s32 {n}, {hi}, {lo};", f"max.s32 {n}, {n}, 0;")
        return n
    b(f"sub.s32 {n}, {hi}, {lo};", f"add.s32 {n}, {n}, {step};", f"sub.s32 {n}, {n}, 1;",
      f"div.s32 {n}, {n}, {step};", f"max.s32 {n}, {n}, 0;")
    return n


def _constant(v):
    from ...ir.ops import Const
    return v.owner.attrs["value"] if isinstance(v.owner, Const) else None


def ring_trips(role, ring: str, loop: For) -> None:
    """The ring's trip count this tile in ``role.rings[ring]``; split-K (``role.k.split`` CTAs
    per tile): this CTA's share, trips [r*per, r*per + per) of the tile's T with per = ceil(T/S)
    and r its rank in the cluster (possibly none), and its first trip."""
    b, k = role.b, role.k
    n = trip_count(role.ctx, b, loop)
    r = role.rings[ring]
    r.trips = n
    if getattr(role, "sk_walk", None) is not None and loop is k.schedule.stream_k_loop:
        r.first, r.trips = role.sk_walk.unit()  # stream-K: this tile's unit (lower_stream_k.py)
    elif k.split > 1 and loop is k.schedule.split_loop:
        per, first = b.reg(), b.reg()
        divide = (f"shr.s32 {per}, {per}, {k.split.bit_length() - 1};" if k.split & (k.split - 1) == 0
                  else f"div.s32 {per}, {per}, {k.split};")  # per >= 0: a shift is the division
        b(f"add.s32 {per}, {n}, {k.split - 1};", divide,
          f"mul.lo.s32 {first}, {k.rank}, {per};", f"sub.s32 {n}, {n}, {first};",
          f"min.s32 {n}, {n}, {per};", f"max.s32 {n}, {n}, 0;")
        r.first = first


def bind_loop_index(ctx: Ctx, b, loop: For, counter: str, first: str | None = None) -> None:
    """The loop variable of trip ``counter``: lo + counter * step (split-K: lo + (first +
    counter) * step)."""
    lo, _, step = (ctx.get(v).reg for v in loop.operands[:3])
    k = b.reg()
    if first is not None:
        trip = b.reg()
        b(f"add.s32 {trip}, {first}, {counter};")
        counter = trip
    b(f"mad.lo.s32 {k}, {counter}, {step}, {lo};")
    ctx.bind(loop.regions[0].args[0], Scalar(k, I32))


# -- the tile walk both roles share (the grid pass's schedule and order) ----------------------
def tile_walk_begin(role) -> None:
    """Tile counts from the block loop's operands; the first tile is this CTA's index."""
    k, b, ctx = role.k, role.b, role.ctx
    for op in k.kernel.body.ops:
        if is_scalar_op(op):
            b(*ctx.emit_op(op))
    counts = [ctx.get(v).reg for v in k.blocks.variadic()]
    if k.pair > 1:  # the pair walks units of two tiles along the paired (second to last) index
        units = b.reg()
        b(f"add.s32 {units}, {counts[-2]}, 1;", f"shr.s32 {units}, {units}, 1;")
        role.paired_count, counts = counts[-2], counts[:-2] + [units, counts[-1]]
    b(f"mov.u32 {role.tile_count}, {counts[0]};")
    for c in counts[1:]:
        b(f"mul.lo.u32 {role.tile_count}, {role.tile_count}, {c};")
    role.counts = counts
    hoist_invariants(role)
    # split-K: a cluster of S CTAs per tile (grid.launch_grid), so the tile is the cluster's index;
    # multicast: a cluster of 2 per unit (lower.pair_grid)
    # a row block split over a cluster (lower_cluster.py): a cluster of k CTAs per tile
    b(f"mov.u32 {role.tile}, {'%clusterid.x' if role.k.split > 1 or k.pair > 1 or k.cluster > 1 else '%ctaid.x'};")
    role.sk_walk = None
    if k.stream_k is not None:  # the last wave's trips over every CTA (lower_stream_k.py)
        from .lower_stream_k import Walk
        role.sk_walk = Walk(role)
        role.sk_walk.begin()


def hoist_invariants(role) -> None:
    """The block body's scalars that depend on no block index (a loop bound K / BK, a tile's
    constant offsets), emitted once before the tile walk instead of once per tile: each may be a
    32-bit division, which ptxas keeps generic, on both roles' per-tile path."""
    role.hoisted = set()
    for op in role.k.blocks.regions[0].ops:
        if is_scalar_op(op) and all(id(x) in role.ctx.values for x in op.operands):
            role.b(*role.ctx.emit_op(op))
            role.hoisted.add(id(op))


def walk_stride(k) -> str:
    """The special register a persistent tile walk strides by: the walkers' count. A multicast
    pair walks units of two tiles, one per cluster (``%nclusterid.x``: the tile register holds
    ``%clusterid.x``), else one walker per CTA (``%nctaid.x``). Every role's walk takes it from
    here -- the producer's and the ping-pong consumers' (lower_consumer.tiles) -- so the roles of
    a CTA visit the same tiles."""
    return "%nclusterid.x" if k.pair > 1 else "%nctaid.x"


def tile_walk_next(role) -> None:
    b = role.b
    if getattr(role, "sk_walk", None) is not None:
        role.sk_walk.advance()
    elif role.k.blocks.attrs.get("schedule", "grid") == "persistent" and role.k.split == 1:
        step = b.reg()
        b(f"mov.u32 {step}, {walk_stride(role.k)};", f"add.u32 {role.tile}, {role.tile}, {step};")
    else:
        b(f"mov.u32 {role.tile}, {role.tile_count};")


def bind_block_indices(role) -> None:
    from ..emit_control import block_indices
    out: list[str] = []
    k = role.k
    if k.pair > 1:  # unit (.., mp, ..): this CTA's tile row is 2 mp + rank, groups of group/2 unit rows
        regs = block_indices(role.ctx, PairedOrder(k.blocks), role.tile, role.counts, out, bounded=True)
        row = role.ctx.new("b32")
        out.append(f"mad.lo.u32 {row}, {regs[-2]}, 2, {k.rank};")
        regs[-2] = row
    else:
        regs = block_indices(role.ctx, k.blocks, role.tile, role.counts, out, bounded=True)
    role.b(*out)
    for arg, reg in zip(role.k.blocks.regions[0].args, regs):
        role.ctx.bind(arg, Scalar(reg, I32))


class PairedOrder:
    """The block loop as the pair's unit walk sees it: the grouped order over units, in groups of
    group / 2 unit rows (the tile rows of the unpaired order's groups)."""

    def __init__(self, blocks):
        group = int(blocks.attrs.get("group", 1) or 1)
        self.attrs = {key: value for key, value in blocks.attrs.items() if key != "heavy"}
        self.attrs["group"] = max(1, group // 2)


__all__ = ["ProducerRole", "role_ctx", "scalar_table", "emit_division", "is_scalar_op", "trip_count", "ring_trips", "bind_loop_index",
           "tile_walk_begin", "tile_walk_next", "PairedOrder", "hoist_invariants", "bind_block_indices", "load_stage_stride",
           "walk_stride"]
