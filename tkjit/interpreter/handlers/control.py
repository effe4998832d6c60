"""Handlers for structured control flow: the block loop, sequential loops, ifs.

The block loop runs its body once per block index (row-major order); ``schedule(persistent)``
and ``group`` change only which thread block runs which block on the GPU, so every schedule
means the same here; ``cluster = k`` runs each block as k CTAs at once (cluster.py). ``for`` carries its iter args through ``yield``; ``if`` runs one region.
"""
from __future__ import annotations

import itertools

from .cluster import run_cluster
from ...ir.ops.check import loop_step_template, render


def run_blocks(it, op, args):
    body = op.regions[0]
    k = op.attrs.get("cluster", 1)
    for index in itertools.product(*(range(n) for n in args)):
        if k > 1:
            run_cluster(it, body, list(index), k)
        else:
            it.run_block(body, list(index))
    return []


def run_for(it, op, args):
    lo, hi, step, *carried = args
    if step <= 0 and lo < hi:
        raise it.error(op, render(loop_step_template(), [step, lo, hi]))
    body = op.regions[0]
    k = lo
    while k < hi:
        carried = it.run_block(body, [k, *carried])
        k += step
    return carried


def run_if(it, op, args):
    (cond,) = args
    return it.run_block(op.regions[0] if cond else op.regions[1], [])
