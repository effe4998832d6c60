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
CLUSTER_OPS = (ClusterRank, *CLUSTER_REDUCE_OPS)
