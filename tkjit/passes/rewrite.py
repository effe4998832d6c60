"""IR surgery the passes share: counting and replacing uses, side effects, inlining, cloning.

The IR keeps no use lists; these helpers walk the kernel instead (kernels are small), so a pass
collects its replacements in a dict and applies them in one sweep. Dicts are keyed by the Value
itself (identity), never by ``id()``: an erased value's id may be reused by a new one.
"""
from __future__ import annotations

from typing import Iterator

from ..ir.core import Block, Kernel, Op, Value
from ..ir.ops import (BINARY_OPS, BROADCAST_OPS, MMA_OPS, REDUCE_OPS, UNARY_OPS, CausalMask, CmpSelect,
                      Const, Iota,
                      Copy, Cvt, Dim, Fill, For, If, Load, Select, Yield, Zeros)

EFFECT_FREE_OPS: frozenset[type[Op]] = frozenset({
    Const, Dim, *BINARY_OPS, *UNARY_OPS, Cvt, Zeros, Fill, CausalMask, Select, Iota, CmpSelect, Load, Copy,
    *REDUCE_OPS, *BROADCAST_OPS, *MMA_OPS})
"""Ops that only compute their results: unused, they may go. Listed, not derived, so that an
op added later is kept until someone says it is free of effects."""
REGION_OPS_EFFECT_FREE_IF_BODY_IS = frozenset({For, If})
"""Ops whose effects are exactly those of the ops in their regions."""


def has_effects(op: Op) -> bool:
    """True when removing ``op`` could change what the kernel does (stores, terminators,
    the block loop, unknown ops, and loops/ifs that contain any of these)."""
    if type(op) in EFFECT_FREE_OPS:
        return False
    if type(op) in REGION_OPS_EFFECT_FREE_IF_BODY_IS:
        return any(has_effects(inner) for region in op.regions for inner in region.ops
                   if not isinstance(inner, Yield))
    return True


def all_blocks(kernel: Kernel) -> Iterator[Block]:
    yield kernel.body
    for op in kernel.walk():
        yield from op.regions


def users_of(kernel: Kernel) -> dict[Value, list[Op]]:
    """The ops that read each value, in program order (values hash by identity)."""
    users: dict[Value, list[Op]] = {}
    for op in kernel.walk():
        for v in op.operands:
            users.setdefault(v, []).append(op)
    return users


def use_counts(kernel: Kernel) -> dict[Value, int]:
    """How many operands refer to each value (values hash by identity)."""
    counts: dict[Value, int] = {}
    for op in kernel.walk():
        for v in op.operands:
            counts[v] = counts.get(v, 0) + 1
    return counts


def resolve(v: Value, replacements: dict[Value, Value]) -> Value:
    """Follow a chain of replacements (a → b → c) to its end."""
    while v in replacements:
        v = replacements[v]
    return v


def replace_uses(kernel: Kernel, replacements: dict[Value, Value]) -> None:
    """Make every operand that refers to a replaced value refer to its replacement."""
    if not replacements:
        return
    for op in kernel.walk():
        op.operands = [resolve(v, replacements) for v in op.operands]


def inline_region(op: Op, region: Block) -> list[Value]:
    """Move ``region``'s ops (all but its yield) into ``op``'s block just before ``op``; return
    the values the region yielded. The caller then replaces ``op``'s results and removes it."""
    parent = op.parent
    if parent is None:
        raise ValueError(f"{op.NAME} is not in a block")
    body = list(region.ops)
    yielded: list[Value] = []
    if body and isinstance(body[-1], Yield):
        yielded = list(body[-1].operands)
        body = body[:-1]
    at = parent.ops.index(op)
    for moved in body:
        moved.parent = parent
    parent.ops[at:at] = body
    region.ops = []
    return yielded


def erase(op: Op) -> None:
    """Remove ``op`` from its block (its results must have no uses left)."""
    if op.parent is not None:
        op.parent.ops.remove(op)
        op.parent = None


def clone_kernel(kernel: Kernel) -> Kernel:
    """A deep copy with the same names, attributes and source spans (passes may then mutate
    the copy while the original stays as it was)."""
    mapping: dict[Value, Value] = {}
    params = [_clone_value(p, mapping) for p in kernel.params]
    body = _clone_block(kernel.body, mapping)
    return Kernel(kernel.name, params, body, dict(kernel.attrs), kernel.span)


def _clone_value(v: Value, mapping: dict[Value, Value]) -> Value:
    new = Value(v.type, v.hint)
    mapping[v] = new
    return new


def _clone_block(block: Block, mapping: dict[Value, Value]) -> Block:
    new = Block([_clone_value(a, mapping) for a in block.args])
    for op in block.ops:
        new.append(_clone_op(op, mapping))
    return new


def _clone_op(op: Op, mapping: dict[Value, Value]) -> Op:
    regions = [_clone_block(r, mapping) for r in op.regions]
    operands = [mapping.get(v, v) for v in op.operands]
    new = type(op)(operands, dict(op.attrs), [r.type for r in op.results], regions, op.span,
                   [r.hint for r in op.results])
    for old, fresh in zip(op.results, new.results):
        mapping[old] = fresh
    return new
