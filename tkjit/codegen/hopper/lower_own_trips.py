"""Per-consumer trip counts of a ring loop (the own-trips pass, the protocol's ``Loop(part="own")``
and ``Loop(part="rest")``), for the consumers of the general lowering.

``own_count`` prints consumer c's own trips of the tile before its loop, from the pass's plan
(passes/own_trips.py): ``own = min(T, max(q0 + R·c + R - 1 - a·lo + a·st, 0) / (a·st))`` with R
the rows each consumer holds, q0 the masks' query offset (its scalar ops emitted here) and k0 =
a·j; then, where the pass assumed an ``if``'s branch on the skipped trips, the condition is
evaluated for every trip from ``own`` to T and, if it fails on one, ``own = T``. ``idle_trips``
prints the tile's trips after the consumer's own: only the protocol's steps (wait for the fill,
release, advance), no IR op.
"""
from __future__ import annotations

from ...ir.ops import For
from ...passes.own_trips import plan_of
from .lower_producer import bind_loop_index


def own_count(role, ring: str, loop: For) -> str:
    """A register holding this consumer's own trips of ``ring``'s loop this tile (its tile trip
    count already in ``role.rings[ring].trips``)."""
    b, ctx = role.b, role.ctx
    plan = plan_of(loop, role.k.consumers)
    for op in plan.q0_ops:
        b(*ctx.emit_op(op))
    q0, lo = ctx.get(plan.q0).reg, ctx.get(loop.operands[0]).reg
    trips = role.rings[ring].trips
    div = plan.scale * plan.step
    own, lo_keys = b.reg(), b.reg()
    b(f"// own trips: k0 = {plan.scale} * j passes this consumer's last row q0 + {plan.rows} * c + {plan.rows - 1}",
      f"mad.lo.s32 {own}, {role.index}, {plan.rows}, {q0};",
      f"mul.lo.s32 {lo_keys}, {lo}, {plan.scale};",
      f"sub.s32 {own}, {own}, {lo_keys};",
      f"add.s32 {own}, {own}, {plan.rows - 1 + div};",
      f"max.s32 {own}, {own}, 0;",
      f"div.u32 {own}, {own}, {div};",
      f"min.s32 {own}, {own}, {trips};")
    if plan.conds:
        check_conditions(role, loop, plan, own, trips)
    return own


def check_conditions(role, loop: For, plan, own: str, trips: str) -> None:
    """The conditions the pass assumed on the skipped trips, evaluated for trips own .. T - 1; the
    first that fails makes every trip the consumer's own."""
    b, ctx = role.b, role.ctx
    t, done = b.reg(), b.pred()
    top, end = b.label("own_check"), b.label("own_checked")
    b(f"mov.b32 {t}, {own};")
    b.place(top)
    b(f"setp.ge.s32 {done}, {t}, {trips};", f"@{done} bra {end};")
    bind_loop_index(ctx, b, loop, t)
    for op in plan.cond_ops:
        b(*ctx.emit_op(op))
    for cond, taken in plan.conds:
        p = ctx.get(cond).reg
        fails = f"@!{p}" if taken else f"@{p}"
        b(f"{fails} mov.b32 {own}, {trips};", f"{fails} bra {end};")
    b(f"add.s32 {t}, {t}, 1;", f"bra {top};")
    b.place(end)


def idle_trips(role, step) -> None:
    """The tile's trips after this consumer's own: each only the protocol's steps."""
    b, r = role.b, role.rings[step.ring]
    outer = r.counter
    r.counter = b.reg()
    top, end, done, again = b.label("idle_trip"), b.label("idle_trips_done"), b.pred(), b.pred()
    b(f"mov.b32 {r.counter}, {role.own[step.ring]};", f"setp.ge.s32 {done}, {r.counter}, {r.trips};",
      f"@{done} bra {end};")
    b.place(top)
    role.emit(step.body)
    b(f"add.s32 {r.counter}, {r.counter}, 1;", f"setp.lt.s32 {again}, {r.counter}, {r.trips};",
      f"@{again} bra {top};")
    b.place(end)
    r.counter = outer
