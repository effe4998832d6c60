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

``exchange = "push"`` (stream-cols' default): each exchange owns, for the whole kernel, an
mbarrier and k slots in every CTA's shared memory (pinned scratch, smem.py). In the prologue one
thread initialises each exchange's mbarrier (count 1) and arms it once for the k partials it will
receive (``arrive.expect_tx`` k x rows x 4 bytes), then ``fence.mbarrier_init.release.cluster`` and
a relaxed cluster arrive; the first exchange waits on that cluster barrier before its first remote
store, so no store reaches an mbarrier before its initialisation. An exchange: the copies of each
row's partial (the quad's lanes and the warp columns hold the same value) share the k ranks, each
storing the row into slot ``rank`` of its ranks with ``st.async.shared::cluster.mbarrier::
complete_tx::bytes`` (the receiver's mbarrier of that exchange counts the bytes); then every
thread waits on its own mbarrier (``try_wait.parity.acquire.cluster``, phase 0: each exchange runs
once per CTA) and combines the k local slots in rank order. No cluster barrier per exchange, and
none before exit: every store into a CTA's shared memory is counted by an mbarrier that CTA waits
on before it goes on. ``finish_exchanges`` writes the prologue and runs the protocol check
(cluster_protocol.py) on the steps the emitter recorded.
"""
from __future__ import annotations

from ..ir.ops import CLUSTER_REDUCE_OPS, Blocks, ClusterMoments, ClusterRank, For, If
from ..ir.types import I32
from .cluster_protocol import PushProtocol, check_push_protocol
from .mathfn import binary_f32
from .ptx import f32_imm
from .values import RegVec, Scalar

_COMBINE = {"sum": "add", "max": "max", "min": "min"}
CLUSTER_BARRIER = ["barrier.cluster.arrive.release.aligned;", "barrier.cluster.wait.acquire.aligned;"]


def cluster_size(kernel) -> int:
    blocks = next((op for op in kernel.body.ops if isinstance(op, Blocks)), None)
    return blocks.attrs.get("cluster", 1) if blocks is not None else 1


def _enclosing(op) -> tuple[Blocks | None, tuple]:
    """The block loop around ``op`` and the loops and ifs between them (outermost first)."""
    where = []
    block = op.parent
    while block is not None and block.parent is not None:
        owner = block.parent
        if isinstance(owner, Blocks):
            return owner, tuple(reversed(where))
        if isinstance(owner, (For, If)):
            where.append(("for" if isinstance(owner, For) else "if", id(owner)))
        block = owner.parent
    return None, tuple(reversed(where))


def push_ctas(op) -> int:
    """k where ``op`` is a push exchange of a loop split over k > 1 CTAs, else 0."""
    if isinstance(op, ClusterMoments):
        pass  # always pushed
    elif not isinstance(op, CLUSTER_REDUCE_OPS) or op.attrs.get("exchange", "barrier") != "push":
        return 0
    blocks, _ = _enclosing(op)
    k = blocks.attrs.get("cluster", 1) if blocks is not None else 1
    return k if k > 1 else 0


def pinned_scratch(op) -> bool:
    """A push exchange's mbarrier and slots live through the whole kernel: peers store into them
    whenever they reach the exchange."""
    return push_ctas(op) > 0


SLOTS_AT = 16
"""Bytes from a push exchange's scratch to its slots (the mbarrier takes the first 8)."""


def cluster_reduce_scratch_bytes(op, grid) -> int:
    k = push_ctas(op)
    if k:  # cluster_moments: k slots for each of its two partials
        return SLOTS_AT + len(op.operands) * k * 4 * op.operands[0].type.length
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
    if op.attrs.get("exchange", "barrier") == "push":
        return _emit_push(ctx, op, vec, k)
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


def _protocol(ctx, k: int) -> dict:
    state = getattr(ctx, "cluster_push", None)
    if state is None:
        state = ctx.cluster_push = {"proto": PushProtocol(k), "exchanges": [], "waited": False}
    return state


def _emit_push(ctx, op, vec: RegVec, k: int) -> list[str]:
    """``exchange = "push"`` (module docstring)."""
    out: list[str] = []
    slot, keys = _push_exchange(ctx, op, [vec], k, out)
    acc: dict = {}
    for j in range(k):
        for key in keys:
            x = ctx.new("f32")
            out.append(f"ld.shared.f32 {x}, [{slot(0, j, key)}];")
            acc[key] = x if j == 0 else binary_f32(ctx, _COMBINE[op.FN], acc[key], x, out)
    _proto_read(ctx, op)
    split = vec.split
    ctx.bind(op.result, RegVec(op.result.type, split, [[acc[(u, h)] for h in (0, 1)] for u in range(split.per_warp)]))
    return out


def _push_exchange(ctx, op, vecs: list[RegVec], k: int, out: list[str]):
    """Push each of ``vecs`` (column vectors of the thread's rows, one split) into slot ``rank`` of
    every CTA of the cluster and wait on this CTA's mbarrier until the k slots of each have landed;
    returns (slot, keys): ``slot(v, j, key)`` is the shared address of rank j's value of vector v
    for the thread's (unit, half) ``key``, and keys those of the thread."""
    state = _protocol(ctx, k)
    proto: PushProtocol = state["proto"]
    e = len(state["exchanges"])
    rows = op.operands[0].type.length
    region = ctx.plan.of_op(op)
    state["exchanges"].append((region.offset, len(vecs) * k * 4 * rows, op.span))
    _, where = _enclosing(op)
    split = vecs[0].split
    keys = [(u, h) for u in range(split.per_warp) for h in (0, 1)]
    offset = {(u, h): 4 * (split.unit_offset(u, 16) + 8 * h) for u, h in keys}
    if not state["waited"]:  # the prologue's inits are visible cluster-wide from here on
        out.append("barrier.cluster.wait.acquire.aligned;")
        proto.add("cwait", where=where, span=op.span)
        state["waited"] = True
    rank, row4, mine, bar = (ctx.new("b32") for _ in range(4))
    out.append(f"mov.u32 {rank}, %cluster_ctarank;")
    out.append(f"shl.b32 {row4}, {ctx.row_base(split)}, 2;")
    out.append(f"add.u32 {row4}, {row4}, {ctx.smem_base()};")  # this thread's rows, slot 0
    out.append(f"mad.lo.u32 {mine}, {rank}, {4 * rows}, {row4};")  # slot `rank`: where peers keep ours
    out.append(f"add.u32 {bar}, {ctx.smem_base()}, {region.offset};")
    # the copies of a row's value (4 lanes of the quad x the warp columns) share the k ranks
    copies = 4 * ctx.grid.wc
    copy = ctx.new("b32")
    out.append(f"mad.lo.u32 {copy}, {ctx.tid('wcol')}, 4, {ctx.tid('t')};")
    reached = []
    for m in range(-(-k // copies)):
        dest, p = ctx.new("b32"), ctx.new("pred")
        out.append(f"add.u32 {dest}, {copy}, {m * copies};")
        out.append(f"setp.lt.u32 {p}, {dest}, {k};")
        if split.replicated:
            out.append(f"setp.lt.and.u32 {p}, {ctx.tid('wrow')}, {split.groups}, {p};")
        reached += [c + m * copies for c in range(copies) if c + m * copies < k]
        rslot, rbar = ctx.new("b32"), ctx.new("b32")
        out.append(f"mapa.shared::cluster.u32 {rslot}, {mine}, {dest};")
        out.append(f"mapa.shared::cluster.u32 {rbar}, {bar}, {dest};")
        for v, vec in enumerate(vecs):  # vector v's k slots follow vector v-1's
            for key in keys:
                u, h = key
                out.append(f"@{p} st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 "
                           f"[{rslot}+{region.offset + SLOTS_AT + 4 * rows * k * v + offset[key]}], "
                           f"{vec.regs[u][h]}, [{rbar}];")
    proto.add("push", exchange=e, where=where, nbytes=len(vecs) * 4 * 16 * split.groups * split.per_warp,
              to=tuple(reached), span=op.span)
    done, wait = ctx.new("pred"), ctx.label("exchange_wait")
    out += [f"{wait}:", f"mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 {done}, [{bar}], 0;",
            f"@!{done} bra {wait};"]
    proto.add("wait", exchange=e, where=where, parity=0, span=op.span)
    state["last"] = (e, where)

    def slot(v: int, j: int, key) -> str:
        return f"{row4}+{region.offset + SLOTS_AT + 4 * rows * (k * v + j) + offset[key]}"
    return slot, keys


def _divided(r: str, x: str, n: int) -> str:
    """r = x / n: a multiplication by 1/n where n is a power of two (exact, the same bits as the
    division), else ``div.rn``."""
    if n & (n - 1) == 0:
        return f"mul.f32 {r}, {x}, {f32_imm(1.0 / n)};"
    return f"div.rn.f32 {r}, {x}, {f32_imm(float(n))};"


def _proto_read(ctx, op) -> None:
    e, where = ctx.cluster_push["last"]
    ctx.cluster_push["proto"].add("read", exchange=e, where=where, span=op.span)


def emit_cluster_moments(ctx, op) -> list[str]:
    """``cluster_moments`` (ir/ops/cluster.py): both partials pushed in one exchange, then Chan's
    combination in rank order (the sum as ``cluster_sum`` adds it)."""
    out: list[str] = []
    s_vec: RegVec = ctx.get(op.operands[0])
    q_vec: RegVec = ctx.get(op.operands[1])
    k = cluster_size(ctx.kernel)
    if k == 1:
        ctx.bind(op.results[0], s_vec)
        ctx.bind(op.results[1], q_vec)
        return out
    slot, keys = _push_exchange(ctx, op, [s_vec, q_vec], k, out)
    n = op.attrs["count"]
    sums, m2s = ([{} for _ in range(k)] for _ in range(2))
    for v, got in enumerate((sums, m2s)):
        for j in range(k):
            for key in keys:
                got[j][key] = ctx.new("f32")
                out.append(f"ld.shared.f32 {got[j][key]}, [{slot(v, j, key)}];")
    total, acc = {}, {}
    for j in range(k):
        for key in keys:
            total[key] = sums[j][key] if j == 0 else binary_f32(ctx, "add", total[key], sums[j][key], out)
    for key in keys:
        mean = ctx.new("f32")
        out.append(_divided(mean, total[key], k * n))
        for j in range(k):
            dev, term = ctx.new("f32"), ctx.new("f32")
            out.append(_divided(dev, sums[j][key], n))
            out.append(f"sub.f32 {dev}, {dev}, {mean};")
            out.append(f"mul.f32 {term}, {dev}, {dev};")
            out.append(f"fma.rn.f32 {term}, {term}, {f32_imm(float(n))}, {m2s[j][key]};")
            acc[key] = term if j == 0 else binary_f32(ctx, "add", acc[key], term, out)
    _proto_read(ctx, op)
    split = s_vec.split
    for r, regs in zip(op.results, (total, acc)):
        ctx.bind(r, RegVec(r.type, split, [[regs[(u, h)] for h in (0, 1)] for u in range(split.per_warp)]))
    return out


_PROLOGUE_NOTE = ("// cluster exchanges (push): mbarriers initialised and armed, published by a cluster barrier "
                  "awaited before the first remote store")


def finish_exchanges(ctx) -> bool:
    """After the body: the push exchanges' prologue (mbarrier init and arming by thread 0, the
    init fence, a relaxed cluster arrive) and the protocol check of the recorded steps; returns
    whether the kernel has push exchanges (it then needs PTX 8.1, for st.async)."""
    state = getattr(ctx, "cluster_push", None)
    if state is None:
        return False
    proto = PushProtocol(state["proto"].k)
    first = ctx.new("pred")
    lines = [_PROLOGUE_NOTE, f"setp.eq.u32 {first}, {ctx.tid('tid')}, 0;"]
    for e, (off, expect, span) in enumerate(state["exchanges"]):
        bar = ctx.new("b32")
        lines += [f"add.u32 {bar}, {ctx.smem_base()}, {off};",
                  f"@{first} mbarrier.init.shared::cta.b64 [{bar}], 1;",
                  f"@{first} mbarrier.arrive.expect_tx.shared::cta.b64 _, [{bar}], {expect};"]
        proto.add("init", exchange=e, nbytes=expect, span=span)
    lines += [f"@{first} fence.mbarrier_init.release.cluster;", "barrier.cluster.arrive.relaxed.aligned;"]
    proto.add("arrive")
    proto.steps += state["proto"].steps  # the exchanges' steps, in program order
    ctx.prologue.append("\n".join(lines))
    check_push_protocol(proto)
    ctx.decide("cluster_exchange", "push",
               f"{len(state['exchanges'])} exchange(s), each with its own mbarrier and {proto.k} slots per CTA; "
               "st.async stores into every peer, one local mbarrier wait; protocol checked over every "
               f"interleaving of {min(proto.k, 3)} CTAs (cluster_protocol.py)")
    return True


CLUSTER_EMITTERS = {ClusterRank: emit_cluster_rank, **{cls: emit_cluster_reduce for cls in CLUSTER_REDUCE_OPS},
                    ClusterMoments: emit_cluster_moments}
CLUSTER_SCRATCH = {cls: cluster_reduce_scratch_bytes for cls in (*CLUSTER_REDUCE_OPS, ClusterMoments)}
