"""scale-fold: a register tile scaled by a runtime scalar, whose row maxima are taken, keeps its
raw values when the scalar is positive; the scale then goes into one FFMA per element.

    s = mul x, c                     x: rt<f32>, c: an f32 scalar
    [s = causal_mask s, ...]         (fill -inf or +inf; also inside ifs that yield s or it)
    [s = cmp_select a, b, s, -inf]   (either side; the other one s or a constant ±inf)
    m = row_max s                    (row/col max or min)
    t = sub_row s, v                 (sub/add of a row or column vector)

materializes ``s`` (one FMUL per element) because the reductions read it. For ``c > 0``,
``row_max(x * c) = row_max(x) * c`` and masking to ±inf (causal_mask, or a cmp_select against
a constant ±inf) commutes with the scaling, so the
reductions can read ``x`` and ``t = sub_row(mul(x, c), v)`` is a multiply feeding a subtract that
ptxas contracts into one FFMA per element: one FP instruction less per element, and the scaled
tile is never held. The sign of ``c`` is only known at run time, so the pass versions the ops
that read ``s`` (from the ``mul`` to its last reader in the block) under a uniform branch:

    %r... = if {fold = "scale"} (gt c, 0.0) {
              the same ops on x, each reduction times c, each broadcast on mul(x, c); yield ...
            } { the original ops; yield ... }

A broadcast read only by ``exp`` (a softmax in base e: ``p = exp(sub_row(s, m))``) takes the
change of base too: ``exp(x·c − m) = 2^(x·(c·log2 e) − m·log2 e)``, so the folded branch reads
``exp2(sub_row(mul(x, c·log2e), mul(m, log2e)))``: still one FFMA per element, and the multiply by
log2 e that ``exp`` costs each element (exp lowers to ex2 of x·log2 e) moves to one multiply per
row and one per scale. Where the exps come after the versioned range, the else branch yields its
subtract times log2e and the exps after the ``if`` become exp2s (so they stay outside the branch,
where ptxas can interleave them with what follows); an exp inside the range becomes exp2 on the
folded branch only.

The ``if`` is marked ``{fold = "scale"}`` (printed and parsed with it), so the pass run on its
own output leaves each fold as it is: it does not look into a marked ``if``'s folded branch (its
multiplies by ``c`` are the fold's own), nor fold a scaling by ``c`` in its else branch, where
``c > 0`` is false (that fold would never run). Without the mark the else branch, the ops as
written, would be versioned again on every run.

Ops of that range that do not depend on ``s`` are moved before the ``if``; the ``if`` yields
what later ops read. The pass leaves a ``mul`` alone (and says why) when something else reads
the scaled tile (a store, a row_sum, an mma, ...), when nothing reduces it, or when the range
holds a load, an mma or a store. It runs before layout, so the schedule passes see the branch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir.core import Block, Kernel, Op, Value
from ..ir.ops import (BROADCAST_OPS, MMA_OPS, REDUCE_OPS, CausalMask, CmpSelect, Const, Exp, Exp2, For,
                      Gt, If, Load, Mul, Yield)
from ..ir.types import BOOL, F32, ScalarType, TileType
from .decisions import subject_of
from .manager import Pass, PassContext, register_pass
from .rewrite import all_blocks, has_effects, users_of

F32_T, BOOL_T = ScalarType(F32), ScalarType(BOOL)
SINK_REDUCE = frozenset(cls for cls in REDUCE_OPS if cls.FN in ("max", "min"))
"""Reductions that commute with a positive scale: max(x·c) = max(x)·c."""
SINK_BROADCAST = frozenset(cls for cls in BROADCAST_OPS if cls.FN in ("sub", "add"))
"""Broadcasts whose tile operand, scaled, contracts with them into one FFMA per element."""
LOG2E = math.log2(math.e)


class NotFoldable(Exception):
    """Why a scaling is left as it is."""


@dataclass
class Fold:
    """One scaling the pass versions: the mul, its raw tile and scale, the ops it moves."""

    mul: Op
    x: Value
    c: Value
    scaled: set            # values that equal the raw tile times c (the mul's result, masks of it)
    hoisted: list          # ops of the range that do not depend on the scaled tile
    versioned: list        # ops of the range that do, in order (the mul first)
    escaping: list         # their results read after the range
    sinks: list            # the reductions and broadcasts that read a scaled value
    base_e: set            # the broadcasts of those whose every reader is an exp (base 2 on the fold)


def scaled_operands(op: Op) -> tuple[Value, Value] | None:
    """(tile, scalar) when ``op`` multiplies an f32 register tile by an f32 scalar."""
    if not isinstance(op, Mul):
        return None
    a, b = op.operands
    for x, c in ((a, b), (b, a)):
        if isinstance(x.type, TileType) and x.type.space == "rt" and x.type.dtype == F32 \
                and c.type == F32_T:
            return x, c
    return None


def _top(op: Op, block: Block) -> Op | None:
    """The op of ``block`` that is or contains ``op`` (None: outside ``block``)."""
    while op is not None and op.parent is not block:
        parent = op.parent.parent if op.parent is not None else None
        op = parent if isinstance(parent, Op) else None
    return op


def _mask_fill_ok(op: CausalMask) -> bool:
    fill = op.attrs.get("fill", float("-inf"))
    return isinstance(fill, float) and math.isinf(fill)


def _is_inf(v: Value) -> bool:
    """A scalar constant ±inf (c · ±inf = ±inf for c > 0)."""
    op = v.owner
    return isinstance(op, Const) and isinstance(op.attrs.get("value"), float) \
        and math.isinf(op.attrs["value"])


def plan_fold(mul: Op, users: dict[Value, list[Op]], base2: bool = True) -> Fold | None:
    """The fold of ``mul``; None when no max/min reduction reads the scaled tile (nothing to
    gain); NotFoldable (why not) when one does but the fold does not apply."""
    x, c = scaled_operands(mul)
    block = mul.parent
    scaled, sinks, work, blockers = {mul.result}, [], [mul.result], []
    pending_ifs: dict[tuple[If, int], Value] = {}
    while work:
        v = work.pop()
        for u in users.get(v, []):
            where = f"{u.NAME} at {u.span.location()}" if u.span else u.NAME
            if isinstance(u, CausalMask) and u.operands[0] is v and _mask_fill_ok(u) \
                    and all(w is not v for w in u.operands[1:]):
                if u.result not in scaled:
                    scaled.add(u.result)
                    work.append(u.result)
            elif isinstance(u, CmpSelect) and all(w is not v for w in u.operands[:2]) \
                    and all(w is v or _is_inf(w) for w in u.operands[2:]):
                if u.result not in scaled:  # a ? s : -inf, scaled or not, is scaled by c > 0
                    scaled.add(u.result)
                    work.append(u.result)
            elif type(u) in SINK_REDUCE:
                sinks.append(u)
            elif type(u) in SINK_BROADCAST and u.operands[0] is v and u.operands[1] is not v:
                sinks.append(u)
            elif isinstance(u, Yield) and isinstance(u.parent.parent, If):
                owner = u.parent.parent
                for i, w in enumerate(u.operands):
                    if w is v:
                        pending_ifs[(owner, i)] = owner.results[i]
                        if owner.results[i] not in scaled:
                            scaled.add(owner.results[i])
                            work.append(owner.results[i])
            else:
                blockers.append(f"{where} reads the scaled tile")
    if not any(type(s) in SINK_REDUCE for s in sinks):
        return None  # nothing to gain: no reduction makes the scaled tile be held
    if blockers:
        raise NotFoldable("; ".join(dict.fromkeys(blockers)))
    for (owner, i), result in pending_ifs.items():
        for region in owner.regions:
            if region.terminator.operands[i] not in scaled:
                raise NotFoldable(f"the if at {owner.span.location() if owner.span else '?'} yields "
                                  "the scaled tile from one branch only")
    base_e = {op for op in sinks if base2 and type(op) in SINK_BROADCAST and users.get(op.result)
              and all(isinstance(u, Exp) for u in users[op.result])}
    touching = [mul] + sinks + [users_of_scaled for v in scaled for users_of_scaled in users.get(v, [])]
    tops = []
    for op in touching:
        top = _top(op, block)
        if top is None:
            raise NotFoldable(f"{op.NAME} reads the scaled tile outside the block of the mul")
        tops.append(block.ops.index(top))
    start, end = block.ops.index(mul), max(tops)
    span_ops = block.ops[start:end + 1]
    defined = {mul.result}
    versioned, hoisted = [], []
    for op in span_ops:
        inner = list(op.walk())
        if op is mul or any(v in defined for o in inner for v in o.operands):
            if any(isinstance(o, (Load, For, *MMA_OPS)) or (has_effects(o) and not isinstance(o, Yield))
                   for o in inner):
                raise NotFoldable(f"{op.NAME} at {op.span.location() if op.span else '?'} between "
                                  "the mul and its last reader is not a register computation")
            versioned.append(op)
            defined.update(r for o in inner for r in o.results)
        else:
            hoisted.append(op)
    inside = {o for op in versioned for o in op.walk()}
    escaping = []
    for op in versioned:
        for r in op.results:
            if any(u not in inside for u in users.get(r, [])) and r not in escaping:
                escaping.append(r)
    return Fold(mul, x, c, scaled, hoisted, versioned, escaping, sinks, base_e)


def _clone(op: Op, mapping: dict[Value, Value], regions=None) -> Op:
    """A copy of ``op`` on mapped operands. Its results take no hints: the originals keep theirs
    (printed names then do not depend on how the hints were spelled: the front end's ``s`` for
    every rebinding, or a parsed ``s.1``), so the IR prints the same from source and from text."""
    new = type(op)([mapping.get(v, v) for v in op.operands], dict(op.attrs),
                   [r.type for r in op.results], regions or [], op.span, [None] * len(op.results))
    for old, fresh in zip(op.results, new.results):
        mapping[old] = fresh
    return new


def _fold_into(ops: list[Op], f: Fold, mapping: dict[Value, Value], out: Block,
               base2: dict | None = None) -> None:
    """``ops`` on the raw tile into ``out``: scaled values map to raw ones, each reduction of one
    is multiplied by c after, each broadcast on one reads mul(raw, c); a broadcast only exp reads
    is taken in base 2 (``base2``: such broadcasts' new results, and the scale c·log2e once made),
    and those exps become exp2."""
    base2 = {} if base2 is None else base2
    for op in ops:
        if op is f.mul:
            mapping[op.result] = f.x
        elif op in f.base_e:
            tile, vec = mapping[op.operands[0]], mapping.get(op.operands[1], op.operands[1])
            if "scale" not in base2:
                log2e = out.append(Const([], {"value": LOG2E}, [F32_T], [], op.span, [None]))
                c2 = out.append(Mul([f.c, log2e.result], {}, [F32_T], [], op.span, [None]))
                base2["log2e"], base2["scale"] = log2e.result, c2.result
            scaled = out.append(Mul([tile, base2["scale"]], {}, [tile.type], [], op.span, [None]))
            vec2 = out.append(Mul([vec, base2["log2e"]], {}, [vec.type], [], op.span, [None]))
            new = out.append(type(op)([scaled.result, vec2.result], dict(op.attrs), [op.result.type], [],
                                      op.span, [None]))
            mapping[op.result] = new.result
            base2[new.result] = True
        elif isinstance(op, Exp) and mapping.get(op.operands[0]) in base2:
            new = out.append(Exp2([mapping[op.operands[0]]], dict(op.attrs), [op.result.type], [], op.span,
                                  [None]))
            mapping[op.result] = new.result
        elif op in f.sinks and type(op) in SINK_REDUCE:
            raw = out.append(_clone(op, mapping))
            scaled = out.append(Mul([raw.result, f.c], {}, [op.result.type], [], op.span, [None]))
            mapping[op.result] = scaled.result
        elif op in f.sinks:
            tile = mapping[op.operands[0]]
            scaled = out.append(Mul([tile, f.c], {}, [tile.type], [], op.span, [None]))
            mapping[op.operands[0]] = scaled.result  # for this op only
            out.append(_clone(op, mapping))
            mapping[op.operands[0]] = tile
        elif op.regions:
            regions = []
            for region in op.regions:
                inner = Block([_arg(a, mapping) for a in region.args])
                _fold_into(list(region.ops), f, mapping, inner, base2)
                regions.append(inner)
            out.append(_clone(op, mapping, regions))
        else:
            out.append(_clone(op, mapping))


def _arg(a: Value, mapping: dict[Value, Value]) -> Value:
    new = Value(a.type, None)
    mapping[a] = new
    return new


def apply_fold(f: Fold) -> If:
    """Replace the range with the hoisted ops, ``cond = c > 0`` and the versioned ``if``."""
    block = f.mul.parent
    at = block.ops.index(f.mul)
    for op in f.hoisted + f.versioned:
        block.ops.remove(op)
    span = f.mul.span
    zero = Const([], {"value": 0.0}, [F32_T], [], span, [None])
    cond = Gt([f.c, zero.result], {}, [BOOL_T], [], span, ["scale_positive"])
    then = Block()
    mapping: dict[Value, Value] = {}
    _fold_into(f.versioned, f, mapping, then)
    then.append(Yield([mapping[v] for v in f.escaping], {}, [], [], span))
    orig = Block()
    for op in f.versioned:
        orig.append(op)
    yields = list(f.escaping)
    if any(v.owner in f.base_e for v in yields):  # taken in base 2 on both paths: the exps after are exp2s
        log2e = orig.append(Const([], {"value": LOG2E}, [F32_T], [], span, [None]))
        for i, v in enumerate(yields):
            if v.owner in f.base_e:
                yields[i] = orig.append(Mul([v, log2e.result], {}, [v.type], [], span, [None])).result
    orig.append(Yield(yields, {}, [], [], span))
    branch = If([cond.result], {"fold": "scale"}, [v.type for v in f.escaping], [then, orig], span,
                [None] * len(f.escaping))
    new_ops = f.hoisted + [zero, cond, branch]
    for op in new_ops:
        op.parent = block
    block.ops[at:at] = new_ops
    return branch


def _replace_after(kernel: Kernel, branch: If, f: Fold) -> None:
    """Every read of an escaping value outside the ``if`` now reads the ``if``'s result; an exp
    of a result both branches yield in base 2 becomes an exp2 (same result value)."""
    inside = set(branch.walk())
    swap = dict(zip(f.escaping, branch.results))
    base2 = {branch.results[i] for i, v in enumerate(f.escaping) if v.owner in f.base_e}
    for op in list(kernel.walk()):
        if op in inside:
            continue
        op.operands = [swap.get(v, v) for v in op.operands]
        if isinstance(op, Exp) and op.operands[0] in base2:
            new = Exp2(list(op.operands), dict(op.attrs), [op.result.type], [], op.span, [None])
            new.results = op.results
            op.result.owner = new
            new.parent = op.parent
            block = op.parent
            block.ops[block.ops.index(op)] = new


def fold_scale(branch: If) -> Value | None:
    """The scale ``c`` of a versioned ``if`` (its condition is ``gt c, 0.0``); None: not one."""
    cond = branch.operands[0].owner
    if branch.attrs.get("fold") != "scale" or not isinstance(cond, Gt):
        return None
    return cond.operands[0]


def folded_by(mul: Op) -> tuple[If, bool] | None:
    """(the versioned ``if``, whether in its folded branch) that already accounts for ``mul``:
    one whose folded (then) branch holds it (the fold's own output), or whose as-written (else)
    branch holds it and tests ``mul``'s own scale (not positive there, so a fold of it would
    never run). None: neither."""
    c = scaled_operands(mul)[1]
    op = mul
    while op.parent is not None and isinstance(op.parent.parent, Op):
        owner = op.parent.parent
        scale = fold_scale(owner) if isinstance(owner, If) else None
        if scale is not None and (op.parent is owner.regions[0] or scale is c):
            return owner, op.parent is owner.regions[0]
        op = owner
    return None


@register_pass
@dataclass(frozen=True)
class ScaleFold(Pass):
    """The ``scale-fold`` pass (module docstring)."""

    name = "scale-fold"
    summary = "keep a scaled tile raw when its scale is positive: max on raw values, one FFMA per element"
    target_specific = True
    base2: int = 1
    """1: a broadcast only exp reads takes the change of base on the folded branch; 0: it keeps
    exp (``scale-fold{base2=0}``, for same-run A/Bs)."""

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        muls = [op for block in all_blocks(kernel) for op in block.ops if scaled_operands(op)]
        if not muls:
            return kernel
        for mul in muls:
            if mul.parent is None:
                continue
            done = folded_by(mul)
            if done is not None:
                if not done[1]:  # (the folded branch's multiplies are the fold's own: no word)
                    where = done[0].span.location() if done[0].span else "?"
                    ctx.decide(subject_of(mul), "left as written", f"it is the as-written branch of "
                               f"the versioned if at {where}, taken when the scale is not positive")
                continue
            try:
                f = plan_fold(mul, users_of(kernel), bool(self.base2))
            except NotFoldable as e:
                ctx.decide(subject_of(mul), "left as written", f"a max/min reduction reads the "
                           f"scaled tile, but {e}")
                continue
            if f is None:
                continue
            branch = apply_fold(f)
            _replace_after(kernel, branch, f)
            reads = ", ".join(f"{s.NAME} at {s.span.location()}" if s.span else s.NAME
                              for s in f.sinks)
            base = "" if not f.base_e else (
                "; " + ", ".join(f"{b.NAME} at {b.span.location()}" if b.span else b.NAME for b in f.base_e)
                + " feed only exp: taken in base 2 there (exp2 of x·(c·log2e) − v·log2e), so no "
                "multiply by log2e per element")
            ctx.decide(subject_of(mul), "folded into its readers when the scale is positive",
                       f"{reads} read the raw tile under a uniform branch on "
                       f"%{f.c.hint or 'the scale'} > 0: each reduction is scaled once per row, "
                       "each broadcast's scaled operand contracts into one FFMA per element (the "
                       f"scaled tile is never held){base}; otherwise the ops run as written",
                       versioned=len(f.versioned), yields=len(f.escaping), base2=len(f.base_e))
        return kernel
