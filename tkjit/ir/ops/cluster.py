"""Ops of a block loop split over a cluster of CTAs (``blocks {cluster = k}``): each of the k
CTAs of a cluster runs the same block (the same block indices) on its own part of the data, and
row vectors are combined across them.

``%r = cluster_rank : i32`` is the CTA's rank in its cluster (0 .. k-1; 0 outside a split loop).
``%s = cluster_sum %v : cv<f32>[16]`` (``cluster_max``, ``cluster_min``) combines the column
vector ``v`` of every CTA of the cluster, in rank order, so that every CTA gets the same bits;
stream-cols{cluster=k} writes them (docs/codegen.md, "A row block split over a cluster").
Attribute ``exchange`` (stream-cols' ``exchange`` option): how the register-tile backend moves the
partials -- ``barrier`` (the default: each CTA stores its own, two cluster barriers around the
remote reads) or ``push`` (each CTA stores its partial into every peer's shared memory with
``st.async``, counted by a per-exchange mbarrier of the receiver: one local wait;
codegen/emit_cluster.py, checked by codegen/cluster_protocol.py)."""
from __future__ import annotations

from ..core import Op
from ..types import F32, I32, ScalarType, VectorType, describe

EXCHANGES = ("barrier", "push")
"""How a cluster reduction's partials travel (module docstring)."""


class ClusterRank(Op):
    """``%r = cluster_rank : i32``."""

    NAME = "cluster_rank"

    def infer(self):
        return [ScalarType(I32)]


class ClusterReduce(Op):
    """``%s = cluster_sum %v : cv<f32>[16]``: v combined over the CTAs of the cluster, in rank order."""

    OPERANDS = ("v",)
    FN = "sum"
    ATTRS = {"exchange": str}
    OPTIONAL_ATTRS = frozenset({"exchange"})

    def infer(self):
        if self.attrs.get("exchange", "barrier") not in EXCHANGES:
            raise self.error(f"exchange must be one of {', '.join(EXCHANGES)}, got {self.attrs['exchange']!r}")
        t = self.operands[0].type
        if not (isinstance(t, VectorType) and t.kind == "cv" and t.dtype == F32):
            raise self.error(f"expected an f32 column vector (cv<f32>), got {describe(t)}")
        return [t]


def _make(fn: str):
    name = f"cluster_{fn}"
    return type("".join(p.capitalize() for p in name.split("_")), (ClusterReduce,),
                {"NAME": name, "FN": fn, "__doc__": f"``{name}``."})


CLUSTER_REDUCE_OPS = tuple(_make(fn) for fn in ("sum", "max", "min"))


class ClusterMoments(Op):
    """``%s, %m2 = cluster_moments %sum, %m2 {count = n} : cv<f32>[16], cv<f32>[16]``: the row sums
    and the sums of squared deviations about the row means of k column slices of n columns each
    (one slice per CTA of the cluster), combined into those of the whole k x n columns by Chan's
    formula in rank order: ``s = sum_j sum_j``, ``m2 = sum_j (m2_j + n (sum_j / n - s / (k n))^2)``,
    where rank j's ``m2_j`` is about its own slice's mean ``sum_j / n``. ``s`` has the bits
    ``cluster_sum %sum`` would give. One exchange of both partials (``exchange = "push"``, the only
    form): stream-cols writes it for a variance about a mean over a split row block, so the CTAs
    need not wait for the mean before the pass over the squared deviations (passes/stream_cluster.py)."""

    NAME = "cluster_moments"
    OPERANDS = ("sum", "m2")
    ATTRS = {"count": int, "exchange": str}
    OPTIONAL_ATTRS = frozenset({"exchange"})
    NUM_RESULTS = 2

    def infer(self):
        if self.attrs.get("exchange", "push") != "push":
            raise self.error(f"cluster_moments exchanges its partials by push only, got {self.attrs['exchange']!r}")
        if self.attrs["count"] < 1:
            raise self.error(f"count must be the columns of one slice (at least 1), got {self.attrs['count']}")
        a, b = (v.type for v in self.operands)
        if not (isinstance(a, VectorType) and a.kind == "cv" and a.dtype == F32) or a != b:
            raise self.error(f"expected two f32 column vectors of one type (cv<f32>), got {describe(a)} and {describe(b)}")
        return [a, a]


CLUSTER_OPS = (ClusterRank, *CLUSTER_REDUCE_OPS, ClusterMoments)
