"""Handlers for a block loop split over a cluster (``blocks {cluster = k}``, ir/ops/cluster.py).

The k CTAs of a cluster run the same block at once: ``run_cluster`` runs the body k times in
threads, each with its own copy of the SSA environment (the global tensors are shared) and its
rank; ``cluster_sum``/``max``/``min`` put the CTA's vector in its slot, wait for every CTA of the
cluster, combine the k slots in rank order in f32 (as the GPU does, so every CTA gets the same
values), and wait again before a slot can be reused; ``cluster_moments`` does the same with each
CTA's (sum, m2) pair and combines them by Chan's formula, in rank order, in f32."""
from __future__ import annotations

import threading

import numpy as np

from ..values import VectorValue

_COMBINE = {"sum": np.add, "max": np.fmax, "min": np.fmin}


class ClusterState:
    """What the CTAs of one cluster share: a slot per rank and a barrier."""

    def __init__(self, k: int):
        self.k = k
        self.slots: list = [None] * k
        self.barrier = threading.Barrier(k)


def run_cluster(it, body, index: list, k: int) -> None:
    """Run one block's body as the k CTAs of a cluster (threads, one environment each)."""
    from ..engine import Environment, Interpreter
    state, errors = ClusterState(k), []

    def cta(rank: int) -> None:
        env = Environment.__new__(Environment)
        env.values, env.dims = dict(it.env.values), it.env.dims
        sub = Interpreter(it.kernel, env, it.handlers)
        sub.cluster, sub.rank = state, rank
        try:
            with np.errstate(all="ignore"):
                sub.run_block(body, list(index))
        except BaseException as e:  # noqa: BLE001 - re-raised in the launching thread
            errors.append(e)
            state.barrier.abort()

    threads = [threading.Thread(target=cta, args=(r,)) for r in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
    if real or errors:
        raise (real or errors)[0]


def run_cluster_rank(it, op, args):
    return [getattr(it, "rank", 0)]


def run_cluster_reduce(it, op, args):
    (v,) = args
    state = getattr(it, "cluster", None)
    if state is None:  # a cluster of one CTA
        return [v]
    state.slots[it.rank] = v
    state.barrier.wait()
    acc = state.slots[0].data.astype(np.float32)
    for other in state.slots[1:]:
        acc = _COMBINE[op.FN](acc, other.data.astype(np.float32))
    state.barrier.wait()
    return [VectorValue(acc.astype(np.float32), v.valid.copy(), v.dtype)]


def run_cluster_moments(it, op, args):
    s, m2 = args
    state = getattr(it, "cluster", None)
    if state is None:  # one CTA: its slice is the whole row
        return [s, m2]
    state.slots[it.rank] = (s, m2)
    state.barrier.wait()
    n, k = np.float32(op.attrs["count"]), state.k
    sums = [slot[0].data.astype(np.float32) for slot in state.slots]
    parts = [slot[1].data.astype(np.float32) for slot in state.slots]
    total = sums[0]
    for other in sums[1:]:
        total = np.add(total, other)
    mean = np.divide(total, np.float32(k * op.attrs["count"]))
    acc = None
    for sj, qj in zip(sums, parts):
        dev = np.subtract(np.divide(sj, n), mean)
        term = np.add(qj, np.multiply(np.multiply(dev, dev), n))
        acc = term if acc is None else np.add(acc, term)
    state.barrier.wait()
    return [VectorValue(total.astype(np.float32), s.valid.copy(), s.dtype),
            VectorValue(acc.astype(np.float32), m2.valid.copy(), m2.dtype)]
