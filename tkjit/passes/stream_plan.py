"""stream-cols' analysis: which values of a block body are *wide* (the too-large register tiles'
width), in which pass each op runs, and the chunk width (``plan_streaming``; the pass is
stream_cols.py, its rewrite stream_rewrite.py)."""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Block, Kernel, Op, Value
from ..ir.ops import (BINARY_OPS, BROADCAST_OPS, REDUCE_OPS, UNARY_OPS, Add, Blocks, Cvt, Fill, Load, Max, Min,
                      Store, Yield, Zeros)
from ..ir.types import F32, I32, MAX_REGISTER_TILE_BYTES, ScalarType, TileType, VectorType

CHUNK_BYTES = 32 * 1024
"""The most bytes of one chunk tile: 16 x 512 f32 for BR = 16 (measured against 1024 columns, docs/codegen.md)."""
COMBINE = {"sum": Add, "max": Max, "min": Min}
IDENTITY = {"sum": 0.0, "max": float("-inf"), "min": float("inf")}
COLUMN_LOCAL = (*UNARY_OPS, *BINARY_OPS, Cvt, Zeros, Fill)
I32_T = ScalarType(I32)


@dataclass
class StreamPlan:
    """How a block body streams: the width W, the chunk width, and each op's phase."""
    body: Block
    width: int
    chunk: int
    wide: set                 # the wide values
    phase: dict               # wide op / sink -> its phase
    avail: dict               # narrow value -> the phase from which it exists
    phases: int


class NotStreamable(Exception):
    """Why a block body cannot run over column chunks: the op (None: the body) and the reason."""

    def __init__(self, op: Op | None, why: str):
        super().__init__(why)
        self.op, self.why = op, why


def is_oversized(v: Value) -> bool:
    t = v.type
    return isinstance(t, TileType) and t.space == "rt" and t.nbytes > MAX_REGISTER_TILE_BYTES


def block_body(kernel: Kernel) -> Block | None:
    blocks = next((op for op in kernel.body.ops if isinstance(op, Blocks)), None)
    return blocks.regions[0] if blocks is not None else None


def plan_streaming(body: Block, *, force: bool = False, cols: int = 0) -> StreamPlan | None:
    """The plan for ``body`` (None: every register tile fits and ``force`` is off); raises
    NotStreamable when a tile is too large and the program is not row-wise."""
    big = [v for op in body.ops for v in op.results if is_oversized(v)]
    if not big and not force:
        return None
    widths = {v.type.cols for v in big} or {max((v.type.cols for op in body.ops for v in op.results
                                                  if isinstance(v.type, TileType) and v.type.space == "rt"),
                                                 default=0)}
    if len(widths) != 1 or 0 in widths:
        raise NotStreamable(None, f"its too-large register tiles have different widths ({sorted(widths)})")
    width = widths.pop()
    wide = set()

    def is_wide_type(t) -> bool:
        return (isinstance(t, TileType) and t.space == "rt" and t.cols == width) or \
            (isinstance(t, VectorType) and t.kind == "rv" and t.length == width)

    phase, avail = {}, {}

    def ready(v: Value) -> int:
        return avail.get(v, 0)

    for op in body.ops:
        if isinstance(op, Yield):
            continue
        makes = [r for r in op.results if is_wide_type(r.type)]
        reads = [v for v in op.operands if v in wide]
        if op.regions:
            inner = [v for o in op.walk() for v in (*o.operands, *o.results) if v in wide or is_wide_type(v.type)]
            if inner:
                raise NotStreamable(op, f"'{op.NAME}' holds a {width}-column tile inside its region; "
                                        "only straight-line code in the block loop is streamed")
            avail.update({r: max((ready(v) for o in op.walk() for v in o.operands), default=0) for r in op.results})
            continue
        if makes:
            if not _column_local(op):
                raise NotStreamable(op, f"'{op.NAME}' making {makes[0].type} does not work column by column")
            p = max([phase[v.owner] for v in reads] + [ready(v) for v in op.operands if v not in wide], default=0)
            phase[op] = p
            wide.update(makes)
        elif reads:
            if isinstance(op, Store):
                phase[op] = max([phase[op.operands[1].owner]] + [ready(v) for v in op.variadic()])
            elif type(op) in REDUCE_OPS and op.AXIS == "row":
                if op.result.type.dtype != F32:
                    raise NotStreamable(op, f"'{op.NAME}' of a {op.operands[0].type.dtype} tile: partial "
                                            "results would be rounded per chunk (only f32 reductions stream)")
                phase[op] = phase[op.operands[0].owner]
                avail[op.result] = phase[op] + 1
            else:
                raise NotStreamable(op, f"'{op.NAME}' reads the whole {op.operands[0].type if reads else ''} "
                                        "at once (only elementwise ops, broadcasts, row reductions and stores stream)")
        else:
            for r in op.results:
                avail[r] = max((ready(v) for v in op.operands), default=0)
    phases = max(phase.values(), default=-1) + 1
    if phases == 0:
        raise NotStreamable(None, "no op of the block works on the too-large tiles")
    chunk = cols or _chunk_width(width, [v.type for v in wide])
    if width % chunk or chunk % 16 or chunk >= width:
        raise NotStreamable(None, f"a chunk of {chunk} columns does not split {width} columns")
    return StreamPlan(body, width, chunk, wide, phase, avail, phases)


def _column_local(op: Op) -> bool:
    if isinstance(op, COLUMN_LOCAL + BROADCAST_OPS):
        return True
    if isinstance(op, Load):
        return True
    return type(op) in REDUCE_OPS and op.AXIS == "col"


def _chunk_width(width: int, types, limit: int = CHUNK_BYTES) -> int:
    rows = max((t.rows * t.dtype.bits // 8 for t in types if isinstance(t, TileType)), default=4)
    chunk = 16
    while width % (2 * chunk) == 0 and 2 * chunk < width and rows * 2 * chunk <= limit:
        chunk *= 2
    return chunk


def _chunked(t, plan: StreamPlan):
    if isinstance(t, TileType):
        return TileType(t.space, t.dtype, t.rows, plan.chunk)
    return VectorType(t.kind, t.dtype, plan.chunk)
