"""The emitter table: (op class, operand category) → named emitter function.

Categories: ``scalar`` (every operand and result a scalar), ``register`` (register tiles and
vectors), ``memory`` (load/store/copy), ``control`` (ops with regions, and yield). An op with no
entry is a NotAvailableError naming the op and its operand and result types. The scratch table
says how many bytes of shared scratch an op needs (the shared-memory plan reserves them).
"""
from __future__ import annotations

from ..errors import NotAvailableError
from ..ir.core import Op
from ..ir.ops import ClusterRank, Copy, CopyCols, Load, Store, Yield
from ..ir.types import ScalarType, describe
from ..passes.liveness import deferred
from .emit_check import CHECK_EMITTERS
from .emit_cluster import CLUSTER_EMITTERS, CLUSTER_SCRATCH, pinned_scratch
from .emit_control import CONTROL_EMITTERS
from .emit_copy_cols import COPY_COLS_EMITTERS
from .emit_elementwise import REGISTER_EMITTERS
from .emit_memory import MEMORY_EMITTERS, MEMORY_SCRATCH
from .emit_mma import MMA_EMITTERS, MMA_SCRATCH
from .emit_reduce import REDUCE_EMITTERS, REDUCE_SCRATCH
from .emit_scalar import SCALAR_EMITTERS


def category(op: Op) -> str:
    if op.regions or isinstance(op, Yield):
        return "control"
    if isinstance(op, (Load, Store, Copy, CopyCols)):
        return "memory"
    values = list(op.operands) + list(op.results)
    if all(isinstance(v.type, ScalarType) for v in values):
        return "scalar"
    return "register"


def _entries() -> dict:
    table = {}
    for category_name, emitters in (("scalar", SCALAR_EMITTERS), ("register", REGISTER_EMITTERS),
                                    ("register", REDUCE_EMITTERS), ("register", MMA_EMITTERS),
                                    ("memory", MEMORY_EMITTERS), ("memory", COPY_COLS_EMITTERS),
                                    ("control", CONTROL_EMITTERS),
                                    ("scalar", CHECK_EMITTERS)):
        for cls, fn in emitters.items():
            table[(cls, category_name)] = fn
    for cls, fn in CLUSTER_EMITTERS.items():
        table[(cls, "scalar" if cls is ClusterRank else "register")] = fn
    return table


class EmitterTable:
    def __init__(self, entries: dict | None = None, scratch: dict | None = None):
        self.entries = dict(_entries() if entries is None else entries)
        self.scratch = dict(scratch if scratch is not None else
                            {**MEMORY_SCRATCH, **MMA_SCRATCH, **REDUCE_SCRATCH, **CLUSTER_SCRATCH})

    def lookup(self, op: Op):
        if deferred(op):  # fuse-elementwise: computed where its users read it (emit_fused.py)
            from .emit_fused import emit_deferred
            return emit_deferred
        key = (type(op), category(op))
        try:
            return self.entries[key]
        except KeyError:
            ins = ", ".join(describe(v.type) for v in op.operands) or "no operands"
            outs = ", ".join(describe(v.type) for v in op.results) or "no results"
            raise NotAvailableError(f"the PTX backend has no emitter for '{op.NAME}' on {ins} "
                                    f"(giving {outs})", op.span) from None

    def scratch_bytes(self, op: Op, grid) -> int:
        fn = self.scratch.get(type(op))
        return fn(op, grid) if fn is not None else 0

    @staticmethod
    def scratch_pinned(op: Op) -> bool:
        """Whether the op's scratch must live through the whole kernel (smem.py)."""
        return pinned_scratch(op)


DEFAULT_TABLE = EmitterTable()
