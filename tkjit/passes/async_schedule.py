"""async-schedule: the warp-specialized schedule as IR -- roles, rings and protocol steps with the
tile ops placed between them.

The last Hopper pass. It reads the protocol the ``mbarrier`` pass built (``schedule_of``) and
rewrites the kernel into the ops of ``ir/ops/async_ops.py``: the rings
(``ring``), the producer's program (``producer``) and the consumers' (``consumers``), whose
``blocks`` loop holds the tile ops in the order the emitter prints them, each protocol step at
the place ``codegen/hopper/interleave.py`` gives it (``anchored = true`` where a step stands for
the next tile op; ``mma_hold`` for level 2's held product). A shared tile's load gets ``ring``
and ``box`` (the stage it reads, the name the producer issues it by). So a dump after this pass
*is* the schedule, and ``schedule_from_ir`` reads it back: the protocol it gives equals the
mbarrier pass's, and ``items_of`` gives the consumers' walk (what ``interleave`` gave). The pass
ends with the compile-time sync check of the protocol read back from the IR it wrote
(``protocol_from_ir``, ``sync_at_compile.check``): the one the emitter walks and ``kernel.protocol``
prints. Given a kernel already in this form (IR parsed from its text), it checks that.

The rewrite works on copies (each copy's ``origin`` is the op it copies): the kernel it rewrote
(the tile program) stays as it was and is kept as ``tile_program`` of the kernel it returns. The
general lowering lowers that tile program, walking the programs read from the rewrite
(``protocol_from_ir``) and taking the consumers' walk -- which op, which step, in which order --
from the rewrite's block loop and loop bodies (``LoweredKernel.walk_items``). A step with no op
class yet: the pass leaves the kernel as it is and logs why. The CPU roles executor (``interpreter/roles.py``) runs
the rewritten IR itself, also when parsed back from its text (docs/hopper-codegen.md, "Next" 4).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Block, Kernel, Op, Value
from ..ir.ops import Blocks, For, Load, Store, Yield
from ..ir.ops import async_ops as ao  # (a module: ir.ops imports it last, and it imports this package)
from . import sync_protocol as sp
from .manager import Pass, PassContext, register_pass


class NotExpressible(Exception):
    """A protocol step or walk item the IR has no op for yet (the pass then leaves the kernel as it
    is, and says so: the emitter and the roles executor follow the protocol object instead)."""


# -- protocol -> IR -----------------------------------------------------------------------------
def step_op(step, anchored: bool = False, trips: For | None = None) -> Op:
    """The IR op of a protocol step (its bodies as regions). In the ``if_trips`` that stands for
    ``trips`` (a ring loop), that ring's ``Loop`` step is ``for_trips``: its trips are the loop's."""
    cls = ao.STEP_OP_NAMED.get(type(step).__name__)
    if cls is None:
        raise NotExpressible(f"no IR op for protocol step {type(step).__name__} (ir/ops/async_ops.py)")
    attrs = cls.attrs_of(step)
    if anchored:
        attrs["anchored"] = True
    regions = []
    for name in ("body", "orelse")[:cls.NUM_REGIONS]:
        block = Block()
        for inner in getattr(step, name):
            if trips is not None and isinstance(step, sp.IfTrips) and isinstance(inner, sp.Loop) \
                    and inner.ring == step.ring and name == "body":
                block.append(_made(ao.ForTrips, {k: v for k, v in (("ring", inner.ring), ("min_trips", inner.min_trips),
                                                                    ("part", inner.part))
                                                 if k == "ring" or v != {"min_trips": 0, "part": "all"}[k]}))
            else:
                block.append(step_op(inner))
        regions.append(block)
    return _made(cls, attrs, regions)


def _made(cls: type[Op], attrs: dict, regions: list[Block] | None = None) -> Op:
    """An op of the schedule from attributes made from a protocol step (so of the declared names
    and types): built without re-checking them here -- the verifier checks every op of the
    rewrite after the pipeline (and after every pass in debug mode)."""
    op = object.__new__(cls)
    op.operands, op.attrs, op.regions, op.results = [], attrs, list(regions or ()), []
    op.span = op.parent = None
    for r in op.regions:
        r.parent = op
    return op


class _Rewriter:
    def __init__(self, kernel: Kernel):
        from .mbarrier import schedule_of
        self.kernel = kernel
        self.sched = schedule_of(kernel)
        self.proto = self.sched.protocol
        self.map: dict[Value, Value] = {}
        self.loop_step: dict[For, sp.IfTrips] = {}

    def value(self, v: Value) -> Value:
        new = Value(v.type, v.hint)
        self.map[v] = new
        return new

    def clone(self, op: Op, regions: list[Block] | None = None) -> Op:
        """A copy of ``op`` (its regions copied unless given); a ring's load gets ``ring``/``box``."""
        if regions is None:
            regions = [self.block_copy(r) for r in op.regions]
        attrs = dict(op.attrs)
        names = self.sched.load_of.get(op)
        if names is not None:
            attrs["ring"], attrs["box"] = names
            half = self.sched.pair.loads.get(op) if self.sched.pair is not None else None
            if half is not None and self.sched.pair.ctas > 1:
                attrs["halves"] = half
        # a copy of a verified op: built without re-running its type rules (the verifier runs on
        # the whole rewrite after the pipeline, and after every pass in debug mode)
        new = object.__new__(type(op))
        new.operands = [self.map.get(v, v) for v in op.operands]
        new.attrs, new.regions, new.span, new.parent, new.origin = attrs, regions, op.span, None, op
        for r in regions:
            r.parent = new
        new.results = [Value(r.type, r.hint, new, i) for i, r in enumerate(op.results)]
        for old, fresh in zip(op.results, new.results):
            self.map[old] = fresh
        return new

    def block_copy(self, block: Block) -> Block:
        new = Block([self.value(a) for a in block.args])
        for op in block.ops:
            new.append(self.clone(op))
        return new

    def placed(self, items, into: Block) -> None:
        """Append the interleave items: tile ops copied, steps as ops."""
        for kind, step, op in items:
            if kind == "op":
                if not isinstance(op, Yield):
                    into.append(self.clone(op))
                continue
            if kind == "hold":
                into.append(ao.MmaHold())
                into.append(self.clone(op))
                continue
            if kind == "step":
                into.append(step_op(step))
                continue
            if kind != "anchored":
                raise NotExpressible(f"no IR form for a walk item of kind '{kind}'")
            if isinstance(step, sp.IfTrips):  # a ring loop: its trips are the for's body
                into.append(step_op(step, anchored=True, trips=op))
                into.append(self.ring_loop(op, step))
            else:
                into.append(step_op(step, anchored=True))
                into.append(self.clone(op))

    def ring_loop(self, loop: For, step: sp.IfTrips) -> For:
        from ..codegen.hopper.interleave import body_ops, interleave, pipelined_trip, trip_anchor
        trip = next(st for st in step.body if isinstance(st, sp.Loop) and st.ring == step.ring)
        body = loop.regions[0]
        new = Block([self.value(a) for a in body.args])
        if loop in self.sched.level2:
            items = _placement(lambda: pipelined_trip(loop, trip.body), loop)
        else:
            items = _placement(lambda: interleave(body_ops(body), trip.body, trip_anchor(loop, self.sched.store_of)),
                               loop)
        self.placed(items, new)
        if isinstance(body.terminator, Yield):
            new.append(self.clone(body.terminator))
        return self.clone(loop, [new])

    def tiles(self, tiles: sp.Tiles, blocks: Blocks) -> Blocks:
        from ..codegen.hopper.interleave import interleave, tile_anchor
        ring_of_load = {op: names[0] for op, names in self.sched.load_of.items()}
        loop_of = {ring: loop for loop, ring in self.sched.loop_of.items()}
        anchor = tile_anchor(ring_of_load, loop_of, list(self.sched.staged_over_rings), self.sched.store_of,
                             self.sched.scratch_ops)
        body = blocks.regions[0]
        new = Block([self.value(a) for a in body.args])
        self.placed(_placement(lambda: interleave(list(body.ops), tiles.body, anchor), blocks), new)
        if isinstance(body.terminator, Yield):
            new.append(self.clone(body.terminator))
        return self.clone(blocks, [new])

    def run(self) -> Kernel:
        from .hopper import block_loop
        k, proto = self.kernel, self.proto
        blocks = block_loop(k)
        params = [self.value(p) for p in k.params]
        out = Block()
        for op in k.body.ops:
            if op is not blocks:
                out.append(self.clone(op))
                continue
            for ring in proto.rings:
                out.append(ring_decl(ring))
            producer = Block()
            for st in proto.producer:
                producer.append(step_op(st))
            out.append(ao.ProducerRole(regions=[producer]))
            consumer = Block()
            for st in proto.consumer:
                if isinstance(st, sp.Tiles):
                    consumer.append(ao.TileLoop(attrs={"alternate": True} if st.alternate else {}))
                    consumer.append(self.tiles(st, blocks))
                else:
                    consumer.append(step_op(st))
            out.append(ao.ConsumerRoles(attrs={"count": proto.consumers, "persistent": proto.persistent},
                                     regions=[consumer]))
        return Kernel(k.name, params, out, dict(k.attrs), k.span, tile_program=k)


def _placement(walk, owner: Op) -> list[tuple]:
    """interleave.py's items, or NotExpressible where a step has no op to stand for (a ring whose
    stage ordinary ops read: its ``Mma`` step has no product; the general lowering refuses such a
    kernel, and so it keeps its protocol unrewritten)."""
    try:
        return walk()
    except (StopIteration, ValueError, KeyError) as e:
        where = f" at {owner.span.location()}" if owner.span is not None else ""
        raise NotExpressible(f"a protocol step{where} stands for no op of the body "
                             f"({type(e).__name__}{': ' + str(e) if str(e) else ''})") from None


def ring_decl(ring: sp.Ring) -> ao.RingDecl:
    attrs = {"name": ring.name, "stages": ring.stages, "boxes": ",".join(ld.name for ld in ring.loads),
             "box_bytes": tuple(ld.nbytes for ld in ring.loads), "expect_tx": ring.expect_tx,
             "empty_arrivals": ring.empty_arrivals}
    for key, default in (("full_arrivals", 1), ("one_shot", False), ("cluster", 1)):
        if getattr(ring, key) != default:
            attrs[key] = getattr(ring, key)
    return ao.RingDecl(attrs=attrs)


def rewrite(kernel: Kernel) -> Kernel:
    """The kernel (after the mbarrier pass) rewritten into roles (module docstring)."""
    return _Rewriter(kernel).run()


# -- IR -> protocol ----------------------------------------------------------------------------
def is_async(kernel: Kernel) -> bool:
    """Whether ``kernel`` is in the async-schedule form (its body holds the roles)."""
    return any(isinstance(op, ao.ConsumerRoles) for op in kernel.body.ops)


def _tile_ops_after(ops: list[Op], i: int) -> Op | None:
    """The first op after ``ops[i]`` that is not one of the schedule's (what an anchor stands for)."""
    for op in ops[i + 1:]:
        if not isinstance(op, ao.AsyncOp):
            return op
    return None


def step_of(op: ao.StepOp, loop: For | None = None):
    """The protocol step of an IR step op (``loop``: the ring loop an anchored ``if_trips`` stands for)."""
    fields = op.fields()
    names = ("body", "orelse")[:op.NUM_REGIONS]
    for name, region in zip(names, op.regions):
        fields[name] = tuple(_region_step(inner, loop) for inner in region.ops)
    return op.step_class()(**fields)


def _region_step(op: Op, loop: For | None):
    if isinstance(op, ao.ForTrips):
        if loop is None:
            raise ValueError("for_trips outside an anchored if_trips")
        return sp.Loop(op.attrs["ring"], steps_of(loop.regions[0].ops), op.attrs.get("min_trips", 0),
                       op.attrs.get("part", "all"))
    return step_of(op)


def steps_of(ops: list[Op]) -> tuple:
    """The protocol steps of a block of the rewritten IR, in order (tile ops left out)."""
    out = []
    for i, op in enumerate(ops):
        if isinstance(op, ao.TileLoop):
            blocks = _tile_ops_after(ops, i)
            out.append(sp.Tiles(steps_of(blocks.regions[0].ops), bool(op.attrs.get("alternate", False))))
        elif isinstance(op, ao.StepOp):
            nxt = _tile_ops_after(ops, i) if op.attrs.get("anchored") else None
            out.append(step_of(op, nxt if isinstance(nxt, For) else None))
    return tuple(out)


def items_of(ops: list[Op]) -> list[tuple]:
    """The walk of a block of the rewritten IR: ``("op", None, op)``, ``("step", step, None)``,
    ``("anchored", step, op)`` and level 2's ``("hold", None, op)``, as ``interleave`` and
    ``pipelined_trip`` give them (the terminator left out)."""
    out: list[tuple] = []
    pending: tuple | None = None
    for i, op in enumerate(ops):
        if isinstance(op, Yield):
            continue
        if isinstance(op, ao.MmaHold):
            pending = ("hold", None)
        elif isinstance(op, ao.StepOp) and op.attrs.get("anchored"):
            nxt = _tile_ops_after(ops, i)
            pending = ("anchored", step_of(op, nxt if isinstance(nxt, For) else None))
        elif isinstance(op, ao.StepOp):
            out.append(("step", step_of(op), None))
        elif isinstance(op, ao.AsyncOp):
            continue
        elif pending is not None:
            out.append((pending[0], pending[1], op))
            pending = None
        else:
            out.append(("op", None, op))
    return out


def _ring(op: ao.RingDecl, where: str) -> sp.Ring:
    a = op.attrs
    loads = tuple(sp.Load(name, n) for name, n in zip(a["boxes"].split(","), a["box_bytes"]))
    return sp.Ring(a["name"], a["stages"], loads, a["expect_tx"], a["empty_arrivals"], a.get("full_arrivals", 1),
                   a.get("one_shot", False), where, a.get("cluster", 1))


def _ring_places(blocks: Blocks) -> dict[str, str]:
    """Each ring's ``where``: the source location of its loop, or of its load when loaded once
    per tile (as the mbarrier pass names them; the spans the rewritten IR keeps)."""
    out: dict[str, str] = {}
    for op in blocks.walk():
        if isinstance(op, Load) and "ring" in op.attrs and op.attrs["ring"] not in out:
            owner = op.parent.parent if op.parent is not None else None
            at = owner if isinstance(owner, For) else op
            out[op.attrs["ring"]] = at.span.location() if at.span is not None else ""
    return out


def roles_of(kernel: Kernel) -> tuple[ao.ProducerRole, ao.ConsumerRoles]:
    producer = next(op for op in kernel.body.ops if isinstance(op, ao.ProducerRole))
    consumers = next(op for op in kernel.body.ops if isinstance(op, ao.ConsumerRoles))
    return producer, consumers


def blocks_of(kernel: Kernel) -> Blocks:
    """The block loop of the rewritten IR (the consumers')."""
    return next(op for op in roles_of(kernel)[1].regions[0].ops if isinstance(op, Blocks))


def protocol_from_ir(kernel: Kernel) -> sp.Protocol:
    producer, consumers = roles_of(kernel)
    where = _ring_places(blocks_of(kernel))
    rings = tuple(_ring(op, where.get(op.attrs["name"], "")) for op in kernel.body.ops if isinstance(op, ao.RingDecl))
    return sp.Protocol(kernel.name, consumers.attrs["count"], consumers.attrs["persistent"], rings,
                       steps_of(producer.regions[0].ops), steps_of(consumers.regions[0].ops))


@dataclass
class IRPair:
    """A multicast pair as the rewritten IR says it (``pairs.Pair``'s ``ctas`` and ``loads``)."""

    ctas: int
    loads: dict


def schedule_from_ir(kernel: Kernel):
    """The ``mbarrier.Schedule`` of a kernel in the rewritten form, read from its IR alone."""
    from .mbarrier import Schedule
    proto = protocol_from_ir(kernel)
    blocks = blocks_of(kernel)
    load_of, loop_of, level2, store_of = {}, {}, [], {}
    for op in blocks.walk():
        if isinstance(op, Load) and "ring" in op.attrs:
            load_of[op] = (op.attrs["ring"], op.attrs["box"])
    for op in blocks.walk():
        for region in op.regions:
            ops = region.ops
            for i, inner in enumerate(ops):
                nxt = _tile_ops_after(ops, i) if isinstance(inner, ao.StepOp) and inner.attrs.get("anchored") else None
                if isinstance(inner, ao.STEP_OP_NAMED["IfTrips"]) and isinstance(nxt, For):
                    loop_of[nxt] = inner.attrs["ring"]
                elif isinstance(inner, (ao.STEP_OP_NAMED["StagedStore"], ao.STEP_OP_NAMED["HoldStore"])) and \
                        isinstance(nxt, Store):
                    store_of[inner.attrs["store"]] = nxt
                if isinstance(inner, ao.MmaHold) and isinstance(op, For) and op not in level2:
                    level2.append(op)
    ring_loop = {ring: loop for loop, ring in loop_of.items()}
    events = [st for st in _walk_steps(proto.consumer)]
    split_loop = next((ring_loop[st.ring] for st in events if isinstance(st, sp.ClusterReduce)), None)
    stream_k = next((ring_loop[st.ring] for st in events if isinstance(st, sp.StreamKFixup)), None)
    ctas = max([r.cluster for r in proto.rings] + [1])
    halves = {op: op.attrs["halves"] for op in load_of if "halves" in op.attrs}
    return Schedule(proto, load_of, loop_of, level2, [], dict(ring_loop), {},
                    int(blocks.attrs.get("split", 1) or 1) if split_loop is not None else 1, split_loop,
                    {}, stream_k, IRPair(ctas, halves), store_of)


def _walk_steps(steps):
    for st in steps:
        yield st
        yield from _walk_steps(getattr(st, "body", ()))
        yield from _walk_steps(getattr(st, "orelse", ()))


@register_pass
@dataclass(frozen=True)
class AsyncSchedule(Pass):
    """The ``async-schedule`` pass (module docstring), and the compile-time sync check of what it
    wrote, read back from the IR (``sync_at_compile``)."""

    name = "async-schedule"
    summary = ("the roles and the protocol's steps as IR, the tile ops between them (the schedule, "
               "printed); the protocol read back from it, checked")
    target_specific = True
    check: str = "auto"
    """Explore the interleavings of the protocol read back from the IR: off, quick, full (every
    trip-count case), or auto (quick; full in debug mode)."""

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        from . import sync_at_compile
        if "consumers" not in kernel.attrs:
            return kernel
        if is_async(kernel):  # the schedule as IR already (e.g. parsed from its text): check it
            sync_at_compile.check(protocol_from_ir(kernel), self.check, ctx, READ_BACK)
            return kernel
        try:
            out = rewrite(kernel)
        except NotExpressible as e:
            ctx.decide(f"@{kernel.name}", "the schedule is not rewritten as IR", f"{e}: the emitter and the "
                       "roles executor follow the mbarrier pass's protocol and interleave.py instead")
            from .mbarrier import protocol_of
            sync_at_compile.check(protocol_of(kernel), self.check, ctx, "the mbarrier pass's protocol "
                                  "object (the schedule is not IR here; the emitter follows that object)")
            return kernel
        steps = sum(1 for op in out.walk() if isinstance(op, ao.StepOp))
        who = "a producer" if kernel.attrs.get("producer", True) else "no producer"
        ctx.decide(f"@{kernel.name}", f"the schedule as IR: {who} and {kernel.attrs['consumers']} "
                   f"consumer(s), {steps} protocol steps", "the mbarrier pass's protocol, its steps "
                   "placed among the tile ops as the emitter walks them (codegen/hopper/interleave.py)")
        sync_at_compile.check(protocol_from_ir(out), self.check, ctx, READ_BACK)
        return out


READ_BACK = "the protocol read back from the async-schedule IR (the programs the emitter walks)"
