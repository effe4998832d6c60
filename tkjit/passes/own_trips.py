"""own-trips: each consumer warpgroup runs a ring loop only over the trips its own rows need.

A tile's register tiles of R rows are split over C cooperative consumers, consumer c holding rows
[c·R/C, (c+1)·R/C) (warp-spec). A causal attention's key loop runs T trips for the whole block;
with R = 192 and 128-key blocks the upper consumers' rows see keys the lower ones' do not, so the
lower consumers compute whole trips whose scores are all -inf for their rows. This pass proves,
from the IR, that those trips change nothing a consumer keeps, and marks the loop; the mbarrier
pass then gives each consumer its own trip count (``Loop(part="own")``) and takes the tile's
remaining trips *idle* (``Loop(part="rest")``: wait for the stage's fill, release it), so the
producer still loads the block's T trips and never waits for a release that does not come.

**What is proved** (``plan_of``), for a loop ``for j in lo .. hi step st`` (st a positive
constant) in the block body:

1. Every ``causal_mask(x, q0, k0)`` in the body (fill -inf) has the same query offset ``q0``
   computed from the tile alone (scalar ops of block indices, constants and scalar arguments, not
   of j) and the key offset ``k0 = a·j`` (a a positive constant); they are structurally the same
   expression where there are several (scale-fold's two branches). Element (r, k) of the mask's
   tile is -inf where ``k0 + k > q0 + r``, so trip j is wholly masked for consumer c's rows when
   ``a·j > q0 + last_c`` (last_c = (c+1)·R/C - 1, its last row, against the block's first key).
   That holds for a suffix of the trips: consumer c's own trips are
   ``own_c = min(T, lim < 0 ? 0 : lim / (a·st) + 1)``, ``lim = q0 + last_c - a·lo``.
2. An ``if`` whose condition depends on j and one of whose branches holds a mask is assumed to
   take that branch on the skipped trips; the condition is evaluated at run time on every trip
   after a consumer's own, and if it fails on one, all T trips are that consumer's own.
3. Under "the masks' tiles are all -inf on these rows", an abstract interpretation of the body
   (row by row, so each fact concerns only the consumer's own rows) shows that every carried
   register tile or vector is yielded unchanged and every carried scalar is yielded as it came:
   ``max(m, -inf) = m``; ``x - m`` of -inf is -inf; ``exp2(-inf) = 0``; ``m - m = 0``,
   ``exp2(0) = 1``; ``x·1 = x``, ``x + 0 = x``; a product whose A is 0 adds nothing to its
   accumulator; a scalar multiply keeps -inf when the scalar is positive (a positive constant,
   or inside ``if c > 0``); ``if``s join their branches. The body stores nothing.

**Assumptions** (documented, not proved): the carried values a skipped trip subtracts (the row
maxima: ``s - m``, ``m - m``) are finite, i.e. each row saw some unmasked key in its own trips (in a causal tile every row sees key 0 ..
itself; a row that sees no key has no softmax, and the program as written gives NaN there too), and
the tiles loaded on the skipped trips are finite (0·v = 0). Under those, the skip is exact: the
consumer's results are bit-identical to running every trip.

The pass is taken when the consumers are cooperative (not ping-pong), more than one, and the
trip counts can differ: it evaluates the loop bound and the own counts for block indices 0..63
(a dim N of 2^16; other block indices 0) and leaves the loop alone when no consumer ever has
fewer own trips than the tile (e.g. 128-row blocks over 128-key blocks: every consumer reaches
the diagonal block). A bound it cannot evaluate (a scalar argument) is taken as differing.
Logged: the loop, each consumer's formula, the conditions checked at run time, or why not.

**Rows past the end** (option ``past_end``, passes/past_end.py): a consumer whose rows of the tile
all lie at or past the end of every store's row dimension (the stores clip there) has no own
trips: all of the tile's trips are idle for it, since nothing it computes is stored and (proved:
every op keeps each consumer's rows to itself) nothing it computes reaches another consumer's
rows. Its own count is ``row0·R + first_c >= E ? 0 : the mask's formula`` (row0 the stores' row
tile coordinate, E the largest extent of their row dimensions), the comparison made after the
run-time conditions. ``auto``: wherever the loop takes own trips for its mask (a causal tile, whose
last block is run first and is the heaviest); ``on``: also on loops without a mask or with one
whose trips never differ (every trip a consumer's own unless its rows are past the end: the loop
is marked ``own_trips = [rows, 0]``); ``off``: never. Not ``on`` by default: the attention
template's idle copy measured slower on non-causal kernels (ptxas schedules the twice-emitted tile
body differently). Marked ``past_end = true`` on the loop; logged with the stores and extents, or
why not.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..ir.core import Kernel, Op, Value
from ..ir.ops import MMA_OPS, CausalMask, Const, For, If, Yield
from ..ir.ops import async_ops
from ..ir.types import ScalarType, TileType
from ..errors import PassError
from .decisions import subject_of
from .hopper import block_loop, depends_on, shared_loads
from .manager import Pass, PassContext, register_pass
from .past_end import NotPastEnd, PastEnd, past_end_of, same_expr

SAMPLE_BLOCKS = 64
SAMPLE_DIM = 1 << 16
PAST_END = ("auto", "on", "off")


class NotOwn(Exception):
    """Why a loop keeps the tile's trip count for every consumer."""


@dataclass
class OwnPlan:
    """What a consumer needs to compute its own trips of ``loop``: the masks' query offset ``q0``
    (its scalar ops, to emit before the loop), the key offset's scale ``a`` (k0 = a·j), the
    loop's constant step, the rows each consumer holds, and the conditions assumed on the
    skipped trips (value, the branch taken). ``scale`` 0: no mask (every trip is each consumer's
    own); ``end``: the rows-past-the-end facts where that rule applies (passes/past_end.py)."""

    loop: For
    q0: Value
    q0_ops: list
    scale: int
    step: int
    rows: int
    conds: list = field(default_factory=list)
    cond_ops: list = field(default_factory=list)
    end: PastEnd | None = None

    def own(self, consumer: int, q0: int, lo: int, trips: int) -> int:
        """Consumer ``consumer``'s own trips before the run-time condition check (the formula the
        emitter prints and the CPU schedule runs)."""
        if not self.scale:
            return trips
        div = self.scale * self.step
        return min(trips, max(q0 + self.last(consumer) - self.scale * lo + div, 0) // div)

    def last(self, consumer: int) -> int:
        """The consumer's last row of the tile."""
        return self.rows * (consumer + 1) - 1

    def first(self, consumer: int) -> int:
        """The consumer's first row of the tile."""
        return self.rows * consumer

    def formula(self, consumer: int) -> str:
        div = self.scale * self.step
        return (f"min(T, max(q0 + {self.last(consumer)} - {self.scale}·lo + {div}, 0) / {div})"
                if self.scale else "T")

    def end_formula(self, consumer: int) -> str:
        """When the rows-past-the-end rule idles the consumer (``end``)."""
        ends = [v.owner.attrs["name"] for v in self.end.extents]
        end = ends[0] if len(ends) == 1 else f"max({', '.join(ends)})"
        return f"{self.end.tile_rows}·%{self.end.row0.hint or 'row0'} + {self.first(consumer)} >= {end}"


# -- the analysis -----------------------------------------------------------------------------
def _const(v: Value):
    return v.owner.attrs["value"] if isinstance(v.owner, Const) else None


def _inside(op: Op, loop: For) -> bool:
    """Whether ``op`` sits in ``loop``'s body (at any depth)."""
    while op is not None:
        if op is loop:
            return True
        block = op.parent
        op = block.parent if block is not None else None
    return False


def _chain(v: Value, loop: For, out: list) -> None:
    """The scalar ops inside ``loop`` that compute ``v``, in order (values from outside are
    inputs); raises NotOwn when one is not a scalar op."""
    op = v.owner
    if not isinstance(op, Op) or not _inside(op, loop) or op is loop:
        return
    if op in out:
        return
    if op.regions or not all(isinstance(x.type, ScalarType) for x in (*op.operands, *op.results)):
        raise NotOwn(f"%{v.hint or '?'} is not computed by scalar ops")
    for x in op.operands:
        _chain(x, loop, out)
    out.append(op)


def _key_scale(k0: Value, j: Value) -> int:
    if k0 is j:
        return 1
    op = k0.owner
    if getattr(op, "NAME", "") == "mul":
        x, y = op.operands
        for var, c in ((x, y), (y, x)):
            if var is j and isinstance(_const(c), int) and _const(c) > 0:
                return _const(c)
    raise NotOwn("the mask's key offset is not a positive constant times the loop variable")


NEG, ZERO, ONE = "-inf", "0", "1"


class _Proof:
    """Abstract interpretation of a trip on one consumer's rows whose masks are all -inf."""

    def __init__(self, loop: For, conds: dict):
        self.loop, self.conds = loop, conds
        body = loop.regions[0]
        self.val: dict[int, object] = {id(a): ("arg", k) for k, a in enumerate(body.args[1:])}
        self.positive: set[int] = set()

    def get(self, v: Value):
        return self.val.get(id(v))

    def is_positive(self, v: Value) -> bool:
        c = _const(v)
        return (isinstance(c, (int, float)) and c > 0) or id(v) in self.positive

    def block(self, block) -> list:
        for op in block.ops:
            if isinstance(op, Yield):
                return [self.get(v) for v in op.operands]
            self.op(op)
        return []

    def op(self, op: Op) -> None:
        name = op.NAME
        if isinstance(op, async_ops.AsyncOp):  # the async schedule's steps (a trip of its rewrite)
            return
        if isinstance(op, If):
            self.if_(op)
            return
        if op.regions or (not op.results and not isinstance(op, Yield)):
            raise NotOwn(f"the loop body has {name} (an effect or a nested region)")
        if all(isinstance(r.type, ScalarType) for r in op.results):
            return  # scalars are the same for every row
        a = [self.get(x) for x in op.operands]
        out = None
        scal = [isinstance(x.type, ScalarType) for x in op.operands]
        if isinstance(op, CausalMask):
            fill = op.attrs.get("fill", -math.inf)
            out = NEG if fill == -math.inf else None
        elif isinstance(op, MMA_OPS):
            out = (a[2] if len(a) > 2 else ZERO) if a[0] == ZERO else None
        elif name in ("cvt",):
            out = a[0] if a[0] in (NEG, ZERO, ONE) else None
        elif name in ("exp2", "exp"):
            out = ZERO if a[0] == NEG else ONE if a[0] == ZERO else None
        elif name == "row_max":
            out = NEG if a[0] == NEG else None
        elif name == "row_sum":
            out = ZERO if a[0] == ZERO else None
        elif name in ("sub_row", "add_row"):
            out = NEG if a[0] == NEG and isinstance(a[1], tuple) else None
        elif name == "mul_row":
            out = a[0] if a[1] == ONE else None
        elif name == "max":
            out = a[0] if a[1] == NEG else a[1] if a[0] == NEG else None
        elif name == "add":
            out = a[0] if a[1] == ZERO else a[1] if a[0] == ZERO else None
        elif name == "sub":
            out = (ZERO if isinstance(a[0], tuple) and a[0] == a[1] else
                   NEG if a[0] == NEG and isinstance(a[1], tuple) else None)
        elif name == "mul":
            if scal[1] and a[0] == NEG and self.is_positive(op.operands[1]):
                out = NEG
            elif scal[0] and a[1] == NEG and self.is_positive(op.operands[0]):
                out = NEG
            else:
                out = a[0] if a[1] == ONE else a[1] if a[0] == ONE else None
        self.val[id(op.result)] = out

    def if_(self, op: If) -> None:
        cond = op.operands[0]
        taken = self.conds.get(id(cond))
        branches = [(0, op.regions[0]), (1, op.regions[1])] if taken is None else \
            [(0 if taken else 1, op.regions[0 if taken else 1])]
        results = []
        for which, region in branches:
            saved = set(self.positive)
            c = cond.owner
            if which == 0 and getattr(c, "NAME", "") == "gt" and _const(c.operands[1]) == 0:
                self.positive.add(id(c.operands[0]))
            results.append(self.block(region))
            self.positive = saved
        for k, r in enumerate(op.results):
            vals = [res[k] for res in results]
            self.val[id(r)] = vals[0] if all(v == vals[0] for v in vals) else None


def plan_of(loop: For, consumers: int, *, masked: bool = True, past_end: bool = False) -> OwnPlan:
    """The plan of a loop whose consumers may run their own trips (module docstring); raises
    NotOwn saying why not. ``masked``: the mask's formula (else every trip is each consumer's own);
    ``past_end``: with the rows-past-the-end rule (NotPastEnd, a NotOwn, when it does not hold)."""
    step = _const(loop.operands[2])
    if not isinstance(step, int) or step <= 0:
        raise NotOwn("the loop's step is not a positive constant")
    if masked:
        plan = _mask_plan(loop, consumers, step)
    else:
        plan = OwnPlan(loop, None, [], 0, step, 0)
    if past_end:
        try:
            plan.end = past_end_of(loop, plan.q0)
        except NotPastEnd as e:
            raise NotOwn(str(e)) from None
        if plan.rows and plan.rows * consumers != plan.end.tile_rows:
            raise NotOwn("the masks' tiles and the stores differ in rows")
        if plan.end.tile_rows % (64 * consumers):
            raise NotOwn(f"the stores' {plan.end.tile_rows} rows are not whole 64-row slabs per consumer")
        plan.rows = plan.end.tile_rows // consumers
    return plan


def marked_plan(loop: For, consumers: int) -> OwnPlan:
    """The plan of a loop the pass marked (``own_trips = [rows, a]``, a = 0 without a mask;
    ``past_end``), as the lowering and the roles interpreter follow it."""
    return plan_of(loop, consumers, masked=bool(loop.attrs["own_trips"][1]),
                   past_end=bool(loop.attrs.get("past_end")))


def _mask_plan(loop: For, consumers: int, step: int) -> OwnPlan:
    """The causal masks' part of the plan (module docstring, 1-3)."""
    body = loop.regions[0]
    j = body.args[0]
    masks = [op for op in loop.walk() if isinstance(op, CausalMask)]
    if not masks:
        raise NotOwn("no causal_mask in the loop body (nothing proves a trip wholly masked)")
    rows = {op.result.type.rows for op in masks}
    if len(rows) != 1:
        raise NotOwn("the masks' tiles differ in rows")
    (R,) = rows
    if R % (64 * consumers):
        raise NotOwn(f"the masked tile's {R} rows are not whole 64-row slabs per consumer")
    first = masks[0]
    for m in masks[1:]:
        if not (same_expr(m.operands[1], first.operands[1]) and same_expr(m.operands[2], first.operands[2])):
            raise NotOwn("the masks' offsets differ")
    q0, k0 = first.operands[1], first.operands[2]
    if depends_on(q0, set(body.args)):
        raise NotOwn("the mask's query offset depends on the loop")
    scale = _key_scale(k0, j)
    q0_ops: list = []
    _chain(q0, loop, q0_ops)
    for m in masks[1:]:
        _key_scale(m.operands[2], j)
    # ifs that hold a mask in one branch, with a condition depending on j: assumed taken
    conds: dict[int, bool] = {}
    cond_values = []
    for op in loop.walk():
        if not isinstance(op, If) or not depends_on(op.operands[0], {j}):
            continue
        has = [any(isinstance(x, CausalMask) for r_op in region.ops for x in r_op.walk())
               for region in op.regions]
        if has[0] != has[1]:
            conds[id(op.operands[0])] = has[0]
            if op.operands[0] not in [v for v, _ in cond_values]:
                cond_values.append((op.operands[0], has[0]))
    cond_ops: list = []
    for v, _ in cond_values:
        _chain(v, loop, cond_ops)
    proof = _Proof(loop, conds)
    yielded = proof.block(body)
    for k, (arg, got) in enumerate(zip(body.args[1:], yielded)):
        term = body.terminator
        if isinstance(arg.type, ScalarType):
            if term.operands[k] is not arg:
                raise NotOwn(f"the carried scalar %{arg.hint or k} changes every trip")
        elif got != ("arg", k):
            raise NotOwn(f"a wholly masked trip may change the carried %{arg.hint or k} (not proved "
                         "unchanged on the rows the mask hides)")
        elif isinstance(arg.type, TileType) and arg.type.rows != R or \
                (not isinstance(arg.type, TileType) and getattr(arg.type, "length", R) != R):
            raise NotOwn(f"the carried %{arg.hint or k} has rows other than the mask's")
    return OwnPlan(loop, q0, q0_ops, scale, step, R // consumers, [(v, t) for v, t in cond_values],
                   cond_ops)


# -- whether the counts ever differ --------------------------------------------------------------
class _Unknown(Exception):
    pass


_EVAL = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
         "cdiv": lambda a, b: -(-a // b), "floordiv": lambda a, b: a // b,
         "min": min, "max": max, "mod": lambda a, b: a % b}


def _eval(v: Value, env: dict) -> int:
    if id(v) in env:
        return env[id(v)]
    op = v.owner
    name = getattr(op, "NAME", "")
    if name == "const" and isinstance(op.attrs["value"], int):
        return op.attrs["value"]
    if name == "dim":
        return SAMPLE_DIM
    if name in _EVAL:
        return _EVAL[name](*(_eval(x, env) for x in op.operands))
    raise _Unknown


def ever_fewer(plan: OwnPlan, blocks, consumers: int) -> bool:
    """Whether some consumer has fewer own trips than the tile for some sampled block index (the
    last block index from 0 to SAMPLE_BLOCKS - 1, the others 0); True when it cannot tell."""
    args = blocks.regions[0].args
    lo_v, hi_v = plan.loop.operands[:2]
    try:
        for i in range(SAMPLE_BLOCKS):
            env = {id(a): 0 for a in args}
            env[id(args[-1])] = i
            lo, hi, q0 = _eval(lo_v, env), _eval(hi_v, env), _eval(plan.q0, env)
            trips = max(0, -(-(hi - lo) // plan.step))
            if any(plan.own(c, q0, lo, trips) < trips for c in range(consumers)):
                return True
    except (_Unknown, ZeroDivisionError):
        return True
    return False


def own_loops(kernel: Kernel) -> list[For]:
    """The ring loops this pass marked (``own_trips`` attribute)."""
    return [op for op in block_loop(kernel).regions[0].ops if isinstance(op, For) and op.attrs.get("own_trips")]


@register_pass
@dataclass(frozen=True)
class OwnTrips(Pass):
    """The ``own-trips`` pass (module docstring)."""

    name = "own-trips"
    summary = ("each consumer runs a causal ring loop over the trips its own rows see (none where its rows "
               "all lie past the end); the rest idle")
    target_specific = True

    past_end: str = "auto"
    """Idle every trip of a consumer whose rows all lie past the end of every store
    (passes/past_end.py): ``auto`` where the loop takes own trips for its mask, ``on`` also on
    loops without one, ``off`` never (module docstring)."""

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        if self.past_end not in PAST_END:
            raise PassError(f"own-trips: past_end must be {', '.join(PAST_END)}, got '{self.past_end}'")
        blocks = block_loop(kernel)
        loops = [op for op in blocks.regions[0].ops if isinstance(op, For) and shared_loads(op.regions[0])]
        consumers = kernel.attrs.get("consumers")
        for loop in loops:
            masked = any(isinstance(op, CausalMask) for op in loop.walk())
            why = None
            mask_plan = None
            try:
                if not isinstance(consumers, int) or consumers < 2:
                    raise NotOwn("one consumer: nothing to split")
                if kernel.attrs.get("pingpong"):
                    raise NotOwn("ping-pong consumers compute whole tiles each")
                if block_loop(kernel).attrs.get("split", 1) not in (1, None):
                    raise NotOwn("split-K shares the loop's trips between CTAs")
            except NotOwn as e:
                if masked or self.past_end == "on":
                    ctx.decide(subject_of(loop), "every consumer runs the tile's trips", str(e))
                continue
            if not masked and self.past_end == "auto":
                self.log_auto(ctx, loop, consumers)
                continue
            if not masked and self.past_end == "off":
                continue
            if masked:
                try:
                    mask_plan = plan_of(loop, consumers)
                    if not ever_fewer(mask_plan, blocks, consumers):
                        raise NotOwn(f"every consumer's rows reach the tile's last key block (checked for "
                                     f"block indices 0..{SAMPLE_BLOCKS - 1}): nothing to skip")
                except NotOwn as e:
                    why, mask_plan = str(e), None
            plan, end_why = self.with_end(loop, consumers, mask_plan)
            if plan is None:
                reason = why or "no causal_mask in the loop body"
                if end_why is not None and self.past_end == "on":
                    reason += f"; rows past the end: {end_why}"
                ctx.decide(subject_of(loop), "every consumer runs the tile's trips", reason)
                if self.past_end == "auto":
                    self.log_auto(ctx, loop, consumers)
                continue
            loop.attrs["own_trips"] = (plan.rows, plan.scale)  # rows per consumer, k0 = scale·j
            if mask_plan is not None:
                self.log_mask(ctx, plan, consumers)
            if plan.end is not None:
                loop.attrs["past_end"] = True
                each = "; ".join(f"consumer {c}: {plan.end_formula(c)}" for c in range(consumers))
                ctx.decide(subject_of(loop), "a consumer whose rows all lie past the end idles every trip",
                           f"{plan.end.text()}, and every op of the tile keeps each consumer's rows to "
                           f"itself, so a consumer none of whose {plan.rows} rows is stored computes "
                           f"nothing that is read: its own trips are 0 when {each}, else "
                           + ("its mask's count" if plan.scale else "the tile's trips")
                           + f" (past_end={self.past_end})", rows=plan.rows, same_q0=plan.end.same_q0)
            else:
                ctx.decide(subject_of(loop), "rows past the end computed", end_why)
        return kernel

    def with_end(self, loop: For, consumers: int, mask_plan: OwnPlan | None) -> tuple[OwnPlan | None, str | None]:
        """The loop's plan with the rows-past-the-end rule where it applies, else the mask's plan
        (None without one), and why not."""
        if self.past_end == "off":
            return mask_plan, "pinned off (own-trips{past_end=off})"
        if self.past_end == "auto" and mask_plan is None:
            return None, None
        try:
            return plan_of(loop, consumers, masked=mask_plan is not None, past_end=True), None
        except NotOwn as e:
            return mask_plan, str(e)

    @staticmethod
    def log_auto(ctx: PassContext, loop: For, consumers: int) -> None:
        """A loop without a mask under ``auto``: where the rule would hold, say why it is not taken."""
        try:
            plan_of(loop, consumers, masked=False, past_end=True)
        except NotOwn:
            return
        ctx.decide(subject_of(loop), "rows past the end computed",
                   "a consumer whose rows all lie past the end could idle every trip (proved), but no "
                   "causal mask splits the loop's trips per consumer, and auto splits only such loops: the "
                   "attention template's idle copy measured 3% slower on non-causal kernels (H200 "
                   "2026-11-21, D=64 N=1024..4096; ptxas schedules the twice-emitted tile body "
                   "differently); own-trips{past_end=on} asks for it")

    @staticmethod
    def log_mask(ctx: PassContext, plan: OwnPlan, consumers: int) -> None:
        each = "; ".join(f"consumer {c}: {plan.formula(c)}" for c in range(consumers))
        checked = (", ".join(f"{subject_of(v.owner)} {'true' if t else 'false'}" for v, t in plan.conds)
                   if plan.conds else "none")
        ctx.decide(subject_of(plan.loop), "each consumer runs its own trips; the rest idle",
                   f"the masks hide key k0 + k from query row q0 + r when k0 + k > q0 + r, with "
                   f"k0 = {plan.scale}·j: trips past a consumer's own are -inf on all of its "
                   f"{plan.rows} rows, and such a trip was proved to leave every carried value "
                   f"unchanged on them (max with -inf, exp2 to 0 and 1, products of 0); {each} "
                   f"(q0 = {subject_of(plan.q0.owner)}); conditions checked on the later trips at run "
                   f"time: {checked}. The later trips are idle: the stage's fill awaited and "
                   "released, so the producer still loads the tile's trips",
                   rows=plan.rows, key_scale=plan.scale, conditions=len(plan.conds))
