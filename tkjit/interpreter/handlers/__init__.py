"""The interpreter's dispatch table: each tile-IR op class -> the named handler that executes it.

A handler is ``handler(interp, op, operand_values) -> list of result values``. ``yield`` is not
in the table: ``Interpreter.run_block`` ends a region there. An op with no entry raises
``NotAvailableError`` naming it.
"""
from __future__ import annotations

from ...ir.ops import (CLUSTER_REDUCE_OPS, ClusterMoments, ClusterRank, BINARY_OPS, BROADCAST_OPS, MMA_OPS, REDUCE_OPS, UNARY_OPS, Blocks, CausalMask,
                       CmpSelect, Iota,
                       Check, Const, Copy, CopyCols, Cvt, Dim, Fill, For, If, Load, Select, Store, Zeros)
from .cluster import run_cluster_moments, run_cluster_rank, run_cluster_reduce
from .control import run_blocks, run_for, run_if
from .elementwise import (run_binary, run_causal_mask, run_cmp_select, run_cvt, run_fill, run_iota,
                          run_unary, run_zeros)
from .memory import run_copy, run_copy_cols, run_load, run_store
from .mma import run_mma
from .reduce import run_broadcast, run_reduce
from .scalar import run_check, run_const, run_dim, run_select

HANDLERS = {
    Const: run_const, Dim: run_dim, Select: run_select,
    Cvt: run_cvt, Zeros: run_zeros, Fill: run_fill, CausalMask: run_causal_mask,
    Iota: run_iota, CmpSelect: run_cmp_select,
    Load: run_load, Store: run_store, Copy: run_copy, CopyCols: run_copy_cols,
    Blocks: run_blocks, For: run_for, If: run_if, Check: run_check, ClusterRank: run_cluster_rank,
}
HANDLERS.update({cls: run_cluster_reduce for cls in CLUSTER_REDUCE_OPS})
HANDLERS[ClusterMoments] = run_cluster_moments
HANDLERS.update({cls: run_binary for cls in BINARY_OPS})
HANDLERS.update({cls: run_unary for cls in UNARY_OPS})
HANDLERS.update({cls: run_reduce for cls in REDUCE_OPS})
HANDLERS.update({cls: run_broadcast for cls in BROADCAST_OPS})
HANDLERS.update({cls: run_mma for cls in MMA_OPS})
