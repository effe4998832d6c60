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
from ..ir.ops import CLUSTER_REDUCE_OPS, REDUCE_OPS, Add, Blocks, ClusterRank, Const, Load, Mul, Store
from ..ir.types import TileType, VectorType
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


def split_over_cluster(kernel: Kernel, body: Block, k: int, exchange: str = "barrier") -> tuple[int, int]:
    """Rewrite ``body`` (the block loop's) so that k CTAs share each block, CTA ``rank`` taking
    column slice ``rank`` (module docstring), each cluster reduction with attribute ``exchange``
    (ops/cluster.py); returns (W, W/k). Raises NotStreamable when the
    program is not row-wise or its wide tensors cannot be sliced."""
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

    from .rewrite import _clone_op
    for op in body.ops:
        wide_in = any(v in plan.wide for v in op.operands)
        wide_out = any(r in plan.wide for r in op.results)
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
    return width, part
