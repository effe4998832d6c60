"""Which fragment layout the general lowering's consumers hold register tiles in, and the shared
scratch their cross-warp reductions use.

The one fragment-layout interface of both backends is ``codegen/layout.py``'s ``WarpGrid``: a
thread holds the mma.sync fragment of its warp's bands and chunks (``TileLayout``), in the
fragment's column order or the contiguous one. The register-tile backend's emitters (maps,
broadcasts, reductions, cvt, vector loads and stores, copy_cols) read only that grid, so both
backends emit every such op through the same emitter; only the grid differs:

* a kernel with a matrix product: ``4C x 1`` warps whose rows interleave by 64-row slabs
  (``slab_warps=4``), where wgmma m64 leaves its accumulator;
* a kernel with none (norms, softmax, rotary): the grid the register-tile backend would choose
  for the same IR (``choose_warp_grid`` over the consumers' ``4C`` warps, and
  ``contiguous_columns``): nothing needs the accumulator's rows, and 16-row tiles split over
  warp *columns* instead of being replicated in every warp. Row reductions over several warp
  columns then combine through shared scratch (``scratch_plan``) between the consumers' own
  named barrier (``ConsumerSharedSync``): the producer warpgroup never meets there.
"""
from __future__ import annotations

import dataclasses

from ...ir.ops import MMA_OPS, Load, Store
from ..context import SharedSync
from ..layout import WarpGrid, choose_warp_grid, contiguous_columns
from ..smem import Region, SmemPlan

SCRATCH_BARRIER = 1
"""The consumers' named barrier (lower_consumer.CONSUMER_BARRIER): scratch is theirs alone."""


def has_product(kernel) -> bool:
    return any(isinstance(op, MMA_OPS) for op in kernel.walk())


def consumer_grid(kernel, warps: int) -> tuple[WarpGrid, dict | None]:
    """The consumers' warp grid over ``warps`` warps, and the decision to log (None: the wgmma
    grid of a kernel with a product, which needs no word)."""
    if has_product(kernel):
        return WarpGrid(warps, warps, 1, 4), None
    grid, why = choose_warp_grid(kernel, {"num_warps": warps})
    contiguous, order = contiguous_columns(kernel, grid)
    grid = dataclasses.replace(grid, contiguous_cols=contiguous)
    shape = why[-1]["why"]
    return grid, {"decision": "consumer layout",
                  "value": f"{grid.wr}x{grid.wc} warps, {'contiguous' if contiguous else 'fragment'} columns",
                  "why": f"no matrix product, so no wgmma accumulator fixes the rows: the "
                         f"register-tile backend's grid over the consumers' {warps} warps ({shape}); "
                         f"column order: {order}"}


class ConsumerSharedSync(SharedSync):
    """Scratch hazards among the consumer warpgroups only: their named barrier, not the CTA's.
    While the consumers emit the op a ``ScratchSync`` step stands for (``step``), each barrier is
    that step's printing (``// step:`` ... ``// end step``: the PTX lint's marks)."""

    def __init__(self, consumers: int):
        super().__init__()
        self.BARRIER = f"bar.sync {SCRATCH_BARRIER}, {128 * consumers};"
        self.step = None

    def _barrier_if(self, needed: bool) -> list[str]:
        out = super()._barrier_if(needed)
        if out and self.step is not None:
            return [f"// step: {self.step.text()}", *out, "// end step"]
        return out


def scratch_needs(ops, table, grid) -> list[tuple]:
    """(op, bytes) of every consumer op among ``ops`` that needs shared scratch with ``grid``. Loads
    and stores go through the general lowering's own emitters, which need none; a cluster
    exchange's mbarrier and slots are its own (lower_cluster.exchange_regions)."""
    from ..emit_cluster import pinned_scratch
    out = []
    for op in ops:
        if isinstance(op, (Load, Store)) or pinned_scratch(op):  # (a cluster exchange's: lower_cluster.py)
            continue
        n = table.scratch_bytes(op, grid)
        if n:
            out.append((op, n))
    return out


def consumer_warps(kernel) -> int:
    """The warps that share each tile's rows: every consumer's, or one's (ping-pong)."""
    return 4 * (1 if kernel.attrs.get("pingpong") else kernel.attrs["consumers"])


def scratch_uses(kernel, body) -> dict:
    """The ops of ``body`` (the block body) holding consumer ops that exchange partials through
    the shared scratch -> those ops' names: what the mbarrier pass puts a ``ScratchSync`` step
    for, by the rule ``scratch_plan`` places the scratch by (the grid of ``consumer_grid``; the
    scratch needs of the emitter table, which ``lower_fragments.consumer_table`` keeps as they are)."""
    from ..table import EmitterTable
    grid, _ = consumer_grid(kernel, consumer_warps(kernel))
    table = EmitterTable()
    out = {}
    for op in body.ops:
        users = scratch_needs(op.walk(), table, grid)
        if users:
            out[op] = tuple(dict.fromkeys(user.NAME for user, _ in users))
    return out


def scratch_plan(kernel, ops, table, grid, base: int) -> tuple[SmemPlan, int]:
    """One shared scratch region from ``base`` (128-byte aligned) for every consumer op that
    needs scratch with ``grid`` (the largest need: the ops run one after another and
    ``ConsumerSharedSync`` puts a barrier between a read and the next write), and the bytes it
    adds."""
    needs = scratch_needs(ops, table, grid)
    need = max((n for _, n in needs), default=0)
    users = [op for op, _ in needs]
    if not need:
        return SmemPlan({}, {}, 0, []), 0
    at = -(-base // 128) * 128
    region = Region(at, need)
    plan = SmemPlan({}, {id(op): region for op in users}, at + need,
                    [(f"scratch of {op.NAME}", region, (0, 0)) for op in users])
    return plan, at + need - base


__all__ = ["consumer_grid", "consumer_warps", "has_product", "ConsumerSharedSync", "scratch_needs", "scratch_plan",
           "scratch_uses", "SCRATCH_BARRIER"]


NO_PRODUCT_MEASURED = ("H200, 2026-11-27 session 15, general / register-tile same run "
                       "(benchmarks/no_product_ab.py, benchmarks/results/2026-11-27-nvidia-h200-s15-noprod-*.json; "
                       "session 16, benchmarks/results/2026-11-27-nvidia-h200-s16-cpfill-1.json: rotary 1.067, "
                       "attention_bwd_prep 0.954)")


def auto_refusal(kernel, options: dict):
    """Under ``lowering=auto``, which kernels with no matrix product stay on the register-tile
    backend, by what was measured (NO_PRODUCT_MEASURED; ``lowering=general`` takes them all,
    docs/hopper-codegen.md):

    * consumers only (no shared tile, so no producer: rotary) in the contiguous column order
      (16-byte loads and stores straight between global memory and registers), elementwise only:
      the general lowering, measured at 1.06x the register-tile backend on rotary; in the mma
      fragment's order (2- and 4-byte loads: rotary 0.92x) or with a reduction
      (attention_bwd_prep's row sums: 0.95-0.96x), the register-tile backend;
    * a row block kept in shared memory (stream-cols' cache: ``copy_cols``) that the consumers
      fill themselves with cp.async (warp-spec's ``fill``): the general lowering at every row
      width, a row block split over a cluster included (FILL_MEASURED: 0.98-1.05x);
    * such a block filled by the TMA producer (``warp-spec{fill=tma}``): the register-tile backend;
      the general lowering measured 0.88-0.98x on the norm and softmax rows, at the same CTAs an SM
      as well (RMSNorm D = 2048 0.94-0.96x, ncu: 3.07 against 3.39 TB/s; session 16: 0.92-0.98x)."""
    from .lower import Refusal
    asked = options.get("asked", options.get("lowering", "auto"))  # (checked mode forces 'general')
    if asked != "auto" or has_product(kernel):
        return None
    filled = next((op for op in kernel.walk() if isinstance(op, Load) and op.attrs.get("fill") == "cp.async"), None)
    if filled is not None:  # the consumers' cp.async fill: the general lowering at every width (FILL_MEASURED)
        return None
    if not kernel.attrs.get("producer"):
        from ...ir.ops import Reduce
        grid, _ = consumer_grid(kernel, consumer_warps(kernel))
        if not grid.contiguous_cols:
            return Refusal(None, "it has no matrix product and loads no shared tile, in the mma fragment's "
                                 "column order (2- and 4-byte loads straight from global memory): lowering=auto "
                                 "keeps such kernels on the register-tile backend, measured faster there "
                                 f"(rotary in that order 0.92x; {NO_PRODUCT_MEASURED})")
        reduce = next((op for op in kernel.walk() if isinstance(op, Reduce)), None)
        if reduce is not None:
            return Refusal(reduce, "a reduction in a kernel with no matrix product and no shared tile: lowering=auto "
                                   "keeps such kernels on the register-tile backend, measured faster there "
                                   "(attention_bwd_prep's row sums through the general lowering 0.95-0.96x, in the "
                                   f"contiguous order; {NO_PRODUCT_MEASURED})")
        return None
    cache = next((op for op in kernel.walk() if op.NAME == "copy_cols"), None)
    if cache is not None:
        return Refusal(cache, "a column chunk of the row block stream-cols keeps in shared memory, in a "
                              "kernel with no matrix product: lowering=auto keeps such kernels on the "
                              "register-tile backend (its consumers fill the block with cp.async), measured "
                              "faster than the general lowering's TMA producer (0.88-0.98x on the norm and "
                              f"softmax rows; {NO_PRODUCT_MEASURED}; the consumers' cp.async fill, warp-spec's "
                              "fill=auto, is measured at least as fast: docs/hopper-codegen.md)")
    return None


FILL_MEASURED = ("H200, 2026-11-28 session 18, benchmarks/no_product_ab.py, general with the consumers' cp.async "
                 "fill over the register-tile backend, same run (benchmarks/results/2026-11-28-nvidia-h200-s18-"
                 "noprod-*.json): D = 1024 / 2048 / 4096 / 8192, RMSNorm 1.008 / 0.998 / 1.002 / 1.004, residual "
                 "+ LayerNorm 1.000 / 1.007 / 0.991 / 1.001, LayerNorm 1.022 / 1.029 / 0.991 / 0.976 (.maxnreg 48 "
                 "for 5 CTAs an SM at 4096 / 8192: codegen/hopper/occupancy.py), softmax 1.009 / 1.047 / 1.030 / "
                 "1.035; the wider rows take a row block split over a cluster. Before session 18 rows over "
                 "2,048 B stayed on the register-tile backend: the second block's fill waited for the first "
                 "(0.83-0.93 on residual + LayerNorm), the 1 KB of alignment slack took the 233 KB shared-memory "
                 "configuration (LayerNorm D = 2048 0.96), and .maxnreg with .minnctapersm 1 cost CTAs an SM")
"""The same-run figures the consumers' cp.async fill is taken at every width on."""


def copy_cols_order_refusal(kernel):
    """A kernel reading chunks of a TMA-loaded row block (``copy_cols``) is lowered only in the
    contiguous column order (lower_copy_cols.py): a Refusal at the first such op otherwise."""
    from .lower import Refusal
    cache = next((op for op in kernel.walk() if op.NAME == "copy_cols"), None)
    if cache is None:
        return None
    grid, _ = consumer_grid(kernel, 4 * kernel.attrs["consumers"])
    if not grid.contiguous_cols:
        return Refusal(cache, "a chunk of a shared row block read in the mma fragment's column order "
                              "(only the contiguous order's 16-byte reads are lowered)")
    return None


def ring_loop_refusal(kernel):
    """A loop streaming shared tiles through a ring with no product in it (stream-cols' chunk
    loops of wide rows with shared-memory loads): its protocol steps (mbarrier.py) wait and
    release around a product, which the consumers' walk anchors to; not lowered yet."""
    from ...passes.hopper import pipelined_loops
    from .lower import Refusal
    for loop in pipelined_loops(kernel):
        if not any(isinstance(op, MMA_OPS) for op in loop.walk()):
            return Refusal(loop, "a ring loop with no matrix product (stream-cols' streamed chunks of "
                                 "wide rows) is not lowered by the general lowering yet")
    return None
