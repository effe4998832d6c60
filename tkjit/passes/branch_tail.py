"""branch-tail: the register ops that follow an ``if`` in a loop body move into both of its
branches, so the branch a trip takes is one straight run of code.

    %r... = if %c { A; yield ... } { B; yield ... }      %r... = if %c { A; T'; yield ... }
    T  (register ops reading %r...)                ->                 { B; T; yield ... }
    U  (the first op a product reads, and on)            U

ptxas schedules within a basic block: the join after an ``if`` ends one, so the ops before it
and the ops after it cannot be interleaved. In an attention trip under scale-fold's branch the
scaled subtract (one FFMA a score) sat before the join and ``exp2`` (MUFU) after it, and the
FP32 work could not hide under the MUFU work (SASS, D = 128: 88 FFMA, then 90 MUFU, then 86
FADD, each its own block). The tail ``T`` is the run of ops right after the ``if`` in the same
block that are register computations (no load, store, mma, loop, if or effect) and whose results
no product (``mma_*``) reads: a product's operands are made where the schedule wants them (level
2 makes the next product's register A after the previous product's wait), so the run stops at
the first op that makes one. Ops of ``T`` that read nothing the ``if`` (or an op moved into it)
defines are moved before the ``if`` instead; the ``if`` then yields its old results still read
after it and the results of ``T`` read after it. Values are unchanged (both branches compute
what the program as written computes on the path it takes). Only an ``if`` directly in a loop
body, only when at least one op moves in, not for an ``if`` whose condition changes from trip to
trip (an edge test such as a causal mask's: its tail would be copied for a path few trips take;
an unscaled causal trip at D = 64 spilled so), and not for an ``if`` whose branches hold an ``if`` (or
a loop) of their own: their paths are split at the inner join anyway, and the causal attention
trip (scale-fold's branch holding the causal-mask if) measured 2-5% slower at D = 128 with its
tail moved in (H200, 2026-11-27, same run, general / template N = 2k..16k: 0.960/0.936/0.890/
0.932 against 0.979/0.972/0.930/0.977 as before;
benchmarks/results/2026-11-27-nvidia-h200-s12-attnloop-1.json).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Block, Kernel, Op, Value
from ..ir.ops import MMA_OPS, For, If, Load, Store, Yield
from .decisions import subject_of
from .hopper import depends_on
from .manager import Pass, PassContext, register_pass
from .rewrite import has_effects, users_of


def movable(op: Op, users: dict[Value, list[Op]]) -> bool:
    """A register computation no product reads."""
    if op.regions or isinstance(op, (Load, Store, For, If, Yield, *MMA_OPS)) or has_effects(op):
        return False
    return not any(isinstance(u, MMA_OPS) for r in op.results for u in users.get(r, []))


@dataclass
class Tail:
    branch: If
    hoisted: list      # ops of the run that read nothing the if defines: before the if
    moved: list        # the ops that do: into both branches, in order
    kept: list         # indices of the if's results still read after it
    escaping: list     # results of moved ops read after the run


def holds_if(branch: If) -> bool:
    """Whether a branch of ``branch`` holds an op with regions of its own (an if, a loop)."""
    return any(op.regions for region in branch.regions for op in region.ops)


def plan_tail(branch: If, users: dict[Value, list[Op]]) -> Tail | None:
    """What would move into ``branch`` (None: nothing); ``holds_if`` is checked by the caller."""
    block = branch.parent
    run = []
    for op in block.ops[block.ops.index(branch) + 1:]:
        if not movable(op, users):
            break
        run.append(op)
    defined = set(branch.results)
    hoisted, moved = [], []
    for op in run:
        if any(v in defined for v in op.operands):
            moved.append(op)
            defined.update(op.results)
        else:
            hoisted.append(op)
    if not moved:
        return None
    inside = set(moved)
    kept = [i for i, r in enumerate(branch.results) if any(u not in inside for u in users.get(r, []))]
    escaping = [r for op in moved for r in op.results if any(u not in inside for u in users.get(r, []))]
    return Tail(branch, hoisted, moved, kept, escaping)


def _clone(op: Op, mapping: dict[Value, Value]) -> Op:
    new = type(op)([mapping.get(v, v) for v in op.operands], dict(op.attrs),
                   [r.type for r in op.results], [], op.span, [None] * len(op.results))
    for old, fresh in zip(op.results, new.results):
        mapping[old] = fresh
    return new


def apply_tail(t: Tail) -> If:
    """The new ``if`` in place of the old one; the hoisted ops before it."""
    old = t.branch
    block = old.parent
    at = block.ops.index(old)
    for op in t.hoisted + t.moved:
        block.ops.remove(op)
    regions = []
    last = len(old.regions) - 1
    for n, region in enumerate(old.regions):
        term = region.terminator
        mapping = dict(zip(old.results, term.operands))
        body = Block(list(region.args))
        for op in region.ops:
            if op is not term:
                body.append(op)
        for op in t.moved:
            if n == last:  # the last branch takes the ops themselves (their names stay)
                op.operands = [mapping.get(v, v) for v in op.operands]
                body.append(op)
            else:
                body.append(_clone(op, mapping))
        outs = [term.operands[i] for i in t.kept] + [mapping.get(v, v) for v in t.escaping]
        body.append(Yield(outs, {}, [], [], term.span))
        regions.append(body)
    types = [old.results[i].type for i in t.kept] + [v.type for v in t.escaping]
    hints = [old.results[i].hint for i in t.kept] + [None] * len(t.escaping)
    new = If(list(old.operands), dict(old.attrs), types, regions, old.span, hints)
    for op in t.hoisted + [new]:
        op.parent = block
    block.ops[at:at + 1] = t.hoisted + [new]
    return new


def _replace_outside(kernel: Kernel, new: If, swap: dict[Value, Value]) -> None:
    inside = set(new.walk())
    for op in kernel.walk():
        if op not in inside:
            op.operands = [swap.get(v, v) for v in op.operands]


@register_pass
@dataclass(frozen=True)
class BranchTail(Pass):
    """The ``branch-tail`` pass (module docstring)."""

    name = "branch-tail"
    summary = "move the register ops after a loop body's if into both branches (one basic block a path)"
    target_specific = True

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        loops = [op for op in kernel.walk() if isinstance(op, For)]
        users = users_of(kernel)
        if not any(plan_tail(op, users) for loop in loops for op in loop.regions[0].ops
                   if isinstance(op, If)):
            return kernel  # (a GEMM: nothing to do)
        for loop in loops:
            body = loop.regions[0]
            for branch in [op for op in body.ops if isinstance(op, If)]:
                t = plan_tail(branch, users_of(kernel))
                if t is None:
                    continue
                if depends_on(branch.operands[0], set(body.args)):  # an edge test of some trips
                    ctx.decide(subject_of(branch), "the ops after it stay after its join",
                               "its condition changes from trip to trip (an edge test, e.g. a causal "
                               "mask's): the tail copied into it would double the trip's code for a "
                               "path few trips take (unscaled causal attention at D = 64 spilled)")
                    continue
                if holds_if(branch):  # its paths are split by the inner if anyway
                    ctx.decide(subject_of(branch), "the ops after it stay after its join",
                               "its branches hold an if of their own (their paths are split at its "
                               "join anyway); measured slower with the tail moved in (causal "
                               "attention, D = 128: 2-5%)")
                    continue
                new = apply_tail(t)
                swap = {t.branch.results[i]: r for i, r in zip(t.kept, new.results)}
                swap.update(zip(t.escaping, new.results[len(t.kept):]))
                _replace_outside(kernel, new, swap)
                names = ", ".join(f"{op.NAME} at {op.span.location()}" if op.span else op.NAME
                                  for op in t.moved)
                ctx.decide(subject_of(new), f"{len(t.moved)} op(s) after it moved into both branches",
                           f"{names} are register work after the if's join: in the branch, each path "
                           "is one basic block, so ptxas can interleave it with the branch's own work "
                           "(a join ends a block); the run stops at the first op a product reads",
                           moved=len(t.moved), hoisted=len(t.hoisted))
        return kernel
