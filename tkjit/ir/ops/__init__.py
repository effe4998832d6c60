"""Every tile-IR op, and the registry from op name to class (the IR parser's table)."""
from __future__ import annotations

from ..core import Op
from .check import Check
from .cluster import CLUSTER_OPS, CLUSTER_REDUCE_OPS, ClusterMoments, ClusterRank, ClusterReduce
from .control import Blocks, For, If, Yield
from .elementwise import (ACTIVATION_OPS, BINARY_OPS, COMPARISONS, UNARY_OPS, Abs, Add, And, Binary,
                          CausalMask, CDiv, CmpSelect, Iota, Cos, Cvt,
                          Div, Eq, Exp, Exp2, Fill, FloorDiv, Ge, Gelu, GeluTanh, Gt, Le, Log, Log2, Lt, Max, Min, Mod,
                          Mul, Ne, Neg, Not, Or, Relu, Rsqrt, Select, Sigmoid, Silu, Sin, Sqrt, Sub,
                          Tanh, Unary, Zeros)
from .memory import Copy, CopyCols, Load, Store
from .mma import MMA_OPS, Mma, MmaAB, MmaABt, MmaAtB, MmaAtBt
from .reduce import BROADCAST_OPS, REDUCE_OPS, Broadcast, Reduce
from .scalar import Const, Dim

ALL_OPS: tuple[type[Op], ...] = (
    Const, Dim, *BINARY_OPS, *UNARY_OPS, Cvt, Zeros, Fill, CausalMask, Select, Iota, CmpSelect,
    Load, Store, Copy, CopyCols, *REDUCE_OPS, *BROADCAST_OPS, *MMA_OPS, Blocks, For, If, Yield, Check,
    *CLUSTER_OPS)

OPS: dict[str, type[Op]] = {cls.NAME: cls for cls in ALL_OPS}
assert len(OPS) == len(ALL_OPS), "two ops share a name"


def op_class(name: str) -> type[Op] | None:
    return OPS.get(name)


def reduce_op(fn: str, axis: str) -> type[Reduce]:
    return OPS[f"{axis}_{fn}"]  # type: ignore[return-value]


def broadcast_op(fn: str, axis: str) -> type[Broadcast]:
    return OPS[f"{fn}_{axis}"]  # type: ignore[return-value]
