"""A block loop split over a cluster (stream-cols' ``cluster``: a row block's columns over k CTAs,
row reductions exchanged through distributed shared memory) in the general lowering.

The ops are the register-tile backend's, emitted by its emitters through the fragment-layout
interface (``cluster_rank``, ``cluster_sum``/``max``/``min``, ``cluster_moments``:
codegen/emit_cluster.py; the consumer table is the register-tile backend's). What is the general
lowering's own:

* **launch**: k CTAs per block (``.reqnctapercluster k``, the grid k x the tiles), the tile index
  is the cluster's (``%clusterid.x``), every CTA of a cluster on the same tile;
* **shared memory**: each exchange's mbarrier and k slots (``emit_cluster.pinned_scratch``: peers
  store into them whenever they reach the exchange) get a region of their own for the whole
  kernel, after the consumers' cross-warp scratch (``exchange_regions``);
* **protocol steps** (passes/sync_protocol.py): both programs start with ``ClusterArrive`` (every
  thread arrives, relaxed, on the cluster barrier that publishes the exchanges' mbarrier inits;
  the consumers' first initialise and arm them), the producer ends with ``ClusterWait`` (printed
  at the kernel's exit, predicated on the producer's threads: ``ProducerRole.finish``), and a
  ``ClusterExchange`` step stands for each exchange (the first one waits on that cluster barrier).
  The emitter records the cross-CTA steps as it writes them and ``emit_cluster.finish_exchanges``
  checks them over every interleaving of the cluster's CTAs (cluster_protocol.py), as for the
  register-tile backend; the one-CTA sync check models an exchange as a meeting of the consumers.

Only the push exchange is lowered: the barrier exchange meets every thread of the cluster at a
``barrier.cluster`` per exchange, which the producer warp does not run.
"""
from __future__ import annotations

from ...ir.ops import CLUSTER_REDUCE_OPS, Blocks, ClusterMoments, ClusterRank
from ..smem import Region

CLUSTER_OPS = (ClusterRank, ClusterMoments, *CLUSTER_REDUCE_OPS)


def cluster_ctas(kernel) -> int:
    """The CTAs of a cluster sharing each block (the block loop's ``cluster``; 1: none)."""
    from ...passes.hopper import block_loop
    return int(block_loop(kernel).attrs.get("cluster", 1) or 1)


def cluster_refusal(kernel, options: dict | None = None):
    """Why the general lowering cannot lower ``kernel``'s cluster split (None: it can, or there is
    none): an exchange other than push, one not directly in the block body (its step stands for a
    block body op), a persistent or split block loop, a kernel with a matrix product, or the
    copying producer (option ``unaligned_rows``: its threads take no part in the cluster barrier)."""
    from ...passes.hopper import block_loop
    from ..emit_cluster import push_ctas
    from .lower import Refusal
    from .lower_layout import has_product
    k = cluster_ctas(kernel)
    ops = [op for op in kernel.walk() if isinstance(op, CLUSTER_OPS)]
    if k == 1:
        if ops and not isinstance(ops[0], ClusterRank):
            return Refusal(ops[0], "a cluster reduction outside a block loop split over a cluster")
        return None
    blocks = block_loop(kernel)
    if blocks.attrs.get("schedule", "grid") != "grid" or int(blocks.attrs.get("split", 1) or 1) > 1:
        return Refusal(blocks, "a block loop split over a cluster runs on the grid schedule, one block per cluster")
    if has_product(kernel):
        return Refusal(blocks, "a block loop split over a cluster in a kernel with a matrix product")
    if (options or {}).get("unaligned_rows"):
        return Refusal(blocks, "a block loop split over a cluster with rows TMA may not address (the copying "
                               "producer takes no part in the cluster barrier)")
    for op in ops:
        if isinstance(op, ClusterRank):
            continue
        if not push_ctas(op):
            return Refusal(op, "a cluster reduction with exchange = \"barrier\": every thread of the cluster "
                               "meets at barrier.cluster per exchange, which the producer warp does not run "
                               "(the general lowering lowers the push exchange)")
        if not isinstance(op.parent.parent, Blocks):
            return Refusal(op, "a cluster exchange inside a loop or if of the block body (its protocol step "
                               "stands for an op of the block body)")
    return None


def exchange_regions(plan, ops, base: int) -> int:
    """Give every push exchange among ``ops`` its own region of ``plan`` (the consumers' scratch
    plan) from ``base`` (16-byte aligned: its mbarrier, then its slots), for the whole kernel;
    returns the bytes added."""
    from ..emit_cluster import cluster_reduce_scratch_bytes, pinned_scratch
    at = end = -(-base // 16) * 16
    for op in ops:
        if not pinned_scratch(op):
            continue
        region = Region(at, cluster_reduce_scratch_bytes(op, None))
        plan.scratch[id(op)] = region
        plan.items.append((f"exchange of {op.NAME} (whole kernel)", region, (0, 0)))
        end = at + region.size
        at = -(-end // 16) * 16
    plan.total = max(plan.total, end)
    return end - base if end > base else 0


def launch(kernel) -> dict:
    """The launch metadata of a block loop split over k CTAs: {} where there is none."""
    k = cluster_ctas(kernel)
    if k == 1:
        return {}
    return {"cluster": [k, 1, 1]}


def decision(kernel, plan) -> dict:
    k = cluster_ctas(kernel)
    regions = "; ".join(f"{what} at {region.offset} ({region.size} B)" for what, region, _ in plan.items
                        if what.startswith("exchange of"))
    return {"decision": "cluster", "value": k,
            "why": f"{k} CTAs per block (.reqnctapercluster {k}, 1, 1, the grid {k} x the blocks): the CTAs of a "
                   "cluster run the same block (%clusterid.x), each on its own columns, and push their row "
                   "reductions' partials into each other's shared memory (st.async, one mbarrier per exchange); "
                   "protocol steps ClusterArrive / ClusterExchange / ClusterWait, the exchanges checked over every "
                   "interleaving of the cluster's CTAs (codegen/cluster_protocol.py); shared memory: "
                   f"{regions or 'no exchange'}"}


class ExchangeSteps:
    """The consumers' side of the cluster steps: ``ClusterArrive`` is printed where it stands once
    the body is emitted (the exchanges' mbarriers are known then: ``emit_cluster.finish_exchanges``
    writes the inits, the fence and the arrive), ``ClusterExchange`` around the op it stands for."""

    def __init__(self, role):
        self.role = role
        self.at: int | None = None
        self.step = None

    def arrive(self, step) -> None:
        self.at, self.step = len(self.role.b.lines), step

    def exchange(self, step, op) -> None:
        b = self.role.b
        b(f"// step: {step.text()}")
        self.role.ops([op])
        b("// end step")

    def finish(self) -> bool:
        """Print the ``ClusterArrive`` step (the exchanges' prologue) where it stood; whether there
        were push exchanges (st.async: PTX ISA 8.1)."""
        from ...errors import NotAvailableError
        from ..emit_cluster import finish_exchanges
        ctx = self.role.ctx
        if self.step is None:
            if getattr(ctx, "cluster_push", None) is not None:  # nothing would initialise the mbarriers
                raise NotAvailableError("the consumers exchange row reductions between the CTAs of a cluster, but "
                                        "their program has no ClusterArrive step to initialise and publish the "
                                        "exchanges' mbarriers", self.role.k.blocks.span)
            return False
        before = len(ctx.prologue)
        pushes = finish_exchanges(ctx)
        lines = ctx.prologue[before:]
        del ctx.prologue[before:]
        if not pushes or self.step.exchanges != len(ctx.cluster_push["exchanges"]):
            raise AssertionError(f"ClusterArrive for {self.step.exchanges} exchange(s), but the consumers "
                                 f"emitted {len(getattr(ctx, 'cluster_push', {}).get('exchanges', ()))}")
        # (at: inside the step's marks, which RoleEmitter.emit printed around ``arrive``)
        self.role.b.lines[self.at:self.at] = [ln for chunk in lines for ln in chunk.split("\n")]
        for entry in ctx.decisions:
            self.role.k.decisions.append(entry)
        return True


__all__ = [
    "CLUSTER_OPS",
    "ExchangeSteps",
    "cluster_ctas",
    "cluster_refusal",
    "decision",
    "exchange_regions",
    "launch",
]
