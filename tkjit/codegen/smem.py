"""Shared memory for the register-tile path: the row-XOR layout of a tile, and the plan that gives
every shared tile and every op's scratch space an offset in the kernel's dynamic shared memory.

**Layout.** A tile [R, C] is stored row-major, ``row_bytes = C * elem_bytes``, in 16-byte chunks;
chunk ``ch`` of row ``r`` is stored at chunk ``ch ^ ((r >> shift) & mask)`` of that row. The
shift and mask are chosen so that the 8 rows an ldmatrix phase or a fragment access touches
land in 8 different 16-byte bank groups: with ``k = gcd(row_bytes / 16, 8)``, ``mask = k - 1``
and ``shift = log2(8 / k)``. For 128-, 64- and 32-byte rows this is exactly Hopper's 128B, 64B
and 32B swizzle of the address.

**Plan.** Shared tiles live from their definition to their last use (extended to the end of any
loop that uses them but does not define them); an op's scratch (staging of register tiles,
cross-warp reduction partials, shared copies of register mma operands) lives during the op
only, except a *pinned* op's (a cluster exchange that peers write into at any time: the whole
kernel). Intervals are packed first-fit, so scratch reuses the space of dead tiles.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import gcd

from ..errors import NotAvailableError, PassError
from ..ir.core import Kernel, Op, Value
from ..ir.ops import Blocks, Copy, For, If, Load
from ..ir.types import MAX_SHARED_BYTES, TileType


@dataclass(frozen=True)
class Geometry:
    """Where element (row, col) of a shared tile lives, relative to the tile's base."""

    rows: int
    cols: int
    elem_bytes: int
    shift: int
    mask: int

    @staticmethod
    def of(rows: int, cols: int, elem_bytes: int) -> "Geometry":
        chunks = cols * elem_bytes // 16
        k = gcd(chunks, 8) if chunks else 1
        shift = {8: 0, 4: 1, 2: 2, 1: 0}[k]
        return Geometry(rows, cols, elem_bytes, shift, k - 1)

    @staticmethod
    def of_tile(t: TileType) -> "Geometry":
        return Geometry.of(t.rows, t.cols, t.dtype.nbytes)

    @property
    def row_bytes(self) -> int:
        return self.cols * self.elem_bytes

    @property
    def chunks_per_row(self) -> int:
        return self.row_bytes // 16

    @property
    def nbytes(self) -> int:
        return self.rows * self.row_bytes

    @property
    def elems_per_chunk(self) -> int:
        return 16 // self.elem_bytes

    def xor(self, row: int) -> int:
        return (row >> self.shift) & self.mask

    def offset(self, row: int, col: int) -> int:
        byte = col * self.elem_bytes
        return row * self.row_bytes + 16 * ((byte >> 4) ^ self.xor(row)) + (byte & 15)


@dataclass(frozen=True)
class Region:
    offset: int
    size: int

    def overlaps(self, other: "Region") -> bool:
        return self.offset < other.offset + other.size and other.offset < self.offset + self.size


@dataclass
class SmemPlan:
    values: dict[int, Region]
    """id(shared-tile value) -> its region."""
    scratch: dict[int, Region]
    """id(op) -> the op's scratch region."""
    total: int
    items: list[tuple[str, Region, tuple[int, int]]]
    """(what, region, live interval) for the decision log and tests."""

    def of_value(self, v: Value) -> Region:
        return self.values[id(v)]

    def of_op(self, op: Op) -> Region:
        return self.scratch[id(op)]


def _is_shared(v: Value) -> bool:
    return isinstance(v.type, TileType) and v.type.space == "st"


class _Numbering:
    """Pre-order op indices, each op's subtree end, and each op's enclosing loops."""

    def __init__(self, kernel: Kernel):
        self.index: dict[int, int] = {}
        self.end: dict[int, int] = {}
        self.loops: dict[int, list[Op]] = {}
        self.ops: list[Op] = []
        self._walk(kernel.body.ops, [])

    def _walk(self, ops, loops: list[Op]) -> None:
        for op in ops:
            self.index[id(op)] = len(self.ops)
            self.ops.append(op)
            self.loops[id(op)] = list(loops)
            inner = loops + [op] if isinstance(op, (For, Blocks)) else loops
            for region in op.regions:
                self._walk(region.ops, inner)
            self.end[id(op)] = len(self.ops) - 1


def _live_interval(num: _Numbering, v: Value, uses: list[Op]) -> tuple[int, int]:
    d = v.owner
    start = num.index[id(d)]
    def_loops = {id(x) for x in num.loops[id(d)]}
    end = start
    for u in uses:
        end = max(end, num.index[id(u)])
        for loop in num.loops[id(u)]:
            if id(loop) not in def_loops:
                end = max(end, num.end[id(loop)])
                break  # the outermost loop the definition is not in covers the inner ones
    return start, end


def plan_shared_memory(kernel: Kernel, scratch_bytes, pipelines: dict | None = None,
                       pinned=None) -> SmemPlan:
    """Place every shared tile and scratch area; ``scratch_bytes(op)`` is the op's need (0: none);
    ``pinned(op)``: its scratch lives through the whole kernel.

    ``pipelines`` (id(for) → LoopPipeline): a pipelined load gets ``stages`` stage buffers that
    live over its whole loop."""
    num = _Numbering(kernel)
    staged = {id(load): pipe for pipe in (pipelines or {}).values() for load in pipe.loads}
    uses: dict[int, list[Op]] = {}
    for op in num.ops:
        for v in op.operands:
            uses.setdefault(id(v), []).append(op)
        if isinstance(op, (For, If)):
            carried = list(op.results) + [a for r in op.regions for a in r.args]
            if any(_is_shared(v) for v in carried):
                raise NotAvailableError(f"{op.NAME}: a shared tile carried through a loop or if is not "
                                        "supported by the register-tile backend; load it inside the "
                                        "loop or carry a register tile", op.span)
    items: list[tuple[tuple[int, int], int, int, str, str, int]] = []
    for op in num.ops:
        idx = num.index[id(op)]
        for r in op.results:
            if _is_shared(r) and id(op) in staged:
                pipe = staged[id(op)]
                lo, hi = num.index[id(pipe.loop)], num.end[id(pipe.loop)]
                items.append(((lo, hi), pipe.stages * pipe.stride(op), 1024, "value",
                              f"%{r.hint or '?'} {r.type} x{pipe.stages} stages", id(r)))
            elif _is_shared(r) and isinstance(op, (Load, Copy)):
                lo, hi = _live_interval(num, r, uses.get(id(r), []))
                items.append(((lo, hi), r.type.nbytes, 1024, "value", f"%{r.hint or '?'} {r.type}", id(r)))
        need = scratch_bytes(op)
        if need:
            whole = pinned is not None and pinned(op)
            items.append(((0, len(num.ops) - 1) if whole else (idx, idx), need, 128, "scratch",
                          f"scratch of {op.NAME}" + (" (whole kernel)" if whole else ""), id(op)))
    placed: list[tuple[tuple[int, int], Region]] = []
    plan = SmemPlan({}, {}, 0, [])
    for (lo, hi), size, align, kind, what, key in sorted(items, key=lambda it: (it[0][0], -it[1])):
        busy = [reg for (a, b), reg in placed if a <= hi and lo <= b]
        offset = 0
        while True:
            clash = [reg for reg in busy if Region(offset, size).overlaps(reg)]
            if not clash:
                break
            offset = -(-max(reg.offset + reg.size for reg in clash) // align) * align
        region = Region(offset, size)
        placed.append(((lo, hi), region))
        (plan.values if kind == "value" else plan.scratch)[key] = region
        plan.items.append((what, region, (lo, hi)))
        plan.total = max(plan.total, offset + size)
    if plan.total > MAX_SHARED_BYTES:
        listing = "; ".join(f"{what}: {reg.size} bytes" for what, reg, _ in plan.items)
        raise PassError(f"kernel '{kernel.name}' needs {plan.total} bytes of shared memory on the "
                        f"register-tile path, over the {MAX_SHARED_BYTES}-byte limit ({listing})",
                        kernel.span)
    return plan
