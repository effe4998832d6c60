"""Per-consumer trip counts of a ring loop (the own-trips pass, the protocol's ``Loop(part="own")``
and ``Loop(part="rest")``), for the consumers of the general lowering.

``own_count`` prints consumer c's own trips of the tile before its loop, from the pass's plan
(passes/own_trips.py): ``own = min(T, max(q0 + R·c + R - 1 - a·lo + a·st, 0) / (a·st))`` with R
the rows each consumer holds, q0 the masks' query offset (its scalar ops emitted here) and k0 =
a·j; then, where the pass assumed an ``if``'s branch on the skipped trips, the condition is
evaluated for every trip from ``own`` to T and, if it fails on one, ``own = T``. With the
rows-past-the-end rule (``past_end``, passes/past_end.py) one more comparison: the consumer's
first row ``row0·R' + R·c`` (q0 + R·c itself where q0 is that expression) against the largest
extent E of the stores' row dimensions, and ``own = 0`` when it is at or past it (after the
conditions, which would otherwise make every trip its own); a loop without a mask (``own_trips =
[R, 0]``) has own = T unless so. ``idle_trips``
prints the tile's trips after the consumer's own: only the protocol's steps (wait for the fill,
release, advance), no IR op.
"""
from __future__ import annotations

from ...ir.ops import For
from ...passes.own_trips import marked_plan
from .lower_producer import bind_loop_index


def own_count(role, ring: str, loop: For) -> str:
    """A register holding this consumer's own trips of ``ring``'s loop this tile (its tile trip
    count already in ``role.rings[ring].trips``)."""
    b, ctx = role.b, role.ctx
    plan = marked_plan(loop, role.k.consumers)
    trips = role.rings[ring].trips
    past = None
    if plan.scale:
        for op in plan.q0_ops:
            b(*ctx.emit_op(op))
        q0, lo = ctx.get(plan.q0).reg, ctx.get(loop.operands[0]).reg
        div = plan.scale * plan.step
        own, lo_keys = b.reg(), b.reg()
        b(f"// own trips: k0 = {plan.scale} * j passes this consumer's last row q0 + {plan.rows} * c + {plan.rows - 1}",
          f"mad.lo.s32 {own}, {role.index}, {plan.rows}, {q0};")
        if plan.end is not None and plan.end.same_q0:  # own is q0 + R·c, the first row, here
            past = past_end(role, plan, own)
        b(f"mul.lo.s32 {lo_keys}, {lo}, {plan.scale};",
          f"sub.s32 {own}, {own}, {lo_keys};",
          f"add.s32 {own}, {own}, {plan.rows - 1 + div};",
          f"max.s32 {own}, {own}, 0;",
          f"div.u32 {own}, {own}, {div};",
          f"min.s32 {own}, {own}, {trips};")
    else:
        own = b.reg()
        b("// own trips: the tile's, none past the end", f"mov.b32 {own}, {trips};")
    if plan.conds:
        check_conditions(role, loop, plan, own, trips)
    if plan.end is not None:
        if past is None:
            first = b.reg()
            for op in plan.end.row0_ops:
                b(*ctx.emit_op(op))
            b(f"mul.lo.s32 {first}, {ctx.get(plan.end.row0).reg}, {plan.end.tile_rows};",
              f"mad.lo.s32 {first}, {role.index}, {plan.rows}, {first};")
            past = past_end(role, plan, first)
        b(f"@{past} mov.b32 {own}, 0;")
    return own


def past_end(role, plan, first: str) -> str:
    """A predicate: this consumer's first row of the tile ``first`` is at or past the largest
    extent of the stores' row dimensions (none of its rows is stored)."""
    b, ctx = role.b, role.ctx
    ends = [ctx.get(v).reg for v in plan.end.extents]
    end = ends[0]
    if len(ends) > 1:
        end = b.reg()
        b(f"max.s32 {end}, {ends[0]}, {ends[1]};", *(f"max.s32 {end}, {end}, {e};" for e in ends[2:]))
    past = b.pred()
    b("// past the end: none of this consumer's rows is stored", f"setp.ge.s32 {past}, {first}, {end};")
    return past


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
