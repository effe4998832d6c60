"""The epilogue cost model: what the ops after a tile's reduction loop cost per accumulator
element, in issue cycles of one warp (a model, not a pass: warp-spec logs it, the general
lowering puts it in the launch metadata's ``gemm`` shape, and ``@fill_sms`` weighs it).

Each op of the block body after the ring loop that makes a tile of the accumulator's shape costs
``(issue, mufu)`` per element (``OP_COST``, from the SASS of today's emitters, mathfn.py: gelu 15
FMA-pipe instructions and 2 MUFU, silu 12 and 1, ...); a row or column vector loaded for the tile
costs ``VECTOR_LOAD`` per tile element (one 32-bit load per pair of a thread's columns,
vector_pairs.py, shared by the tile's rows). A warp issues one instruction a clock per scheduler
while MUFU runs 4 lanes a clock (a warp instruction every 8 clocks), so the epilogue's cycles per
element are ``max(issue, 8 * mufu)``, plus ``PLAIN`` for the conversion to 16 bits and the staged
store that every GEMM pays. A plain GEMM's epilogue is PLAIN (1.0); the example's bias + erf
gelu about 18.

Measured with it (H200, 2026-11-27, benchmarks/epilogue_variants.py, one process, ratio to
cuBLAS's plain matmul, 128x256 cooperative -> 128x128 ping-pong at 4096^3 / 8192^3): gelu
0.946 -> 0.991 / 1.020 -> 1.063, silu 0.978 -> 1.022 / 1.032 -> 1.067, relu 1.018 -> 1.055 /
1.061 -> 1.092, the plain GEMM 1.023 -> 1.037 / 1.083 -> 1.073
(benchmarks/results/2026-11-27-nvidia-h200-s12-epilogue-run1.json).

Under ping-pong the other consumer's wgmmas hide only part of it (H200, 2026-11-27, ncu at
4096^3, 128x128: bias + gelu 298 K SM cycles against the plain GEMM's 280 K, its epilogue 2,456
SASS instructions a thread more: about a cycle a warp instruction, MUFU ones no dearer than FMA
ones; benchmarks/results/2026-11-27-nvidia-h200-s16-gelu-rcp.json); the model's number is
unchanged (what @fill_sms scales by).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Kernel
from ..ir.ops import Blocks, For, Load
from ..ir.types import TileType, VectorType

MUFU_CYCLES = 8
"""Issue cycles a warp instruction occupies MUFU (16 lanes an SM, 4 a scheduler)."""
PLAIN = 1.0
"""The conversion of an f32 accumulator to 16 bits (one cvt per pair) and its stmatrix + TMA
store, per element: the epilogue every GEMM has."""
VECTOR_LOAD = 0.5
"""A bias-like vector per tile element: a 32-bit load and two conversions per column pair, for
the 128 or 64 elements of the thread's rows that share it."""
OP_COST = {
    "add": (1, 0), "sub": (1, 0), "mul": (1, 0), "max": (1, 0), "min": (1, 0), "div": (10, 1),
    "neg": (0.5, 0), "abs": (0.5, 0), "relu": (1, 0),
    "exp": (2, 1), "exp2": (1, 1), "log": (2, 1), "log2": (1, 1), "sqrt": (3, 1), "rsqrt": (1, 1),
    "tanh": (1, 1), "sin": (5, 1), "cos": (5, 1),
    "sigmoid": (11, 1), "silu": (12, 1), "gelu_tanh": (15, 1), "gelu": (15, 2),
    "select": (2, 0), "cmp_select": (2, 0),
    "cvt": (0, 0),  # counted in PLAIN
}
"""(FMA-pipe issue, MUFU) instructions per element of each elementwise op; a broadcast
(``add_col``, ``mul_row``, ...) costs as its arithmetic; ops not listed cost (1, 0)."""


@dataclass(frozen=True)
class EpilogueCost:
    issue: float
    mufu: float
    ops: tuple[str, ...]

    @property
    def cycles(self) -> float:
        """Issue cycles of one warp per accumulator element, the conversion and store included."""
        return round(max(self.issue, MUFU_CYCLES * self.mufu) + PLAIN, 1)

    def text(self) -> str:
        names = ", ".join(self.ops) or "none"
        return (f"epilogue ~{self.cycles:g} warp cycles per accumulator element ({names}: "
                f"{self.issue:g} FMA-pipe + {self.mufu:g} MUFU instructions; the plain GEMM's "
                f"conversion and store {PLAIN:g})")


def _cost_of(name: str) -> tuple[float, float]:
    base = name.split("_")[0] if name.endswith(("_row", "_col")) else name
    return OP_COST.get(base, (1, 0))


def epilogue_cost(kernel: Kernel, loop: For) -> EpilogueCost:
    """The cost of what the block body does after ``loop`` (a ring loop carrying one
    accumulator) on tiles of the accumulator's shape."""
    acc = next((v.type for v in loop.results if isinstance(v.type, TileType)), None)
    issue = mufu = 0.0
    names: list[str] = []
    if acc is None:
        return EpilogueCost(0, 0, ())
    region = next((op.regions[0] for op in kernel.walk() if isinstance(op, Blocks)
                   and any(o is loop for o in op.regions[0].ops)), None)
    if region is None:
        return EpilogueCost(0, 0, ())
    after = region.ops[next(i for i, o in enumerate(region.ops) if o is loop) + 1:]
    for op in after:
        for o in op.walk() if hasattr(op, "walk") else [op]:
            t = o.results[0].type if len(o.results) == 1 else None  # (an if may yield several)
            if isinstance(o, Load) and isinstance(t, VectorType):
                issue += VECTOR_LOAD
                names.append(f"{t.kind} load")
            elif isinstance(t, TileType) and (t.rows, t.cols) == (acc.rows, acc.cols) and o.NAME != "cvt":
                i, m = _cost_of(o.NAME)
                issue, mufu = issue + i, mufu + m
                names.append(o.NAME)
    return EpilogueCost(issue, mufu, tuple(names))


__all__ = ["MUFU_CYCLES", "OP_COST", "PLAIN", "EpilogueCost", "epilogue_cost"]
