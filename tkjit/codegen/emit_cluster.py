"""Emitters for the ops of a block loop split over a cluster (``blocks {cluster = k}``,
ir/ops/cluster.py): ``cluster_rank`` reads ``%cluster_ctarank``; ``cluster_sum``/``max``/``min``
exchange a column vector through distributed shared memory.

The exchange, for a vector of the thread's rows (a ``cv``, replicated over the lanes of a quad and
the warp columns): one copy of each row's value is stored into the op's scratch slot in the CTA's
own shared memory; ``barrier.cluster.arrive.release`` / ``wait.acquire`` (every thread of every
CTA of the cluster) makes the k slots visible cluster-wide; each thread reads its rows from the
slot of every rank (``mapa.shared::cluster`` maps the slot's address into rank j's window,
``ld.shared::cluster``) and combines them in rank order, so every CTA gets the same bits; a
second cluster barrier keeps a CTA from writing the slot again (or exiting, which would free its
shared memory) while another CTA of the cluster still reads it (hopper-ptx-facts.md section 7).
Both barriers are also block-wide barriers: the local hazard tracker starts over after each.
"""
from __future__ import annotations

from ..ir.ops import CLUSTER_REDUCE_OPS, Blocks, ClusterRank
from ..ir.types import I32
from .mathfn import binary_f32
from .values import RegVec, Scalar

_COMBINE = {"sum": "add", "max": "max", "min": "min"}
CLUSTER_BARRIER = ["barrier.cluster.arrive.release.aligned;", "barrier.cluster.wait.acquire.aligned;"]


def cluster_size(kernel) -> int:
    blocks = next((op for op in kernel.body.ops if isinstance(op, Blocks)), None)
    return blocks.attrs.get("cluster", 1) if blocks is not None else 1


def cluster_reduce_scratch_bytes(op, grid) -> int:
    return 4 * op.operands[0].type.length


def emit_cluster_rank(ctx, op) -> list[str]:
    r = ctx.new("b32")
    ctx.bind(op.result, Scalar(r, I32))
    return [f"mov.u32 {r}, %cluster_ctarank;"]


def _cluster_barrier(ctx) -> list[str]:
    ctx.sync.written, ctx.sync.read = [], []
    return list(CLUSTER_BARRIER)


def emit_cluster_reduce(ctx, op) -> list[str]:
    out: list[str] = []
    vec: RegVec = ctx.get(op.operands[0])
    k = cluster_size(ctx.kernel)
    if k == 1:
        ctx.bind(op.result, vec)
        return out
    region = ctx.plan.of_op(op)
    split = vec.split
    slot = ctx.new("b32")
    out.append(f"shl.b32 {slot}, {ctx.row_base(split)}, 2;")
    out.append(f"add.u32 {slot}, {slot}, {ctx.smem_base()};")
    keys = [(u, h) for u in range(split.per_warp) for h in (0, 1)]
    offset = {(u, h): region.offset + 4 * (split.unit_offset(u, 16) + 8 * h) for u, h in keys}
    writer = ctx.writer(split, None, "t0")
    out += ctx.sync.write(region)
    for u, h in keys:
        out.append(f"@{writer} st.shared.f32 [{slot}+{offset[(u, h)]}], {vec.regs[u][h]};")
    out += _cluster_barrier(ctx)
    acc: dict = {}
    for j in range(k):
        remote = ctx.new("b32")
        out.append(f"mapa.shared::cluster.u32 {remote}, {slot}, {j};")
        for key in keys:
            x = ctx.new("f32")
            out.append(f"ld.shared::cluster.f32 {x}, [{remote}+{offset[key]}];")
            acc[key] = x if j == 0 else binary_f32(ctx, _COMBINE[op.FN], acc[key], x, out)
    out += _cluster_barrier(ctx)
    ctx.bind(op.result, RegVec(op.result.type, split, [[acc[(u, h)] for h in (0, 1)] for u in range(split.per_warp)]))
    return out


CLUSTER_EMITTERS = {ClusterRank: emit_cluster_rank, **{cls: emit_cluster_reduce for cls in CLUSTER_REDUCE_OPS}}
CLUSTER_SCRATCH = {cls: cluster_reduce_scratch_bytes for cls in CLUSTER_REDUCE_OPS}
