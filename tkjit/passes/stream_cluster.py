"""stream-cols' cluster split (``cluster=k``): a row block's columns spread over a cluster of k
CTAs, so that the part each keeps on chip is 1/k of the row block.

The block loop becomes ``blocks {cluster = k}``: the k CTAs of a cluster run the same block (the
same rows); CTA ``rank`` takes column slice ``rank`` of every wide value (the row-wise program's
tiles and row vectors of the full width W become W/k wide; their loads and stores address slice
``k * c + rank`` of the column tile ``c`` they named). A row reduction of a wide tile then reduces
the CTA's slice only and is followed by ``cluster_sum`` (``max``, ``min``), which combines the k
partial column vectors through distributed shared memory in rank order, so every CTA of the
cluster continues with the same row values. What is left is again a row-wise program, of width
W/k, which the rest of stream-cols streams (and, with ``cache=auto``, keeps on chip) as usual.
``cluster_for`` is ``cluster=auto``'s choice (docs/codegen.md, "A row block split over a cluster").
"""
from __future__ import annotations

from ..ir.core import Block, Kernel, Op
from ..ir.ops import (BROADCAST_OPS, CLUSTER_REDUCE_OPS, REDUCE_OPS, Add, Blocks, ClusterMoments, ClusterRank, Const,
                      Div, Load, Mul, Store, Sub)
from ..ir.types import F32, ScalarType, TileType, VectorType
from .stream_cache import AUTO_CACHE_BYTES, cache_plan
from .stream_plan import I32_T, NotStreamable, plan_streaming

MAX_CLUSTER = 8
"""The portable cluster size (hopper-ptx-facts.md section 7)."""
MAX_SLICE = 1024
"""The widest column slice ``cluster=auto`` leaves a CTA: the width at which the whole-row examples
run at 82-84% of a 1 GiB copy (D = 1024), and the best of k = 2, 4, 8 measured on an H200 at
D = 4096 / 8192 for RMSNorm and residual + LayerNorm (LayerNorm at 8192: 61% against 63% for the
best form, k = 4 with reduce=tile warps=8): benchmarks/results/2026-11-27-nvidia-h200-s11-norms2-cluster.json."""
SLICE_REDUCE = "tile"
SLICE_WARPS = 8
"""How ``cache=auto`` streams a CTA's slice of a split row block (unless ``reduce``/``warps`` are
pinned): a carried tile of partials reduced once per pass, 8 warps. Measured on an H200 with the
push exchange (2026-11-27, benchmarks/results/2026-11-27-nvidia-h200-s12-norms-1.json, share of a
1 GiB copy at D = 4096 / 8192): RMSNorm 82/83% against 81/79% with per-chunk reductions and 4
warps, LayerNorm 73/73 against 66/69, residual + LayerNorm 76/77 against 75/74."""
_CLUSTER_OF = {cls.FN: cls for cls in CLUSTER_REDUCE_OPS}


def reread_bytes(body: Block) -> int:
    """Bytes of the row block's loaded tiles that more than one pass reads (0: none, or not a
    row-wise program): what a CTA must keep on chip to read global memory once."""
    try:
        plan = plan_streaming(body, force=True)
    except NotStreamable:
        return 0
    if plan is None or plan.phases < 2:
        return 0
    reread, _, _ = cache_plan(plan, 1 << 40)
    return sum(op.result.type.rows * plan.width * op.operands[0].type.dtype.nbytes for op in reread)


def cluster_for(body: Block, budget: int = AUTO_CACHE_BYTES) -> tuple[int, str | None]:
    """``cluster=auto``, where one CTA cannot keep the re-read row block within ``budget``: the
    fewest CTAs (a power of two, at most MAX_CLUSTER) whose slices are at most MAX_SLICE columns
    wide and fit ``budget`` each; 1 (no split) where the block fits, or where even MAX_CLUSTER
    slices would not fit; and why (None: no re-read row block over the budget, nothing to say)."""
    need = reread_bytes(body)
    if need <= budget:
        return 1, None
    width = plan_streaming(body, force=True).width
    k = 2
    while k < MAX_CLUSTER and (need // k > budget or width // k > MAX_SLICE):
        k *= 2
    if need // k > budget or width % (16 * k):
        return 1, (f"the re-read row block ({need:,} B) does not fit {budget:,} B per CTA even over "
                   f"{MAX_CLUSTER} CTAs")
    return k, (f"the re-read row block takes {need:,} B, over one CTA's {budget:,} B cache; {k} CTAs keep "
               f"{need // k:,} B each in slices of {width // k} columns (at most {MAX_SLICE}: measured best "
               "on an H200, docs/codegen.md)")


def variance_pairs(body: Block, width: int) -> dict:
    """The row sums whose result a later reduction turns into a variance: ``r1 = row_sum t``,
    ``m = r1 / W`` (W the width: the row mean), ``d = sub_row t, m``, ``r2 = row_sum (d * d)`` (the
    product read by nothing else) -> {r1: (r2, the product)}. Over a split row block each CTA can
    reduce its slice's squared deviations about its own slice mean and one exchange combine both
    sums (``cluster_moments``, Chan's formula) instead of waiting for the mean between the passes."""
    users: dict = {}
    for top in body.ops:
        for op in top.walk():
            for v in op.operands:
                users.setdefault(v, []).append(op)
    pairs = {}
    for r2 in body.ops:
        if not (type(r2) in REDUCE_OPS and r2.AXIS == "row" and r2.FN == "sum"):
            continue
        q = r2.operands[0].owner
        if not (isinstance(q, Mul) and q.operands[0] is q.operands[1] and users.get(q.result) == [r2]):
            continue
        d = q.operands[0].owner
        if not (type(d) in BROADCAST_OPS and d.AXIS == "row" and d.FN == "sub"):
            continue
        t, m = d.operands
        div = m.owner
        if not (isinstance(div, Div) and isinstance(div.operands[1].owner, Const)
                and div.operands[1].owner.attrs["value"] == width):
            continue
        r1 = div.operands[0].owner
        if type(r1) in REDUCE_OPS and r1.AXIS == "row" and r1.FN == "sum" and r1.operands[0] is t and r1 not in pairs:
            pairs[r1] = (r2, q)
    return pairs


SHIFT_COLS = 256
"""``onepass``: the columns of a slice whose mean shifts its one-pass sums (the first chunk
``cache=auto`` streams: its tiles keep the contiguous column order)."""


def split_over_cluster(kernel: Kernel, body: Block, k: int, exchange: str = "barrier",
                       moments: bool = False, onepass: bool = False) -> tuple[int, int, list]:
    """Rewrite ``body`` (the block loop's) so that k CTAs share each block, CTA ``rank`` taking
    column slice ``rank`` (module docstring), each cluster reduction with attribute ``exchange``
    (ops/cluster.py); with ``moments`` (push exchange only) a mean and the variance about it
    (``variance_pairs``) take one ``cluster_moments`` exchange, and with ``onepass`` the slice's sum
    and squared deviations come from one pass, about a shift K (the mean of the slice's first
    SHIFT_COLS columns, from loads of those alone): m2 = sum (t-K)^2 - (sum (t-K))^2 / n, exact
    algebra whose rounding stays small while K is near the slice mean; returns (W, W/k, the row sums that
    pair so with a variance: combined by cluster_moments where ``moments``). Raises NotStreamable when the program is not row-wise or its wide tensors cannot be sliced."""
    blocks = body.parent
    assert isinstance(blocks, Blocks)
    if blocks.attrs.get("schedule", "grid") != "grid" or blocks.attrs.get("split", 1) > 1:
        raise NotStreamable(blocks, "a persistent or split block loop cannot also be split over a cluster")
    plan = plan_streaming(body, force=True)
    if plan is None:
        raise NotStreamable(None, "the block has no register tile to split")
    width = plan.width
    if width % (16 * k):
        raise NotStreamable(None, f"{width} columns do not split into {k} slices of whole 16-column groups")
    part = width // k
    for op in body.ops:
        if isinstance(op, (Load, Store)) and (op.result if isinstance(op, Load) else op.operands[1]) in plan.wide:
            last = op.operands[0].type.dims[-1]
            if not isinstance(last, int) or last % width:
                raise NotStreamable(op, f"its tensor's rows ({last}) are not a constant multiple of the "
                                        f"{width} columns split over the cluster")
    span = blocks.span
    rank = ClusterRank([], {}, None, span=span, result_hints=["rank"])
    out: list[Op] = [rank]
    mapping: dict = {}

    def narrow(t):
        if isinstance(t, TileType):
            return TileType(t.space, t.dtype, t.rows, part)
        return VectorType(t.kind, t.dtype, part)

    def sliced(coords) -> list:
        coords = [mapping.get(v, v) for v in coords]
        c = coords[-1]
        if isinstance(c.owner, Const) and c.owner.attrs["value"] == 0:
            return coords[:-1] + [rank.result]
        n = Const([], {"value": k}, [I32_T], span=span)
        mul = Mul([c, n.result], {}, None, span=span)
        add = Add([mul.result, rank.result], {}, None, span=span)
        out.extend((n, mul, add))
        return coords[:-1] + [add.result]

    found = {r1: pair for r1, pair in (variance_pairs(body, width) if exchange == "push" else {}).items()
             if r1.operands[0] in plan.wide}
    pairs = found if moments else {}
    skip = {op for r2, q in pairs.values() for op in (r2, q)}
    from .rewrite import _clone_op
    for op in body.ops:
        wide_in = any(v in plan.wide for v in op.operands)
        wide_out = any(r in plan.wide for r in op.results)
        if op in skip:  # a variance's square and sum: the paired row sum's cluster_moments made it
            continue
        if op in pairs and onepass and part % SHIFT_COLS == 0 and part > SHIFT_COLS:
            r2, _ = pairs[op]
            sub = type(r2.operands[0].owner.operands[0].owner)
            t = mapping[op.operands[0]]
            first = _first_columns(op.operands[0], plan, SHIFT_COLS, part, sliced, mapping, out, {})
            f32 = ScalarType(F32)
            w0, n = (Const([], {"value": float(v)}, [f32], span=op.span) for v in (SHIFT_COLS, part))
            k0 = type(op)([first], dict(op.attrs), None, span=op.span)
            shift = Div([k0.result, w0.result], {}, None, span=op.span, result_hints=["shift"])
            dev = sub([t, shift.result], {}, None, span=r2.span, result_hints=["shifted"])
            s1 = type(op)([dev.result], dict(op.attrs), None, span=op.span, result_hints=["s1_part"])
            sq = Mul([dev.result, dev.result], {}, None, span=r2.span)
            s2 = type(r2)([sq.result], dict(r2.attrs), None, span=r2.span, result_hints=["s2_part"])
            kn = Mul([shift.result, n.result], {}, None, span=op.span)
            s_part = Add([s1.result, kn.result], {}, None, span=op.span, result_hints=["sum_part"])
            s11 = Mul([s1.result, s1.result], {}, None, span=r2.span)
            s11n = Div([s11.result, n.result], {}, None, span=r2.span)
            q_part = Sub([s2.result, s11n.result], {}, None, span=r2.span, result_hints=["m2_part"])
            both = ClusterMoments([s_part.result, q_part.result], {"count": part, "exchange": exchange}, None,
                                  span=r2.span, result_hints=[op.result.hint, r2.result.hint])
            out.extend((w0, n, k0, shift, dev, s1, sq, s2, kn, s_part, s11, s11n, q_part, both))
            mapping[op.result], mapping[r2.result] = both.results
            continue
        if op in pairs:
            r2, _ = pairs[op]
            hint = op.result.hint if op.result.hint and not op.result.hint.isdigit() else "sum"
            t = mapping[op.operands[0]]
            s_part = type(op)([t], dict(op.attrs), None, span=op.span, result_hints=[f"{hint}_part"])
            n = Const([], {"value": float(part)}, [ScalarType(F32)], span=op.span)
            mean = Div([s_part.result, n.result], {}, None, span=op.span, result_hints=["slice_mean"])
            dev = type(r2.operands[0].owner.operands[0].owner)([t, mean.result], {}, None, span=r2.span,
                                                              result_hints=["slice_dev"])
            sq = Mul([dev.result, dev.result], {}, None, span=r2.span)
            q_part = type(r2)([sq.result], dict(r2.attrs), None, span=r2.span, result_hints=["m2_part"])
            both = ClusterMoments([s_part.result, q_part.result], {"count": part, "exchange": exchange}, None,
                                  span=r2.span, result_hints=[op.result.hint, r2.result.hint])
            out.extend((s_part, n, mean, dev, sq, q_part, both))
            mapping[op.result], mapping[r2.result] = both.results
            continue
        if isinstance(op, Load) and wide_out:
            new = Load([op.operands[0], *sliced(op.variadic())], dict(op.attrs), [narrow(op.result.type)],
                       span=op.span, result_hints=[op.result.hint])
        elif isinstance(op, Store) and wide_in:
            new = Store([mapping.get(op.operands[0], op.operands[0]), mapping[op.operands[1]],
                         *sliced(op.variadic())], dict(op.attrs), None, span=op.span)
        elif type(op) in REDUCE_OPS and op.AXIS == "row" and wide_in:
            part_red = type(op)([mapping[op.operands[0]]], dict(op.attrs), None, span=op.span,
                                result_hints=[f"{op.result.hint}_part" if op.result.hint and not op.result.hint.isdigit()
                                              else "part"])
            out.append(part_red)
            new = _CLUSTER_OF[op.FN]([part_red.result], {"exchange": exchange}, None, span=op.span, result_hints=[op.result.hint])
            out.append(new)
            mapping[op.result] = new.result
            continue
        elif wide_out:
            new = type(op)([mapping.get(v, v) for v in op.operands], dict(op.attrs), [narrow(r.type) for r in op.results],
                           span=op.span, result_hints=[r.hint for r in op.results])
        else:
            out.append(_clone_op(op, mapping))
            continue
        out.append(new)
        for old, fresh in zip(op.results, new.results):
            mapping[old] = fresh
    for op in out:
        op.parent = body
    body.ops = out
    blocks.attrs["cluster"] = k
    return width, part, list(found)


def _first_columns(v, plan, cols: int, part: int, sliced, mapping: dict, out: list, made: dict):
    """``v`` (a wide value of the original body) recomputed on the first ``cols`` columns of the
    CTA's slice: its wide loads narrowed to that column tile, its wide ops to that width."""
    if v not in plan.wide:
        return mapping.get(v, v)
    if v in made:
        return made[v]
    op = v.owner

    def narrow(t):
        return TileType(t.space, t.dtype, t.rows, cols) if isinstance(t, TileType) else VectorType(t.kind, t.dtype, cols)
    if isinstance(op, Load):
        coords = sliced(op.variadic())  # the slice's column tile (units of part columns)
        per = Const([], {"value": part // cols}, [I32_T], span=op.span)
        first = Mul([coords[-1], per.result], {}, None, span=op.span)
        out.extend((per, first))
        new = Load([op.operands[0], *coords[:-1], first.result], {}, [narrow(op.result.type)], span=op.span,
                   result_hints=[f"{op.result.hint}_first" if op.result.hint and not op.result.hint.isdigit() else None])
    else:
        new = type(op)([_first_columns(x, plan, cols, part, sliced, mapping, out, made) for x in op.operands],
                       dict(op.attrs), [narrow(r.type) for r in op.results], span=op.span)
    out.append(new)
    made[v] = new.result
    return new.result
