"""The general sm_90a lowering: any block program the scheduling passes annotated, op by op.

    ptx, metadata = lower_kernel(kernel, options)      # kernel: IR after the Hopper passes
    why = refusal(kernel, options)                      # None, or (op, reason) it cannot lower

Nothing here knows which kernel it compiles. The passes decided the roles (warp-spec), the
rings and stages (pipeline, smem-plan), the protocol (mbarrier: ``schedule_of`` gives the very
object the pass checked), the register split (reg-budget) and the grid (grid); this module
prints them:

* the skeleton (this file): the prologue every thread runs (parameters, the 1 KB-aligned shared
  base, barrier init from the protocol's rings), the branch into roles with ``setmaxnreg``,
  the launch metadata;
* the producer (``lower_producer.py``) walks the protocol's producer program; each ``TmaLoad``
  step is the TMA copy of its IR ``load`` (any rank, coordinates from the IR's own scalars);
* the consumers (``lower_consumer.py``) walk the protocol's consumer program, and between its
  steps emit the IR ops of the tile in order through one op -> emitter table: the register-tile
  backend's emitters (elementwise, broadcasts, reductions, cvt, scalars, vector loads and
  stores -- per warp the wgmma accumulator *is* the mma.sync fragment) and the Hopper ones
  (``mma_*`` on shared tiles -> wgmma, register tiles to and from global memory, a register
  tile written to a shared tile for a wgmma: ``lower_shared_store.py``).

What it cannot take yet, ``refusal`` says with the op and why; the caller then uses another
backend and says so (docs/hopper-codegen.md, "The general lowering").
"""
from __future__ import annotations

import re

from dataclasses import dataclass

from ...ir.core import Kernel, Op
from ...ir.ops import Blocks, For, If, Load, Store
from ...ir.types import BF16, E4M3, E5M2, F16, F32, GlobalType, ScalarType, TileType
from ...passes.hopper import block_loop, depends_on, is_shared, pipelined_loops, swizzle_bytes
from ...passes.mbarrier import Schedule, schedule_of
from ..abi import Pointers, launch_params, map_only, param_entries, stride_registers
from . import mbarrier, tma
from .builder import Builder
from .lower_cluster import launch as cluster_launch
from .lower_layout import SCRATCH_BARRIER, has_product
from .program import ARCH, SMEM_SYMBOL, module_text

MMA_DTYPES = (BF16, F16, E4M3, E5M2)
"""Operand dtypes of the wgmma this lowering emits (fp8: k32, both operands K-major)."""
TILE_DTYPES = (BF16, F16, F32, E4M3, E5M2)


@dataclass
class Refusal:
    """Why the general lowering does not take a kernel: the op (None: the kernel) and the reason."""

    op: Op | None
    why: str

    def text(self) -> str:
        where = f" at {self.op.span.location()}" if self.op is not None and self.op.span else ""
        name = f"'{self.op.NAME}'{where}: " if self.op is not None else ""
        return f"{name}{self.why}"


def refusal(kernel: Kernel, options: dict | None = None) -> Refusal | None:
    """None when ``lower_kernel`` can emit ``kernel``; else the first op it cannot, and why."""
    options = dict(options or {})
    if options.get("arch", "sm_90a") != "sm_90a":
        return Refusal(None, f"the target is {options['arch']}; wgmma and setmaxnreg need sm_90a")
    if "consumers" not in kernel.attrs or "smem" not in kernel.attrs or "maxnreg" not in kernel.attrs:
        return Refusal(None, "a kernel the Hopper scheduling passes did not schedule (warp-spec, smem-plan, "
                             "reg-budget)")
    from .lower_cluster import cluster_refusal
    from .lower_layout import auto_refusal, copy_cols_order_refusal, ring_loop_refusal
    why = (auto_refusal(kernel, options) or cluster_refusal(kernel, options)
           or ring_loop_refusal(kernel) or copy_cols_order_refusal(kernel))
    if why is not None:
        return why
    blocks = block_loop(kernel)
    if kernel.attrs.get("pingpong"):
        for loop in pipelined_loops(kernel):
            for v in loop.operands[:3]:
                if depends_on(v, set(blocks.regions[0].args)):
                    return Refusal(loop, "ping-pong consumers skip the other consumer's trips, so "
                                         "every tile must have the same trip count; this loop's "
                                         "bounds depend on the block indices")
    if kernel.attrs.get("pingpong"):
        from ...passes.mbarrier import is_tile_write
        for op in blocks.walk():
            if is_tile_write(op):
                return Refusal(op, "ping-pong consumers run alternate tiles and cannot meet around "
                                   "a shared tile they write from registers")
    if int(blocks.attrs.get("split", 1)) > 1:
        from .lower_checks import split_refusal
        why = split_refusal(kernel, schedule_of(kernel), kernel.attrs["consumers"])
        if why is not None:
            return why
    from . import lower_stream_k
    if lower_stream_k.asked(kernel):
        why = lower_stream_k.refusal(kernel, schedule_of(kernel), kernel.attrs["consumers"], options)
        if why is not None:
            return why
    if options.get("unaligned_rows") and kernel.attrs.get("producer_warp"):
        return Refusal(None, "rows TMA may not address need the copying producer, whose 128 threads copy "
                             "each stage; warp-spec gave this kernel a producer warp")
    if options.get("unaligned_rows"):
        from .lower_copy import copy_refusal
        why = copy_refusal(kernel, options)
        if why is not None:
            return why
    for op in kernel.body.ops:
        if not isinstance(op, Blocks) and not all(isinstance(v.type, ScalarType) for v in op.results):
            return Refusal(op, "only scalars may be computed before the block loop")
    from .lower_checks import consumer_refusal, users_of
    # the consumers sharing each tile's rows: every one, or one with ping-pong (whole tiles in turn)
    consumers = 1 if kernel.attrs.get("pingpong") else kernel.attrs["consumers"]
    loops = set(pipelined_loops(kernel))
    users = users_of(kernel)
    for op in blocks.regions[0].ops:
        if isinstance(op, Load) and op.attrs.get("fill") == "cp.async":
            why = _fill_load(op)
        elif isinstance(op, Load) and is_shared(op.result):
            why = _tma_load(op)
        elif op in loops:
            why = _loop_body(op, consumers, users)
        else:
            why = consumer_refusal(op, consumers, False, users, at_tile=True)
        if why is not None:
            return why
    return None


def _loop_body(loop: For, consumers: int, users) -> Refusal | None:
    from .lower_checks import consumer_refusal
    for op in loop.regions[0].ops:
        if isinstance(op, Load) and is_shared(op.result):
            why = _tma_load(op)
        else:
            why = consumer_refusal(op, consumers, True, users)
        if why is not None:
            return why
    return None


def _fill_load(op: Load) -> Refusal | None:
    """A row block the consumers fill (lower_copy_fill.py): the register-tile backend's copy takes
    any tile of a 1-, 2- or 4-byte tensor; its readers are copy_cols (warp-spec's consumer_fill)."""
    if op.operands[0].type.dtype.nbytes not in (1, 2, 4):
        return Refusal(op, f"a consumer fill of a {op.operands[0].type.dtype} tensor")
    return None


def _tma_load(op: Load) -> Refusal | None:
    g: GlobalType = op.operands[0].type
    t: TileType = op.result.type
    for v in op.variadic():
        why = _producer_scalar(v)
        if why:
            return Refusal(op, f"its coordinate %{v.hint} {why}: the producer computes coordinates from "
                               "block and loop indices, parameters, sizes and constants only")
    if g.dtype not in TILE_DTYPES:
        return Refusal(op, f"TMA loads of {g.dtype} tiles are not lowered yet")
    if len(g.dims) > 5:
        return Refusal(op, f"a rank-{len(g.dims)} tensor: TMA takes at most 5 dimensions")
    if t.rows > tma.MAX_BOX:
        return Refusal(op, f"a {t.rows}-row tile: a TMA box has at most {tma.MAX_BOX} rows")
    span = swizzle_bytes(t)
    if span == 0:
        return Refusal(op, "a shared tile without a swizzle (rows not a multiple of 32 bytes)")
    return None


def _producer_scalar(v, depth: int = 0) -> str:
    """'' when the producer can compute ``v`` (scalar ops over indices, parameters and dims)."""
    from .lower_producer import is_scalar_op
    op = v.owner
    if not isinstance(op, Op):  # a block argument (block or loop index) or a kernel parameter
        return ""
    if isinstance(op, (For, If)):
        return f"is carried through a '{op.NAME}'"
    if not is_scalar_op(op):
        return f"comes from '{op.NAME}'"
    if depth > 64:
        return "is computed too deep"
    for x in op.operands:
        why = _producer_scalar(x, depth + 1)
        if why:
            return why
    return ""


class LoweredKernel:
    """One kernel through the general lowering: the shared prologue, then the roles."""

    def __init__(self, kernel: Kernel, options: dict | None = None, schedule_ir: Kernel | None = None):
        self.kernel = kernel
        self.options = dict(options or {})
        self.twin = {} if schedule_ir is None else {
            op.origin: op for op in schedule_ir.walk() if isinstance(op, (Blocks, For)) and op.origin is not None}
        """The async-schedule pass's copy of the block loop and of each loop (their bodies hold the
        walk: ``walk_items``); empty without that IR."""
        self.schedule: Schedule = schedule_of(kernel)
        self.proto = self.schedule.protocol
        if schedule_ir is not None:  # the programs the roles walk, read from the async-schedule IR
            from ...passes.async_schedule import protocol_from_ir
            self.proto = protocol_from_ir(schedule_ir)
        self.consumers = kernel.attrs["consumers"]
        self.threads = kernel.attrs["threads"]
        self.producer = bool(kernel.attrs.get("producer", True))
        """False: warp-spec gave the kernel no producer warpgroup (it loads no shared tile): the
        consumer warpgroups are the whole CTA and load for themselves, with no setmaxnreg."""
        self.regs = tuple(kernel.attrs["regs"]) if "regs" in kernel.attrs else None
        self.producer_threads = 0 if not self.producer else 32 if kernel.attrs.get("producer_warp") else 128
        """Threads 0 .. this - 1 are the producer's: a warpgroup, or one warp (warp-spec's
        ``producer_warp``: a kernel with no product); the consumers' warpgroups follow."""
        self.maxnreg = kernel.attrs.get("maxnreg", 168)
        self.registers_free = kernel.attrs.get("registers") == "ptxas"
        """reg-budget left the register count to ptxas (no setmaxnreg): no .maxnreg is printed."""
        self.smem_slack = smem_slack(kernel)
        """Bytes over the plan for rounding the shared base up to 1,024 at run time (see there)."""
        self.smem_bytes = max([kernel.attrs["smem"]] + [at + 16 * self.proto.ring(ring).stages for ring, at
                                                         in self.schedule.split_bars.items()])
        """smem-plan's map, and the barriers of rings the mbarrier pass split off after it."""
        self.blocks = block_loop(kernel)
        from .lower_fragments import consumer_table
        from .lower_layout import consumer_grid, scratch_plan
        warps = 4 * (1 if kernel.attrs.get("pingpong") else self.consumers)
        self.grid, layout_decision = consumer_grid(kernel, warps)
        """The consumers' fragment layout (lower_layout.py)."""
        self.scratch, extra = scratch_plan(kernel, self.blocks.walk(), consumer_table(), self.grid, self.smem_bytes)
        """Shared scratch of the consumers' cross-warp reductions, after everything smem-plan placed."""
        self.smem_bytes += extra
        from .lower_cluster import cluster_ctas, exchange_regions
        self.smem_bytes += exchange_regions(self.scratch, self.blocks.walk(), self.smem_bytes)
        self.cluster = cluster_ctas(kernel)
        """A row block split over a cluster: the CTAs sharing each block (1: none; lower_cluster.py)."""
        self.pushes = False
        """Whether the consumers emitted push exchanges (st.async: PTX ISA 8.1)."""
        self.copying = bool(self.options.get("unaligned_rows"))
        """Rows TMA cannot address may reach this kernel (the compile option ``unaligned_rows``):
        the producer then copies every stage where they do (lower_copy.py) and stores of tensors
        whose rows may be such go from registers."""
        self.rows_ok: str | None = None
        """With ``copying``: the predicate 'TMA can address every tensor the producer loads'
        (set in the prologue; None where no loaded tensor's row length is a named dim)."""
        self.split = self.schedule.split
        """Split-K: the CTAs of a cluster sharing each tile's reduction loop (1: none)."""
        self.rank: str | None = None
        self.stream_k = self.schedule.stream_k_loop
        """Stream-K: the ring loop whose last wave of tiles the CTAs share in units (None: none)."""
        self.b = Builder()
        self.strided = bool(self.options.get("strided"))
        self.entries = param_entries(kernel, self.strided)
        self.maps: dict[int, tma.TensorMap] = {}
        self.ring_bars: dict[str, tuple[int, int]] = {}  # ring -> (full offset, stages)
        self.decisions: list[dict] = [{"decision": "backend", "value": "wgmma",
                                       "why": "the general sm_90a lowering: TMA producer, wgmma consumers, "
                                              "the mbarrier pass's protocol, every IR op by its emitter"}]
        if self.split > 1:
            self.decisions.append(split_decision(self.schedule, self.consumers))
        from .lower_stream_k import asked
        if asked(kernel):  # applied (the option's walk and fix-up), or why not
            from .lower_stream_k import decision
            self.decisions.append(decision(kernel, self.schedule, self.consumers))
        self.pair = self.schedule.pair.ctas
        """Multicast: the CTAs of a pair sharing the loads ``schedule.pair.loads`` (1: none)."""
        if self.schedule.pair.asked:
            self.decisions.append({"decision": "multicast", "value": self.pair, "why": self.schedule.pair.why})
        if not self.producer and any(op.attrs.get("fill") == "cp.async" for op in self.blocks.walk()
                                     if isinstance(op, Load)):
            from .lower_layout import FILL_MEASURED
            self.decisions[0] = {"decision": "backend", "value": "general",
                                 "why": "the general sm_90a lowering without a producer: warp-spec let the "
                                        "consumers fill the row block themselves (cp.async, the protocol's "
                                        "copy_fill step: lower_copy_fill.py), and they load their other tiles "
                                        "straight from global memory; every IR op by its emitter, the stores "
                                        "as the epilogue pass chose; lowering=auto takes it at every row width, "
                                        f"a row block split over a cluster included ({FILL_MEASURED})"}
        elif not self.producer:
            self.decisions[0] = {"decision": "backend", "value": "general",
                                 "why": "the general sm_90a lowering without a producer: warp-spec gave the "
                                        "kernel none (it loads no shared tile), so the consumer warpgroups "
                                        "load their register tiles straight from global memory; every IR "
                                        "op by its emitter, the stores as the epilogue pass chose"}
        elif not has_product(kernel):
            self.decisions[0] = {"decision": "backend", "value": "general",
                                 "why": "the general sm_90a lowering of a kernel with no matrix product: "
                                        "a TMA producer fills the rings warp-spec and the mbarrier pass "
                                        "planned, the consumers run every IR op by its emitter"}
        if layout_decision is not None:
            self.decisions.append(layout_decision)
        if self.cluster > 1:
            from .lower_cluster import decision
            self.decisions.append(decision(kernel, self.scratch))
        from ..emit_cluster import pinned_scratch
        users = [op for op in self.blocks.walk() if id(op) in self.scratch.scratch and not pinned_scratch(op)]
        if users:  # (a cluster exchange's own region: the cluster decision)
            ops = ", ".join(dict.fromkeys(f"{op.NAME} at {op.span.location()}" if op.span else op.NAME
                                          for op in users))
            region = self.scratch.of_op(users[0])
            self.decisions.append({"decision": "consumer scratch", "value": region.size,
                                   "why": f"{ops}: partials of several warp columns combined through "
                                          f"{region.size} B of shared memory at {region.offset}, after "
                                          f"smem-plan's map, between the consumers' named barrier "
                                          f"{SCRATCH_BARRIER}{self._scratch_steps()}"})
        self._ring_offsets()

    def _scratch_steps(self) -> str:
        """Where the scratch's barriers come from: the protocol's scratch_sync steps (the PTX lint
        holds every one inside a step's mark), or, where the protocol has none, nowhere checked."""
        from ...passes.sync_protocol import ScratchSync, all_steps
        steps = sum(1 for s in all_steps(self.proto.consumer) if isinstance(s, ScratchSync))
        if steps:
            return f", at the protocol's {steps} scratch_sync step(s)"
        return " (no scratch_sync step in the protocol: docs/hopper-codegen.md)"

    def _ring_offsets(self) -> None:
        loops = {ring: loop for loop, ring in self.schedule.loop_of.items()}
        one_shots = {ring: ld for ld, (ring, _) in self.schedule.load_of.items() if ring not in loops}
        for ring in self.proto.rings:
            if ring.name in self.schedule.split_bars:  # a ring split off a loop's (mbarrier)
                self.ring_bars[ring.name] = (self.schedule.split_bars[ring.name], ring.stages)
                continue
            owner = loops.get(ring.name) or one_shots[ring.name]
            self.ring_bars[ring.name] = (owner.attrs["bars"], ring.stages)

    def tensor_map(self, load: Load) -> tma.TensorMap:
        """The tensor map a producer load copies through: boxes of one swizzle panel x the tile's rows."""
        t: TileType = load.result.type
        span = swizzle_bytes(t)
        rows = t.rows // 2 if self.halves(load) == "rows" else t.rows  # a pair's half of each panel
        return self._map(load.operands[0], (span // t.dtype.nbytes, rows), span)

    def halves(self, load: Load) -> str:
        """How this CTA's half of a load the multicast pair shares is cut ("panels" or "rows"), or ''."""
        return self.schedule.pair.loads.get(load, "") if self.pair > 1 else ""

    def store_map(self, param) -> tma.TensorMap:
        """The tensor map a staged epilogue stores ``param`` through: 64 x 64 boxes, 128B swizzle."""
        return self._map(param, (64, 64), 128)

    def _map(self, param, box2: tuple[int, int], swizzle: int) -> tma.TensorMap:
        """One map per (tensor, box, swizzle); the box is 1 along leading dimensions."""
        index = self.kernel.params.index(param)
        box = box2 + (1,) * (len(param.type.dims) - 2)
        for m in self.maps.values():
            if (m.param, m.box, m.swizzle) == (index, box, swizzle):
                return m
        from .lower_copy import row_may_be_unaligned
        m = tma.TensorMap(f"{self.kernel.name}_tmap_{len(self.maps)}", index, param.hint,
                          param.type.dtype.name, box, swizzle,
                          fallback=self.copying and row_may_be_unaligned(param))
        self.maps[len(self.maps)] = m
        return m

    # -- the kernel -----------------------------------------------------------------------
    def walk_items(self, owner: Op, interleaved) -> list[tuple]:
        """The consumers' walk of ``owner``'s body (the block loop or a ring loop): the items of
        its copy in the async-schedule IR (``async_schedule.items_of``; each tile op the one it was
        copied from), else ``interleaved()`` (interleave.py over the protocol)."""
        twin = self.twin.get(owner)
        if twin is None:
            return interleaved()
        from ...passes.async_schedule import items_of
        return [(kind, step, op.origin if op is not None else None)
                for kind, step, op in items_of(twin.regions[0].ops)]

    def emit(self) -> tuple[str, dict]:
        from .lower_consumer import ConsumerRole
        from .lower_producer import ProducerRole
        b = self.b
        self.prologue()
        if not self.producer:  # the consumers are the whole CTA
            ConsumerRole(self).run()
            b("ret;")
            return self.module_text(), self.metadata()
        producer, done = b.pred(), b.label("exit")
        producer_label = b.label("producer")
        if self.producer_threads == 128:
            b(f"setp.eq.u32 {producer}, {self.wg}, 0;", f"@{producer} bra {producer_label};")
        else:  # a producer warp
            b(f"setp.lt.u32 {producer}, {self.tid}, {self.producer_threads};", f"@{producer} bra {producer_label};")
        ConsumerRole(self).run()
        b(f"bra.uni {done};")
        b.place(producer_label)
        role = ProducerRole(self)
        role.run()
        b.place(done)
        role.finish(producer)  # (a cluster split's ClusterWait: every producer thread, at the exit)
        b("ret;")
        return self.module_text(), self.metadata()

    def prologue(self) -> None:
        b = self.b
        self.tid = b.reg()
        self.wg, self.tid_wg = b.reg(), b.reg()
        b(f"mov.u32 {self.tid}, %tid.x;", f"shr.u32 {self.wg}, {self.tid}, 7;",
          f"and.b32 {self.tid_wg}, {self.tid}, 127;")
        raw, self.smem = b.reg(), b.reg()
        if self.smem_slack:
            b(f"mov.u32 {raw}, {SMEM_SYMBOL};", f"add.u32 {self.smem}, {raw}, 1023;",
              f"and.b32 {self.smem}, {self.smem}, -1024;")
        else:
            b(f"mov.u32 {self.smem}, {SMEM_SYMBOL};")
        if self.split > 1 or self.pair > 1:  # this CTA's share of the tile's loop, or its tile of the pair
            self.rank = b.reg()
            b(f"mov.u32 {self.rank}, %cluster_ctarank;")
        self.globals = Pointers()   # id(param) -> generic address (which ones emitters read)
        self.check_buffer: str | None = None  # checked mode's error buffer (emit_check.py)
        self.scalars: dict[int, tuple[str, object]] = {}  # id(param) -> (register, dtype)
        for ptx_type, name, meta, p in self.entries:
            if meta["kind"] == "global":
                raw64, addr = b.reg("b64"), b.reg("b64")
                b(f"ld.param.u64 {raw64}, [{name}];", f"cvta.to.global.u64 {addr}, {raw64};")
                if p is None:
                    self.check_buffer = addr
                else:
                    self.globals[id(p)] = addr
            elif meta["kind"] == "scalar":
                r = b.reg("f32" if meta["dtype"] == "f32" else "b32")
                b(f"ld.param{ptx_type} {r}, [{name}];")
                self.scalars[id(p)] = (r, p.type.dtype)
            elif meta["kind"] == "dim":
                r = b.reg()
                b(f"ld.param.s32 {r}, [{name}];")
                b.dims[meta["name"]] = r

        def load_stride(entry) -> str:
            r = b.reg("b64")
            b(f"ld.param.s64 {r}, [{entry[1]}];")
            return r
        self.strides = stride_registers(self.entries, load_stride)  # option strided: the roles' ctx
        if self.copying:
            from .lower_copy import rows_aligned
            self.rows_ok = rows_aligned(self)
        self.init_barriers()

    def bar_base(self, ring: str) -> tuple[str, str]:
        """Registers holding the shared addresses of ``ring``'s full[0] and empty[0]."""
        offset, stages = self.ring_bars[ring]
        full, empty = self.b.reg(), self.b.reg()
        self.b(f"add.u32 {full}, {self.smem}, {offset};", f"add.u32 {empty}, {full}, {8 * stages};")
        return full, empty

    def init_barriers(self) -> None:
        """full[s] counts the producer's one arrive.expect_tx; empty[s] one arrival per reader
        (the protocol's ``empty_arrivals``); every thread waits for the init (``bar.sync 0``:
        the CTA's one meeting of all roles, before they part)."""
        b = self.b
        if not self.proto.rings:
            return  # no ring, nothing to initialize (the consumers alone: no producer to meet)
        leader, ready = b.pred(), b.label("barriers_ready")
        b("// step: init the protocol's rings (full[s] and empty[s] of each), then the CTA meets once")
        b(f"setp.ne.u32 {leader}, {self.tid}, 0;", f"@{leader} bra {ready};")
        for ring in self.proto.rings:
            full, empty = self.bar_base(ring.name)
            for s in range(ring.stages):
                b(mbarrier.init(f"{full}+{8 * s}", ring.full_arrivals),
                  mbarrier.init(f"{empty}+{8 * s}", ring.empty_arrivals * ring.cluster))
        b(mbarrier.INIT_FENCE)
        b.place(ready)
        b("bar.sync 0;", "// end step")

    # -- text -----------------------------------------------------------------------------
    def module_text(self) -> str:
        entries = [entry[:3] for entry in self.entries]
        decls = ()
        if self.stream_k is not None:  # the workspace and flags (tail_split.py)
            from .lower_stream_k import declarations
            decls = declarations(self)
        body = self.b.body()
        copies = "cp.async.c" in "\n".join(body) and any(re.search(r"(^|\s)cp\.async\.c[ag]\.", line) for line in body)
        engines = [e for e, used in (("TMA", bool(self.maps)), ("cp.async", copies),
                                     ("wgmma", has_product(self.kernel))) if used]
        what = (("warp-specialized tile program" if self.kernel.attrs.get("producer", True) else "tile program")
                + f" ({' + '.join(engines) or 'registers'})")
        pushes = {}
        if self.pushes:  # st.async into a peer's shared memory (the register-tile backend's version)
            from ..kernel import PUSH_PTX_VERSION
            pushes = {"version": PUSH_PTX_VERSION}
        return module_text(what, self.kernel.name, entries, self.maps.values(), self,
                           body, cluster=max(self.split, self.pair, self.cluster), globals_=decls,
                           **pushes)

    def metadata(self) -> dict:
        from ...passes.grid import launch_grid
        params = [dict(meta) for meta in launch_params(self.entries)]
        maps = [m.entry() for m in self.maps.values()]
        addressed = {i for i, p in enumerate(self.kernel.params) if id(p) in self.globals.read}
        map_only(params, maps, addressed)
        params += maps
        return {"name": self.kernel.name, "entry": self.kernel.name, "arch": ARCH, "backend": "wgmma",
                "lowering": "general", "params": params, "dims": self.kernel.named_dims(),
                "grid": [pair_grid(self.kernel) if self.pair > 1 else launch_grid(self.kernel) if self.cluster == 1
                         else ["mul", launch_grid(self.kernel), self.cluster]],
                "block": [self.threads, 1, 1],
                "smem_bytes": self.smem_bytes + self.smem_slack, "num_warps": self.threads // 32,
                "registers": list(self.regs or ()), "protocol": self.proto.text(),
                # TMA only: a launch with other rows recompiles with the copying producer (kernel.py)
                **({"assumes_aligned_rows": True} if not self.copying else {}),
                "strided_variant": True,  # the option ``strided``: views' strides as parameters
                "decisions": list(self.decisions)} | reduction_shape(self.kernel, self.schedule) \
            | ({"serial_launches": True} if self.stream_k is not None else {}) \
            | launch_picks_binary(self.kernel) | cluster_launch(self.kernel)  # the module's workspace; by_trips


def smem_slack(kernel: Kernel) -> int:
    """1,024 where a swizzled tile lives in shared memory -- a TMA copy's box, a wgmma operand, a
    staged store's tile, whose swizzle pattern must start on a 1,024-byte boundary
    (hopper-ptx-facts.md): the base is rounded up at run time, on top of ``.align 1024``, and the
    launch asks for 1 KB more. 0 for a kernel with no producer, no matrix product and no staged
    store (its consumers' cp.async row blocks and scratch need 16-byte alignment): the 1 KB would
    only cost occupancy, and can cost the L1 carveout (LayerNorm D = 2048: 66,816 B a CTA took
    the 233 KB shared-memory configuration for 3 CTAs an SM where 65,792 B fit the 200 KB one,
    and lost 3-4% against the register-tile backend's identical SASS; ncu, H200, session 18)."""
    from ...ir.ops import MMA_OPS
    if kernel.attrs.get("producer", True) or any(isinstance(op, MMA_OPS) for op in kernel.walk()):
        return 1024
    if any(isinstance(op, Store) and "smem" in op.attrs for op in kernel.walk()):
        return 1024
    return 0


def launch_picks_binary(kernel: Kernel) -> dict:
    """``by_trips`` for the kernel object (tkjit/trip_dispatch.py): the longest loop's trip count
    as a launcher expression and the bound past which a launch takes the one-CTA-per-tile variant;
    {} where the launch does not pick (not persistent by trips, or no such expression)."""
    from ...passes.grid import trips_bound
    short = block_loop(kernel).attrs.get("by_trips", 0)
    trips = trips_bound(kernel) if short else None
    return {} if trips is None else {"by_trips": {"trips": trips, "short": short,
                                                  "long": kernel.attrs.get("long_trips", short)}}


def pair_grid(kernel: Kernel) -> list:
    """The launch grid of a multicast pair: 2 x its units, cdiv(paired count, 2) x the other
    counts; persistent: at most one pair per two SMs."""
    from ...passes.grid import count_expression
    counts = [count_expression(v) for v in block_loop(kernel).variadic()]
    counts[-2] = ["cdiv", counts[-2], 2]
    units = counts[0]
    for c in counts[1:]:
        units = ["mul", units, c]
    if block_loop(kernel).attrs.get("schedule") == "persistent":
        units = ["min", units, ["cdiv", ["add", ["num_sms"], -1], 2]]
    return ["mul", units, 2]


def split_decision(schedule: Schedule, consumers: int) -> dict:
    from .lower_checks import split_part_registers, split_reduce_bytes
    loop = schedule.split_loop
    acc = loop.variadic()[0].type
    s, regs = schedule.split, split_part_registers(loop.variadic()[0].type, consumers)
    return {"decision": "split", "value": s,
            "why": f"the block loop's split = {s}: a cluster of {s} CTAs per tile "
                   f"(.reqnctapercluster), CTA r runs trips [r*ceil(T/{s}), (r+1)*ceil(T/{s})) of the "
                   f"reduction loop; each sends part r' of its partial accumulator (the r'-th run of "
                   f"{regs // s} of each consumer thread's {regs} registers: whole 8-column groups) to "
                   f"CTA r' through distributed shared memory ({split_reduce_bytes(acc, consumers, s)} B "
                   "received per CTA, over its drained ring) between two cluster barriers; CTA r adds "
                   "the partials of its part, runs the epilogue and stores that part from registers"}


def reduction_shape(kernel: Kernel, schedule: Schedule) -> dict:
    """``{"gemm": {"tile": [BM, BN, BK], "split": S, "k_trips": T}}`` (the launch-shape model of
    ``fill_sms`` reads it; ``"epilogue"``: warp cycles per accumulator element of what the tile
    does after its loop, epilogue_cost.py, where more than the plain conversion and store) where the tile is one ring loop from 0 in steps of 1 accumulating
    products into one carried tile; else {}."""
    from ...ir.ops import MMA_OPS, Const
    from ...errors import PassError
    from ...passes.grid import count_expression
    if len(schedule.loop_of) != 1:
        return {}
    (loop,) = schedule.loop_of
    lo, hi, step = loop.operands[:3]
    mmas = [op for op in loop.regions[0].ops if isinstance(op, MMA_OPS)]
    carried = list(loop.variadic())
    if len(mmas) != 1 or len(carried) != 1 or not all(
            isinstance(v.owner, Const) and v.owner.attrs["value"] == want for v, want in ((lo, 0), (step, 1))):
        return {}
    try:
        trips = count_expression(hi)
    except PassError:
        return {}
    a = mmas[0].operands[0].type
    bk = a.cols if mmas[0].NAME in ("mma_AB", "mma_ABt") else a.rows
    t = carried[0].type
    shape = {"tile": [t.rows, t.cols, bk], "split": schedule.split, "k_trips": trips}
    from ...passes.epilogue_cost import PLAIN, epilogue_cost
    cycles = epilogue_cost(kernel, loop).cycles
    if cycles > PLAIN:  # (absent: the plain GEMM's conversion and store)
        shape["epilogue"] = cycles
    if schedule.protocol.pingpong:
        shape["pingpong"] = True
    if schedule.stream_k_loop is not None:
        shape["stream_k"] = True
    if schedule.pair is not None and schedule.pair.ctas > 1:
        shape["multicast"] = schedule.pair.ctas  # (as the template's metadata says it)
    return {"gemm": shape}


def lower_kernel(kernel: Kernel, options: dict | None = None, schedule_ir: Kernel | None = None) -> tuple[str, dict]:
    """The PTX and launch metadata of ``kernel`` (check ``refusal`` first; ``schedule_ir``: its
    rewrite by async-schedule, whose walk the consumers then follow)."""
    return LoweredKernel(kernel, options, schedule_ir).emit()


__all__ = ["lower_kernel", "refusal", "Refusal", "LoweredKernel", "MMA_DTYPES"]
