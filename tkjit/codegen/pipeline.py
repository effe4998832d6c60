"""Software pipelining of shared-tile loads in sequential loops (``@stages``), with cp.async groups.

A ``load`` into a shared tile at the top level of a ``for`` body is *pipelined* when its
coordinates are computed from the induction variable and values from outside the loop by scalar
ops only: the tile for iteration k + (S-1)·step can then be fetched while iteration k computes.
Its shared memory becomes S stage buffers, live over the whole loop. The loop runs as

    prologue:   for d in 0 .. S-2: (if lo + d·step < hi) copy iteration d into stage d; commit
    each trip:  cp.async.wait_group S-2; bar.sync   -- this trip's stage has landed everywhere, and
                                                      every thread is done with the previous trip
                (if k + (S-1)·step < hi) copy that iteration into the stage read last trip; commit
                body, reading stage (trip mod S)

``stages`` pins S (1 turns pipelining off); unpinned loops get ``DEFAULT_STAGES``. The planner
lowers S when the stage buffers do not fit in shared memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.core import Block, Kernel, Op, Value
from ..ir.ops import For, Load
from ..ir.types import I32, ScalarType, TileType
from .globalmem import GlobalView, copy_in
from .smem import Geometry, Region
from .values import Scalar, SharedTile

DEFAULT_STAGES = 2
STAGE_ALIGN = 1024


@dataclass
class LoopPipeline:
    loop: For
    stages: int
    loads: list[Load]
    chain: list[Op] = field(default_factory=list)
    """The body's scalar ops the pipelined coordinates depend on, in body order."""

    def stride(self, load: Load) -> int:
        return -(-load.result.type.nbytes // STAGE_ALIGN) * STAGE_ALIGN


def _is_scalar_op(op: Op) -> bool:
    return not op.regions and all(isinstance(v.type, ScalarType) for v in list(op.operands) + op.results)


def _predictable(body: Block, v: Value, chain: set[int]) -> bool:
    """v depends only on the induction variable and values from outside the loop (via scalar ops)."""
    owner = v.owner
    if owner is body:
        return v.index == 0
    if isinstance(owner, Op) and owner.parent is body:
        if not _is_scalar_op(owner):
            return False
        if id(owner) not in chain:
            if not all(_predictable(body, x, chain) for x in owner.operands):
                return False
            chain.add(id(owner))
    return True


def find_pipelines(kernel: Kernel, limit_stages: int | None = None) -> dict[int, LoopPipeline]:
    """id(for op) → its pipeline, for every loop with pipelinable loads and S > 1."""
    found: dict[int, LoopPipeline] = {}
    for op in kernel.walk():
        if not isinstance(op, For):
            continue
        stages = op.attrs.get("stages", DEFAULT_STAGES)
        if limit_stages is not None:
            stages = min(stages, limit_stages)
        if stages < 2:
            continue
        body = op.regions[0]
        chain: set[int] = set()
        loads = []
        for inner in body.ops:
            t = inner.results[0].type if isinstance(inner, Load) else None
            if isinstance(t, TileType) and t.space == "st":
                trial = set(chain)
                if all(_predictable(body, c, trial) for c in inner.variadic()):
                    chain = trial
                    loads.append(inner)
        if loads:
            ordered = [x for x in body.ops if id(x) in chain]
            found[id(op)] = LoopPipeline(op, stages, loads, ordered)
    return found


def coordinates_at(ctx, pipe: LoopPipeline, load: Load, k: str, out: list[str]) -> list[str]:
    """Registers of ``load``'s coordinates for the iteration whose induction variable is ``k``."""
    iv = pipe.loop.regions[0].args[0]
    touched = [iv] + [r for op in pipe.chain for r in op.results]
    saved = {id(v): ctx.values.get(id(v)) for v in touched}
    ctx.bind(iv, Scalar(k, I32))
    for op in pipe.chain:
        out += ctx.emit_op(op)
    regs = [ctx.get(c).reg for c in load.variadic()]
    for v in touched:
        if saved[id(v)] is None:
            ctx.values.pop(id(v), None)
        else:
            ctx.values[id(v)] = saved[id(v)]
    return regs


def _issue(ctx, pipe, k: str, stage_offsets: list, out: list[str]) -> None:
    """Start the cp.async copies of every pipelined load for the trip whose variable is ``k``."""
    for load, (offset, dyn) in zip(pipe.loads, stage_offsets):
        t = load.result.type
        with ctx.fresh_scope():
            coords = coordinates_at(ctx, pipe, load, k, out)
            view = GlobalView(ctx, load.operands[0], coords, t.rows, t.cols, out)
            copy_in(ctx, view, Geometry.of_tile(t), offset, out, dyn=dyn, wait=False)


def _issue_if_in_range(ctx, pipe, k: str, hi: str, stage_offsets: list, out: list[str]) -> None:
    """_issue when trip ``k`` exists (k < hi); one commit_group either way, so that group n is
    always trip n."""
    p, skip = ctx.new("pred"), ctx.label("no_prefetch")
    out.append(f"setp.ge.s32 {p}, {k}, {hi};")
    out.append(f"@{p} bra.uni {skip};")
    _issue(ctx, pipe, k, stage_offsets, out)
    out.append(f"{skip}:")
    out.append("cp.async.commit_group;")


def emit_prologue(ctx, pipe, lo: str, hi: str, step: str, out: list[str]) -> tuple[str, str]:
    """Fetch trips 0 .. S-2 into stages 0 .. S-2; return the (current, prefetch) stage registers."""
    offsets = [ctx.plan.of_value(load.result).offset for load in pipe.loads]
    for load, offset in zip(pipe.loads, offsets):
        out += ctx.sync.write(Region(offset, pipe.stages * pipe.stride(load)))
    for d in range(pipe.stages - 1):
        kd = ctx.new("b32")
        out.append(f"mad.lo.s32 {kd}, {step}, {d}, {lo};")
        stage = [(off + d * pipe.stride(load), None) for load, off in zip(pipe.loads, offsets)]
        _issue_if_in_range(ctx, pipe, kd, hi, stage, out)
    cur, pre = ctx.new("b32"), ctx.new("b32")
    out.append(f"mov.u32 {cur}, 0;")
    out.append(f"mov.u32 {pre}, {pipe.stages - 1};")
    return cur, pre


def emit_trip_start(ctx, pipe, k: str, hi: str, step: str, stage: tuple[str, str], out: list[str]) -> None:
    """Top of a trip: wait for this trip's stage, barrier, fetch S-1 trips ahead, bind the tiles."""
    cur, pre = stage
    out.append(f"cp.async.wait_group {pipe.stages - 2};")
    out.append("bar.sync 0;")
    ctx.sync.restore(([], []))
    kp = ctx.new("b32")
    out.append(f"mad.lo.s32 {kp}, {step}, {pipe.stages - 1}, {k};")
    offsets = []
    for load in pipe.loads:
        dyn = ctx.new("b32")
        out.append(f"mul.lo.u32 {dyn}, {pre}, {pipe.stride(load)};")
        offsets.append((ctx.plan.of_value(load.result).offset, dyn))
    _issue_if_in_range(ctx, pipe, kp, hi, offsets, out)
    for load in pipe.loads:
        t = load.result.type
        dyn = ctx.new("b32")
        out.append(f"mul.lo.u32 {dyn}, {cur}, {pipe.stride(load)};")
        ctx.prefetched[id(load)] = SharedTile(t, Geometry.of_tile(t), ctx.plan.of_value(load.result).offset,
                                              dyn, pipe.stages * pipe.stride(load))


def advance_stages(ctx, pipe, stage: tuple[str, str], out: list[str]) -> None:
    """End of a trip: both stage registers move to the next stage, modulo S."""
    for reg in stage:
        q = ctx.new("pred")
        out.append(f"add.u32 {reg}, {reg}, 1;")
        out.append(f"setp.eq.u32 {q}, {reg}, {pipe.stages};")
        out.append(f"selp.u32 {reg}, 0, {reg}, {q};")
