"""canonicalize: fold constant scalar ops, inline ifs on constant conditions, merge duplicate
const/dim ops, and remove unused effect-free ops — repeated until nothing changes.

Folding follows the language's integer rules, which the code generator and the interpreter
share: i32 arithmetic wraps at 32 bits, ``cdiv`` rounds up, ``floordiv`` rounds down and
``mod`` takes the sign of the divisor (``a == floordiv(a, b) * b + mod(a, b)``), ``div``
truncates toward zero; a division by a constant zero is left for run time. f32 folding rounds to
f32 after each op (IEEE, like ``add.rn.f32``); ``max``/``min`` of a NaN and a number give the
number (PTX ``max.f32``). These are the interpreter's rules (tkjit/interpreter/handlers/scalar.py).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Callable


from ..ir.core import Block, Kernel, Op, Value
from ..ir.ops import (Abs, Add, And, CDiv, Const, Dim, Div, Eq, FloorDiv, Ge, Gt, If, Le, Lt, Max, Min,
                      Mod, Mul, Ne, Neg, Not, Or, Relu, Select, Sub)
from ..ir.printer import format_attr
from ..ir.types import BOOL, F32, I32, ScalarType
from .decisions import subject_of
from .manager import Pass, PassContext, register_pass
from .rewrite import erase, has_effects, inline_region, resolve, use_counts

Scalar = int | float | bool


# ---------------------------------------------------------------- folding rules, by op class

def _wrap_i32(v: int) -> int:
    return (v + 2**31) % 2**32 - 2**31


def _cdiv(a: int, b: int) -> int:
    return -((-a) // b)


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _relu(a):
    return a if a > 0 else 0


I32_FOLDS: dict[type[Op], Callable] = {
    Add: operator.add, Sub: operator.sub, Mul: operator.mul, Max: max, Min: min,
    CDiv: _cdiv, FloorDiv: operator.floordiv, Mod: operator.mod, Div: _trunc_div,
    Neg: operator.neg, Abs: abs, Relu: _relu,
}
F32_FOLDS: dict[type[Op], str] = {
    Add: "add", Sub: "subtract", Mul: "multiply", Div: "divide", Max: "fmax", Min: "fmin",
    Neg: "negative", Abs: "abs", Relu: "fmax",  # relu(x) = fmax(x, 0) (operand added below)
}
"""numpy's f32 functions by name: numpy is imported only when an f32 constant is folded."""
COMPARE_FOLDS: dict[type[Op], Callable] = {
    Lt: operator.lt, Le: operator.le, Gt: operator.gt, Ge: operator.ge, Eq: operator.eq, Ne: operator.ne,
}
BOOL_FOLDS: dict[type[Op], Callable] = {And: operator.and_, Or: operator.or_, Not: operator.not_}
DIVISIONS = (CDiv, FloorDiv, Mod, Div)


def fold_value(op: Op, args: list[Scalar]) -> Scalar | None:
    """The constant an op with constant operands ``args`` computes, or None if it is not folded."""
    cls, t = type(op), op.results[0].type
    if cls in COMPARE_FOLDS:
        if op.operands[0].type == ScalarType(F32):
            import numpy as np
            args = [np.float32(a) for a in args]
        return bool(COMPARE_FOLDS[cls](*args))
    if t == ScalarType(BOOL) and cls in BOOL_FOLDS:
        return bool(BOOL_FOLDS[cls](*args))
    if t == ScalarType(I32) and cls in I32_FOLDS:
        if cls in DIVISIONS and args[1] == 0:  # left for run time (the interpreter reports it)
            return None
        return _wrap_i32(I32_FOLDS[cls](*(int(a) for a in args)))
    if t == ScalarType(F32) and cls in F32_FOLDS:
        import numpy as np
        f32_args = [np.float32(a) for a in args] + ([np.float32(0)] if cls is Relu else [])
        with np.errstate(all="ignore"):
            return float(getattr(np, F32_FOLDS[cls])(*f32_args))
    return None


# ---------------------------------------------------------------- the pass

@dataclass
class _Counts:
    """What one run of the pass rewrote, for its decision."""

    folded: int = 0
    ifs: int = 0
    selects: int = 0
    merged: int = 0
    removed: int = 0
    zero_divisions: list[Op] = field(default_factory=list)
    """Divisions by a constant zero, left for run time (reported once each)."""

    def total(self) -> int:
        return self.folded + self.ifs + self.selects + self.merged + self.removed


@register_pass
@dataclass(frozen=True)
class Canonicalize(Pass):
    """The ``canonicalize`` pass: fold constants, inline constant ifs, merge duplicate const/dim
    ops, remove dead code."""

    name = "canonicalize"
    summary = "fold constants, inline constant ifs, merge duplicate const/dim ops, remove dead code"

    max_iterations: int = 8
    """Sweeps before giving up on reaching a fixed point (each sweep does all four rewrites)."""

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        counts = _Counts()
        for _ in range(max(1, self.max_iterations)):
            before = counts.total()
            _Folder(ctx, counts).block(kernel.body)
            _merge_duplicates(kernel.body, [], {}, counts)
            _remove_dead(kernel, counts)
            if counts.total() == before:
                break
        _report(kernel, ctx, counts)
        return kernel


class _Folder:
    """One forward sweep: operands are redirected as it goes, constants are tracked by value."""

    def __init__(self, ctx: PassContext, counts: _Counts):
        self.ctx = ctx
        self.counts = counts
        self.constants: dict[Value, Scalar] = {}
        self.replacements: dict[Value, Value] = {}

    def block(self, block: Block) -> None:
        i = 0
        while i < len(block.ops):
            op = block.ops[i]
            op.operands = [resolve(v, self.replacements) for v in op.operands]
            if self.rewrite(op):
                continue  # op is gone; whatever replaced it now sits at index i
            for region in op.regions:
                self.block(region)
            i += 1

    def rewrite(self, op: Op) -> bool:
        """Fold ``op`` if its operands allow; True when it was removed from its block."""
        if isinstance(op, Const):
            self.constants[op.result] = op.attrs["value"]
            return False
        known = [self.constants.get(v) for v in op.operands]
        if isinstance(op, If) and known[0] is not None:
            return self.inline_if(op, bool(known[0]))
        if isinstance(op, Select) and known[0] is not None:
            self.replace(op, [op.operands[1] if known[0] else op.operands[2]])
            self.counts.selects += 1
            return True
        if op.regions or len(op.results) != 1 or None in known or not op.operands:
            return False
        value = fold_value(op, known)
        if value is None:
            if type(op) in DIVISIONS and known[1] == 0 and op not in self.counts.zero_divisions:
                self.counts.zero_divisions.append(op)
            return False
        const = Const([], {"value": value}, [op.result.type], [], op.span, [op.result.hint])
        block = op.parent
        block.ops[block.ops.index(op)] = const
        const.parent, op.parent = block, None
        self.constants[const.result] = value
        self.replacements[op.result] = const.result
        self.counts.folded += 1
        return False

    def inline_if(self, op: If, cond: bool) -> bool:
        taken = "then" if cond else "else"
        self.ctx.decide(subject_of(op), f"kept the {taken} region and removed the if",
                        f"the condition is the constant {format_attr(cond)}", region=taken)
        yielded = [resolve(v, self.replacements) for v in inline_region(op, op.regions[0 if cond else 1])]
        self.replace(op, yielded)
        self.counts.ifs += 1
        return True

    def replace(self, op: Op, values: list[Value]) -> None:
        for result, value in zip(op.results, values):
            self.replacements[result] = value
        erase(op)


def _key(op: Op) -> tuple[str, str, str] | None:
    """What makes two const or dim ops interchangeable (None for other ops)."""
    if isinstance(op, Const):
        return ("const", str(op.result.type), format_attr(op.attrs["value"]))
    if isinstance(op, Dim):
        return ("dim", "i32", op.attrs["name"])
    return None


def _merge_duplicates(block: Block, scopes: list[dict], replacements: dict[Value, Value],
                      counts: _Counts) -> None:
    """Scoped CSE of const/dim: a duplicate of one visible from an enclosing scope (or earlier
    in this block) is replaced by it."""
    scope: dict[tuple, Value] = {}
    scopes.append(scope)
    for op in list(block.ops):
        op.operands = [resolve(v, replacements) for v in op.operands]
        key = _key(op)
        if key is not None:
            earlier = next((s[key] for s in reversed(scopes) if key in s), None)
            if earlier is not None:
                replacements[op.result] = earlier
                erase(op)
                counts.merged += 1
                continue
            scope[key] = op.result
        for region in op.regions:
            _merge_duplicates(region, scopes, replacements, counts)
    scopes.pop()


def _remove_dead(kernel: Kernel, counts: _Counts) -> None:
    uses = use_counts(kernel)
    _remove_dead_in(kernel.body, uses, counts)


def _remove_dead_in(block: Block, uses: dict[Value, int], counts: _Counts) -> None:
    for op in reversed(list(block.ops)):
        for region in op.regions:
            _remove_dead_in(region, uses, counts)
        if has_effects(op) or any(uses.get(r, 0) for r in op.results):
            continue
        for inner in op.walk():
            for v in inner.operands:
                uses[v] -= 1
        erase(op)
        counts.removed += 1


def _report(kernel: Kernel, ctx: PassContext, counts: _Counts) -> None:
    subject = f"@{kernel.name}"
    live = set(kernel.walk())
    for op in counts.zero_divisions:
        if op in live:
            ctx.decide(subject_of(op), "left a division by zero unfolded",
                       f"the divisor of {op.NAME} is the constant 0")
    if counts.folded:
        ctx.decide(subject, f"folded {_ops(counts.folded)} into constants",
                   "every operand was a constant", folded=counts.folded)
    if counts.selects:
        ctx.decide(subject, f"resolved {counts.selects} select{_s(counts.selects)}",
                   "the condition was a constant", selects=counts.selects)
    if counts.merged:
        ctx.decide(subject, f"merged {_ops(counts.merged, 'duplicate const/dim op')}",
                   "an identical one was already visible", merged=counts.merged)
    if counts.removed:
        ctx.decide(subject, f"removed {_ops(counts.removed, 'unused op')}",
                   "their results were never used and they have no side effects", removed=counts.removed)


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def _ops(n: int, noun: str = "scalar op") -> str:
    return f"{n} {noun}{_s(n)}"
