"""Emitters for row and column reductions of register tiles.

A row reduction combines the thread's elements of each of its rows, then the four lanes of the
quad that share the row (``shfl.sync.bfly`` 1 and 2). When a tile's columns are split over
several warp columns, each column group writes its partial to shared scratch and every thread
combines all partials in group order (the same order everywhere, so replicas agree bit for
bit). Column reductions are the transpose: thread-local over the rows, ``shfl.sync.bfly`` 4, 8
and 16 across the eight row-lanes, then shared scratch across warp rows.

Padding never contributes: max/min always mask padded elements with -inf/+inf, sums mask them
with 0 unless the padding analysis proved they are already zero.
"""
from __future__ import annotations

from ..errors import NotAvailableError
from ..ir.ops import REDUCE_OPS
from ..ir.types import VectorType
from .padding import UNKNOWN
from .mathfn import binary_f32
from .ptx import f32_imm
from .values import RegVec

_IDENTITY = {"max": float("-inf"), "min": float("inf"), "sum": 0.0}
_COMBINE = {"max": "max", "min": "min", "sum": "add"}


def reduce_scratch_bytes(op, grid) -> int:
    t = op.operands[0].type
    if op.AXIS == "row":
        groups = grid.col_split(t.cols).groups
        return groups * t.rows * 4 if groups > 1 else 0
    groups = grid.row_split(t.rows).groups
    return groups * t.cols * 4 if groups > 1 else 0


def _mask_preds(ctx, op, tile, out):
    """Valid-element predicates for the reduced axis, or None when no mask is needed."""
    pad = ctx.pads[op.operands[0]]
    axis = pad.cols if op.AXIS == "row" else pad.rows
    if axis is None or (op.FN == "sum" and axis.clean):
        return None
    which = "cols" if op.AXIS == "row" else "rows"
    split = tile.layout.cols if op.AXIS == "row" else tile.layout.rows
    return ctx.axis_preds(axis, split, which, "the reduced tile", op, out)


def _shuffle_combine(ctx, fn: str, x: str, lanes: tuple[int, ...], out: list[str]) -> str:
    for lane_mask in lanes:
        y = ctx.new("f32")
        out.append(f"shfl.sync.bfly.b32 {y}, {x}, {lane_mask}, 0x1f, 0xffffffff;")
        x = binary_f32(ctx, _COMBINE[fn], x, y, out)
    return x


def emit_reduce(ctx, op) -> list[str]:
    out: list[str] = []
    if ctx.tree_reductions:
        ctx.reduced.append(op)
    tile = ctx.get(op.operands[0])
    layout = tile.layout
    row = op.AXIS == "row"
    known = _known_edge(ctx, op) if ctx.edge_branched is not None and _needs_mask(ctx, op) else None
    if known is not None:  # inside a region versioned on the tile's edge (edge_versioned)
        ctx.edge_branched.append(op)
        partial = _partials(ctx, op, tile, None if known else _mask_preds(ctx, op, tile, out), out)
    elif ctx.edge_branched is not None and _needs_mask(ctx, op):
        partial = _edge_branch(ctx, op, tile, out)
    else:
        partial = _partials(ctx, op, tile, _mask_preds(ctx, op, tile, out), out)
    split = layout.cols if row else layout.rows
    if op.attrs.get("partial") and (not row or split.groups > 1):
        raise NotAvailableError(f"{op.NAME}: a partial sum needs each row's elements in one quad")
    if split.groups > 1:
        partial = _across_warps(ctx, op, layout, partial, out)
    t: VectorType = op.result.type
    vsplit = layout.rows if row else layout.cols
    regs = [[ctx.round_f32(t.dtype, partial[(u, k)], out) for k in (0, 1)] for u in range(vsplit.per_warp)]
    ctx.bind(op.result, RegVec(t, vsplit, regs))
    return out


def _needs_mask(ctx, op) -> bool:
    pad = ctx.pads[op.operands[0]]
    axis = pad.cols if op.AXIS == "row" else pad.rows
    return axis is not None and not (op.FN == "sum" and axis.clean)


def _edge_key(ctx, op):
    """(the padding limit, the extent) of a reduction's reduced axis: the reductions one edge
    branch can decide for."""
    pad = ctx.pads[op.operands[0]]
    row = op.AXIS == "row"
    axis = pad.cols if row else pad.rows
    t = op.operands[0].type
    return axis.limit, (t.cols if row else t.rows)


def _known_edge(ctx, op) -> bool | None:
    """Whether an enclosing edge-versioned region decided this reduction's tile is whole (True)
    or reaches past its tensor's edge (False); None when none did."""
    return ctx.edge_known.get(_edge_key(ctx, op))


def edge_versioned(ctx, block, finish) -> list[str] | None:
    """A region whose reductions all mask padding at one limit, emitted twice under one uniform
    branch on that limit (the general lowering's ``edge_regions``): the copy for a whole tile
    without masks, the edge copy with them, each ending with ``finish()`` (the region's yield
    moves). One branch a region instead of one a reduction: each copy is one basic block, so
    ptxas can interleave the region's work across the reductions. None when the region has no
    such reductions, reductions at two different limits, or an op with regions of its own (each
    reduction then branches on its own)."""
    if ctx.edge_branched is None or not ctx.edge_regions:
        return None
    if any(op.regions for op in block.ops):
        return None  # an if inside would be copied too: D = 64 causal attention then spilled
                     # (22 LDL / 10 STL); its reductions keep a branch each
    keys = {_edge_key(ctx, op) for op in block.ops if isinstance(op, REDUCE_OPS) and _needs_mask(ctx, op)}
    if len(keys) != 1:
        return None
    key = next(iter(keys))
    if key in ctx.edge_known or key[0] == UNKNOWN:
        return None
    first = next(op for op in block.ops if isinstance(op, REDUCE_OPS) and _needs_mask(ctx, op))
    out: list[str] = []
    count = ctx.limit_count(key[0], "the reduced tile", first, out)
    inside, edge, done = ctx.new("pred"), ctx.label("edge_region"), ctx.label("edge_region_done")
    out.append(f"setp.ge.s32 {inside}, {count}, {key[1]};")
    out.append(f"@!{inside} bra.uni {edge};")
    before = ctx.sync.state()
    try:
        ctx.edge_known[key] = True
        out += ctx.emit_block(block)
        out += finish()
        whole = ctx.sync.state()
        out.append(f"bra.uni {done};")
        out.append(f"{edge}:")
        ctx.sync.restore(before)
        del ctx.edge_known[key]  # the edge copy: each reduction branches on its own, as before
        out += ctx.emit_block(block)
        out += finish()
        ctx.sync.join(whole, ctx.sync.state())
    finally:
        ctx.edge_known.pop(key, None)
    out.append(f"{done}:")
    ctx.edge_regions_done.append(first)
    return out


def _partials(ctx, op, tile, preds, out: list[str]) -> dict:
    """Each thread's reduced values (the quad or row-lane combine included), per (unit, half)."""
    layout, fn, row = tile.layout, op.FN, op.AXIS == "row"
    ident = f32_imm(_IDENTITY[fn])
    outer = [(b, h) for b in range(layout.bands) for h in (0, 1)] if row else \
        [(j, c) for j in range(layout.chunks) for c in (0, 1)]
    partial = {}
    for u, k in outer:
        inner = [(u, j, 2 * k + c, (j, c)) for j in range(layout.chunks) for c in (0, 1)] if row else \
            [(b, u, 2 * h + k, (b, h)) for b in range(layout.bands) for h in (0, 1)]
        acc, stack = None, []
        for b, j, i, pkey in inner:
            x = ctx.tile_f32(tile, b, j, i, out)
            if preds is not None:
                m = ctx.new("f32")
                out.append(f"selp.f32 {m}, {x}, {ident}, {preds[pkey]};")
                x = m
            if ctx.tree_reductions:
                _push(ctx, fn, stack, x, out)
            else:
                acc = x if acc is None else binary_f32(ctx, _COMBINE[fn], acc, x, out)
        if ctx.tree_reductions:
            acc = _drain(ctx, fn, stack, out)
        lanes = () if op.attrs.get("partial") else (1, 2) if row else (4, 8, 16)
        partial[(u, k)] = _shuffle_combine(ctx, fn, acc, lanes, out)
    return partial


def combine_partial_sums(ctx, loop, reps: list, out: list[str]) -> list:
    """The loop's carried values as they leave it: those the row-sums pass kept as each thread's
    share (``partial_sums``) summed over the four lanes of each row, the others as they are."""
    done = list(reps)
    for i in loop.attrs.get("partial_sums", ()):
        rep = reps[i]
        if not isinstance(rep, RegVec) or rep.type.kind != "cv":
            raise NotAvailableError("partial_sums names a value that is not a column vector")
        regs = [[_shuffle_combine(ctx, "sum", r, (1, 2), out) for r in unit] for unit in rep.regs]
        done[i] = RegVec(rep.type, rep.split, regs)
    return done


def _push(ctx, fn: str, stack: list, x: str, out: list[str]) -> None:
    """Pairwise combining as the elements come: ``stack`` holds (value, count) with counts
    strictly falling, so (x0 . x1) . (x2 . x3) ... has depth log2 n (the combines of a row can
    issue back to back instead of each waiting on the last, as in a chain of n) and at most
    log2 n partial values are live at a time."""
    stack.append((x, 1))
    while len(stack) > 1 and stack[-1][1] == stack[-2][1]:
        (y, n), (x, _) = stack.pop(), stack.pop()
        stack.append((binary_f32(ctx, _COMBINE[fn], x, y, out), 2 * n))


def _drain(ctx, fn: str, stack: list, out: list[str]) -> str:
    x = stack.pop()[0]
    while stack:
        x = binary_f32(ctx, _COMBINE[fn], stack.pop()[0], x, out)
    return x


def _edge_branch(ctx, op, tile, out: list[str]) -> dict:
    """Padding masks only where the tile reaches past its tensor's edge (the schedule option
    ``edge_branches`` of the general lowering): a uniform branch on the axis's valid count
    takes the unmasked reduction when the whole tile is in range (every key block of an
    attention but the last), the masked one at the edge."""
    ctx.edge_branched.append(op)
    pad = ctx.pads[op.operands[0]]
    row = op.AXIS == "row"
    axis = pad.cols if row else pad.rows
    extent = tile.type.cols if row else tile.type.rows
    count = ctx.limit_count(axis.limit, "the reduced tile", op, out)
    inside, masked, done = ctx.new("pred"), ctx.label("edge"), ctx.label("edge_done")
    out.append(f"setp.ge.s32 {inside}, {count}, {extent};")
    out.append(f"@!{inside} bra {masked};")
    fast = _partials(ctx, op, tile, None, out)
    result = {key: ctx.new("f32") for key in fast}
    out += [f"mov.f32 {result[key]}, {x};" for key, x in fast.items()]
    out.append(f"bra.uni {done};")
    out.append(f"{masked}:")
    rel = ctx.new("b32")
    split = tile.layout.cols if row else tile.layout.rows
    base = ctx.row_base(split) if not row else ctx.col_base(split)
    out.append(f"sub.s32 {rel}, {count}, {base};")
    from .context import AxisMask
    slow = _partials(ctx, op, tile, AxisMask(ctx, rel, "cols" if row else "rows", out, split), out)
    out += [f"mov.f32 {result[key]}, {x};" for key, x in slow.items()]
    out.append(f"{done}:")
    return result


def _across_warps(ctx, op, layout, partial: dict, out: list[str]) -> dict:
    """Combine the partials of the warp groups along the reduced axis through shared scratch."""
    region = ctx.plan.of_op(op)
    row = op.AXIS == "row"
    t = op.operands[0].type
    length = t.rows if row else t.cols                      # entries per group
    split, other = (layout.cols, layout.rows) if row else (layout.rows, layout.cols)
    base = ctx.row_base(other) if row else ctx.col_base(other)
    group = ctx.group(split, "col" if row else "row")
    writer = ctx.writer(layout.rows, layout.cols, "t0" if row else "g0")
    wa, ra = ctx.new("b32"), ctx.new("b32")
    out.append(f"mad.lo.u32 {wa}, {group}, {length}, {base};")
    out.append(f"shl.b32 {wa}, {wa}, 2;")
    out.append(f"add.u32 {wa}, {wa}, {ctx.smem_base()};")
    out.append(f"shl.b32 {ra}, {base}, 2;")
    out.append(f"add.u32 {ra}, {ra}, {ctx.smem_base()};")
    out += ctx.sync.write(region)
    for (u, k), x in partial.items():
        off = region.offset + 4 * ((other.unit_offset(u, 16) + 8 * k) if row else ctx.grid.col_offset(u, k))
        out.append(f"@{writer} st.shared.f32 [{wa}+{off}], {x};")
    out += ctx.sync.read_(region)
    result = {}
    for (u, k) in partial:
        off = region.offset + 4 * ((other.unit_offset(u, 16) + 8 * k) if row else ctx.grid.col_offset(u, k))
        acc = None
        for grp in range(split.groups):
            x = ctx.new("f32")
            out.append(f"ld.shared.f32 {x}, [{ra}+{off + 4 * length * grp}];")
            acc = x if acc is None else binary_f32(ctx, _COMBINE[op.FN], acc, x, out)
        result[(u, k)] = acc
    return result


REDUCE_EMITTERS = {cls: emit_reduce for cls in REDUCE_OPS}
REDUCE_SCRATCH = {cls: reduce_scratch_bytes for cls in REDUCE_OPS}
