"""Register pressure of a consumer warpgroup: live register fragments per thread, at the peak.

Block-level register tiles are split by rows over the consumer warpgroups (64-row slabs, one
share per consumer); a thread of a warpgroup holds rows*cols/128 elements of its share, packed
into 32-bit registers (bf16: two per register; an f32 tile loaded from a 16-bit tensor and read
only elementwise counts at 16 bits, as the lowering holds it: ``held_packed``). In the wgmma
fragment (``layout=wgmma``) a cv holds 2 values per 64-row slab and an rv a quarter of its
columns; other vectors are counted as spread over the 32 lanes of a warp. Shared tiles and scalars cost nothing here; the callers add
an allowance for addresses, indices, descriptors and loop counters.

The estimate walks the block body in program order: a value lives from its definition to its
last use, a value used inside a loop it was defined outside of lives to the loop's end, and an
op that consumes a value for the last time may write its result into the same registers (the
wgmma accumulator, elementwise maps in place). A tile fuse-elementwise deferred (``deferred``)
holds no registers: it is computed element by element where its users read it, so what it reads
lives until there instead (``roots``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Block, Kernel, Op, Value
from ..ir.ops import For, If, Load
from ..ir.types import BF16, F16, F32, GlobalType, TileType, Type, VectorType, is_register, with_dtype
from .hopper import Position, block_loop, positions, walk_block

CONSUMER_OVERHEAD = 32
"""Registers a consumer thread needs besides its fragments (addresses, loop state, descriptors)."""
PRODUCER_NEED = 24
"""What the producer's one elected thread needs (coordinates, barrier addresses, phase bits)."""


def rows_per_consumer(rows: int, consumers: int) -> int:
    return rows // consumers if rows % (64 * consumers) == 0 else rows


def fragment_registers(t: Type, consumers: int) -> int:
    """32-bit registers per consumer thread holding one value of type ``t``."""
    if not is_register(t) or not isinstance(t, (TileType, VectorType)):
        return 0
    wgmma = dict(t.attrs).get("layout") == "wgmma"
    if isinstance(t, TileType):
        elements = rows_per_consumer(t.rows, consumers) * t.cols / 128
    elif not wgmma:
        elements = -(-t.length // 32)
    elif t.kind == "cv":
        elements = 2 * max(1, rows_per_consumer(t.length, consumers) // 64)
    else:
        elements = t.length / 4
    return -(-int(elements * t.dtype.bits) // 32)


FUSE = ("chain", "remat")
"""The values of an op's ``fuse`` attribute (passes/fuse_elementwise.py): ``chain``, a single-use
temporary computed inside its one user; ``remat``, an index-derived tile computed again at each
use."""


def deferred(op: Op) -> bool:
    """Whether fuse-elementwise deferred ``op``'s register tile to its users: no register holds
    it as a tile; each user's emitter computes it element by element, fragment register by
    fragment register, as it reads it. One rule for the estimate (``consumer_pressure``) and the
    emitters (codegen/emit_fused.py, through EmitterTable.lookup)."""
    return op.attrs.get("fuse") in FUSE


def roots(op: Op, readers: dict[Value, list[Op]]) -> list[Op]:
    """The ops that compute a deferred ``op``'s elements: its users, through deferred users to
    theirs (a chain is evaluated inside the op that is not deferred)."""
    out: list[Op] = []
    for user in readers.get(op.result, []):
        out += roots(user, readers) if deferred(user) else [user]
    return out


def held_packed(op: Op, users: list[Op]) -> bool:
    """Whether the general lowering holds ``op``'s result as 16-bit pairs: an f32 register tile
    loaded from a bf16/f16 tensor, read from a bf16/f16 shared tile, or widened by ``cvt<f32>``
    from a bf16/f16 register tile, whose every reader reads it element by element (maps,
    arithmetic, broadcasts, cvt, stores) -- half the registers, unpacked at each use (exact: a
    bf16/f16 value is an f32 one). One rule for the estimate and the emitter
    (codegen/hopper/lower_fragments: emit_load, emit_widen; lower_tile_read)."""
    from ..ir.ops import BINARY_OPS, BROADCAST_OPS, UNARY_OPS, Copy, Cvt, Store
    if not isinstance(op, (Load, Cvt, Copy)) or not op.results:
        return False
    t, g = op.result.type, op.operands[0].type
    if isinstance(op, Load):
        narrow = isinstance(g, GlobalType) and g.dtype in (BF16, F16)
    elif isinstance(op, Copy):   # a 16-bit shared tile read into registers (lower_tile_read)
        narrow = isinstance(g, TileType) and g.space == "st" and g.dtype in (BF16, F16)
    else:   # cvt<f32> of a 16-bit register tile: exact, so the tile itself can stand for it
        narrow = isinstance(g, TileType) and g.space == "rt" and g.dtype in (BF16, F16)
    return (isinstance(t, TileType) and t.space == "rt" and t.dtype == F32 and narrow and bool(users)
            and all(isinstance(u, (*BINARY_OPS, *UNARY_OPS, *BROADCAST_OPS, Cvt, Store)) for u in users))


@dataclass
class Pressure:
    """Register pressure of a consumer thread: the peak, where it is and what is live there."""

    peak: int
    """Fragment registers per consumer thread at the busiest op."""
    at: Op | None
    live: list[tuple[Value, int]]
    """What is live there, largest first."""

    def summary(self) -> str:
        if self.at is None:
            return "no register tiles"
        parts = ", ".join(f"%{v.hint or '?'} {n}" for v, n in self.live[:4])
        more = f" and {len(self.live) - 4} more" if len(self.live) > 4 else ""
        return f"{self.peak}, first reached at {self.at.NAME}" + (f": {parts}{more}" if parts else "")

    def where(self) -> str:
        """The peak for a diagnostic: the op and its source line, and each large live value named by
        its hint or, for a temporary, by the op that makes it and where."""
        if self.at is None:
            return "no register tiles"

        def name(v: Value) -> str:
            if v.hint:
                return f"%{v.hint}"
            owner = v.owner
            span = getattr(owner, "span", None)
            return f"the {owner.NAME} at {span.location()}" if span is not None else f"a {owner.NAME} result"
        at = f"{self.at.NAME} at {self.at.span.location()}" if self.at.span is not None else self.at.NAME
        parts = ", ".join(f"{name(v)} {n}" for v, n in self.live[:5])
        return f"{self.peak} fragment registers live at {at}" + (f" ({parts})" if parts else "")


def consumer_pressure(kernel: Kernel, consumers: int, within: Op | None = None) -> Pressure:
    """The peak over the tile's body, or (``within``) over the program points of one op of it
    (a ring loop: what its trips hold, the values live across it included)."""
    body = block_loop(kernel).regions[0]
    pos = positions(body)
    born: dict[Value, int] = {}
    uses: dict[Value, list[int]] = {}
    readers: dict[Value, list[Op]] = {}
    for op in walk_block(body):
        for v in op.operands:
            readers.setdefault(v, []).append(op)
    size: dict[Value, int] = {}
    for op in walk_block(body):
        p = pos[op]
        for v in op.results:
            t = v.type
            if held_packed(op, readers.get(v, [])):
                t = with_dtype(t, op.operands[0].type.dtype)
            size[v] = 0 if deferred(op) else fragment_registers(t, consumers)
            if size[v]:
                born[v] = p.end if op.regions else p.start
                uses.setdefault(v, [born[v]])
        at = roots(op, readers) if deferred(op) else [op]  # where a deferred op reads its operands
        for v in op.operands:
            if v in born:
                uses[v] += [use_position(user, v, pos) for user in at]
        if isinstance(op, For):
            for arg in op.regions[0].args[1:]:
                size[arg] = fragment_registers(arg.type, consumers)
                if size[arg]:
                    born[arg] = p.start
                    uses.setdefault(arg, [p.start])
    apart = branch_ranges(body, pos)

    def last_from(v: Value, point: int) -> int | None:
        """The last use of ``v`` on a path through ``point`` (None: dead there): a use in a later
        branch of an if whose earlier branch holds ``point`` is on another path."""
        if born[v] > point:
            return None
        reach = [u for u in uses[v] if u >= point and not exclusive(apart, point, u)]
        return max(reach) if reach else None

    births: dict[int, int] = {}
    for v, b in born.items():
        births[b] = births.get(b, 0) + size[v]
    points = sorted(set(births) | {u for us in uses.values() for u in us})
    best = Pressure(0, None, [])
    by_position = {p.start: op for op, p in pos.items()}
    if within is not None:
        span = pos[within]
        points = [p for p in points if span.start <= p <= span.end]
    for point in points:
        live, dying = [], 0
        for v in born:
            end = last_from(v, point)
            if end is None:
                continue
            regs = size[v]
            live.append((v, regs))
            if end == point:
                dying += regs
        total = sum(n for _, n in live) - min(births.get(point, 0), dying)
        if total > best.peak:
            best = Pressure(total, by_position.get(point), sorted(live, key=lambda x: -x[1]))
    return best


def branch_ranges(body: Block, pos: dict[Op, Position]) -> list[list[tuple[int, int]]]:
    """For each if under ``body``, the position range of each of its regions (then, else)."""
    out = []
    for op in walk_block(body):
        if isinstance(op, If):
            ranges = []
            for region in op.regions:
                inner = [pos[o] for o in region.ops]
                if inner:
                    ranges.append((min(p.start for p in inner), max(p.end for p in inner)))
            if len(ranges) > 1:
                out.append(ranges)
    return out


def exclusive(apart: list[list[tuple[int, int]]], point: int, use: int) -> bool:
    """Whether ``point`` and ``use`` lie in different branches of one if (never both run)."""
    for ranges in apart:
        a = next((i for i, (lo, hi) in enumerate(ranges) if lo <= point <= hi), None)
        b = next((i for i, (lo, hi) in enumerate(ranges) if lo <= use <= hi), None)
        if a is not None and b is not None and a != b:
            return True
    return False


def use_position(user: Op, v: Value, pos: dict[Op, Position]) -> int:
    """Where a use keeps ``v`` alive until: the user, or the end of every loop around the user
    that ``v`` was defined outside of (the next trip needs it again)."""
    at = pos[user].start
    block = user.parent
    while block is not None and block.parent is not None:
        enclosing = block.parent
        if isinstance(enclosing, For) and not _inside(v, enclosing) and enclosing in pos:
            at = max(at, pos[enclosing].end)
        if enclosing not in pos:
            break
        block = enclosing.parent
    return at


def _inside(v: Value, loop: For) -> bool:
    owner = v.owner
    while owner is not None:
        if owner is loop:
            return True
        if isinstance(owner, Op):
            owner = owner.parent
        else:  # a Block
            owner = owner.parent
    return False

