"""Hopper (sm_90a) facts and the IR queries the scheduling passes share.

The numbers are from shared/docs/hopper-ptx-facts.md (checked on an H200: 232,448 bytes of
opt-in shared memory per block, 65,536 registers per block, setmaxnreg in [24, 256] by 8).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from ..errors import PassError
from ..frozen import Frozen
from ..ir.core import Block, Kernel, Op, Value
from ..ir.ops import Blocks, Copy, For, If, Load, Store, Yield
from ..ir.types import TileType

HOPPER_PIPELINE = ("mask-branch,scale-fold,tile-split,layout,row-sums,branch-tail,fuse-elementwise,grid,warp-spec,pipeline,smem-plan,own-trips,"
                   "reg-budget,epilogue,mbarrier")
"""The scheduling passes in the order each one's inputs require (tile-split before layout: the
tiles it halves are laid out as halves; row-sums after layout: it keeps
shares of wgmma-layout row sums; before branch-tail, which moves the sum into an if; fuse-elementwise
after the passes that rewrite the loop body and before grid and warp-spec, which count its registers; grid before warp-spec,
smem-plan and mbarrier: ping-pong, buffer lifetimes and the protocol depend on whether the
block loop is persistent; mbarrier after smem-plan: an epilogue that smem-plan puts over a ring
adds a consumer barrier to the protocol; own-trips before mbarrier: the loops it marks get
per-consumer trip counts in the protocol; epilogue after reg-budget: a deferred store must fit
the consumers' registers; mbarrier last: the protocol holds the epilogue's steps)."""

SMEM_LIMIT = 232_448          # opt-in dynamic shared memory per block
REGISTER_FILE = 65_536        # 32-bit registers per block
WARPGROUP = 128               # threads
MAX_THREADS = 1024
SETMAXNREG_MIN, SETMAXNREG_MAX = 24, 256
SWIZZLE_SPANS = (128, 64, 32)  # bytes, largest first
SWIZZLE_ALIGN = 1024          # a swizzle pattern repeats every 8 rows of 128 B: align to it
TMA_ALIGN = 128               # TMA shared-memory destinations
MBARRIER_BYTES = 8


def ceil_to(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def floor_to(x: int, multiple: int) -> int:
    return x // multiple * multiple


def nbytes(n: int) -> str:
    """``196,608 B`` -- byte counts as the decision log prints them."""
    return f"{n:,} B"


def threads_for(consumers: int, producer: bool = True) -> int:
    return WARPGROUP * (consumers + int(producer))


def entry_registers(threads: int) -> int:
    """Registers per thread at launch (``.maxnreg``): the file shared evenly, a multiple of 8."""
    return floor_to(min(255, REGISTER_FILE // threads), 8)


def register_pool(consumers: int) -> int:
    """What setmaxnreg may redistribute: every thread's registers at entry (with a producer)."""
    threads = threads_for(consumers)
    return entry_registers(threads) * threads


def has_producer(kernel: Kernel) -> bool:
    """A producer warpgroup exists to issue TMA loads of shared tiles; without any, none."""
    return bool(one_shot_loads(kernel) or pipelined_loops(kernel))


def consumer_registers(consumers: int, producer: int) -> int:
    """The most registers each consumer thread can get once the producer keeps ``producer``."""
    share = (register_pool(consumers) - WARPGROUP * producer) // (WARPGROUP * consumers)
    return min(SETMAXNREG_MAX, floor_to(share, 8))


MAX_WGMMA_N = 256
L2_BUDGET = 24 << 20
"""Bytes a heaviest-first tile order keeps in flight at once per chunk of tiles (the grid pass's
``heavy`` order: H100 L2 50 MB, H200 60 MB; the attention template's measured budget)."""


def wgmma_n(cols: int, atom: int = 8) -> int | None:
    """The widest wgmma N (a multiple of 8 up to 256, and of ``atom``: an MN-major B is read in
    whole swizzle atoms) that divides ``cols``: fewer, wider wgmmas per k16 step (176 key columns
    are one m64n176k16, not eleven m64n16k16). None when no width divides it."""
    for n in range(MAX_WGMMA_N, 7, -8):
        if cols % n == 0 and n % atom == 0:
            return n
    return None


def swizzle_for_row_bytes(row_bytes: int) -> int:
    """The largest swizzle span (128/64/32 B) dividing the row bytes, or 0 (no swizzle)."""
    return next((span for span in SWIZZLE_SPANS if row_bytes % span == 0), 0)


def swizzle_bytes(t: TileType) -> int:
    """A shared tile's swizzle span from its ``swizzle`` attribute (0 when none or unset)."""
    value = str(t.attr("swizzle", "none"))
    return 0 if value in ("none", "0B", "0") else int(value.rstrip("B"))


def tile_align(t: TileType) -> int:
    return SWIZZLE_ALIGN if swizzle_bytes(t) else TMA_ALIGN


def block_loop(kernel: Kernel) -> Blocks:
    for op in kernel.body.ops:
        if isinstance(op, Blocks):
            return op
    raise PassError(f"@{kernel.name} has no block loop: nothing to schedule", kernel.span)


def is_shared(v: Value) -> bool:
    return isinstance(v.type, TileType) and v.type.space == "st"


def shared_loads(block: Block) -> list[Load]:
    """The loads of shared tiles directly in ``block`` (not in nested regions)."""
    return [op for op in block.ops if isinstance(op, Load) and is_shared(op.result)]


def pipelined_loops(kernel: Kernel) -> list[For]:
    """Loops whose body loads shared tiles: each gets a ring of stages (in program order)."""
    return [op for op in kernel.walk() if isinstance(op, For) and shared_loads(op.regions[0])]


def one_shot_loads(kernel: Kernel) -> list[Load]:
    """Shared-tile loads of the block body itself: filled once per tile."""
    return shared_loads(block_loop(kernel).regions[0])


def walk_block(block: Block) -> Iterator[Op]:
    for op in block.ops:
        yield from op.walk()


def fill_in_flight(op: Op) -> bool:
    """A row block the consumers fill with cp.async (warp-spec's ``fill``) that stream-cols marked
    ``wait = deferred``: its copies stay in flight until the ``FillWait`` before its first reader
    (the protocol's ``CopyFill(wait = False)``; the mbarrier pass and interleave.py both ask)."""
    return isinstance(op, Load) and op.attrs.get("fill") == "cp.async" and op.attrs.get("wait") == "deferred"


def reads_any(op: Op, values) -> bool:
    """Whether ``op`` or an op in its regions reads one of ``values``."""
    return any(v in values for inner in op.walk() for v in inner.operands)


def check_supported_loads(kernel: Kernel) -> None:
    """Shared tiles arrive by TMA from the producer warpgroup, which follows the block body and
    the pipelined loops; a load it cannot see in advance (inside an if, or in a loop nested in a
    pipelined loop) is refused with a clear message."""
    placed = set(one_shot_loads(kernel))
    for loop in pipelined_loops(kernel):
        placed.update(shared_loads(loop.regions[0]))
    for op in kernel.walk():
        if isinstance(op, Load) and is_shared(op.result) and op not in placed:
            raise PassError("a shared-tile load must sit in the block body or directly in a "
                            "loop's body (the producer warpgroup issues it ahead of time); this "
                            "one is inside an if or a nested region", op.span)


def depends_on(v: Value, values: set, depth: int = 0) -> bool:
    """Whether ``v`` is computed from any of ``values`` (through the ops that define it, and for
    a result of an ``if`` or ``for``, through what its regions read)."""
    if v in values:
        return True
    op = v.owner
    if depth > 64 or not isinstance(op, Op):
        return False
    reads = list(op.operands)
    for region in op.regions:
        for inner in region.ops:
            reads += [x for x in inner.operands if x not in reads]
    return any(depends_on(x, values, depth + 1) for x in reads)


def carried_groups(kernel: Kernel) -> list[list[Value]]:
    """Values that must share one type because control flow carries one into another: a loop's
    init, body argument, yielded value and result; an if's yielded values and result."""
    parent: dict[Value, Value] = {}

    def find(v: Value) -> Value:
        while parent.get(v, v) is not v:
            v = parent[v]
        return v

    def union(a: Value, b: Value) -> None:
        ra, rb = find(a), find(b)
        if ra is not rb:
            parent[ra] = rb

    for op in kernel.walk():
        if isinstance(op, For):
            body = op.regions[0]
            yielded = body.terminator.operands if isinstance(body.terminator, Yield) else []
            for i, res in enumerate(op.results):
                for v in (op.variadic()[i], body.args[i + 1], yielded[i] if i < len(yielded) else None):
                    if v is not None:
                        union(res, v)
        elif isinstance(op, If):
            for region in op.regions:
                term = region.terminator
                for res, v in zip(op.results, term.operands if isinstance(term, Yield) else []):
                    union(res, v)
    groups: dict[Value, list[Value]] = {}
    members = dict.fromkeys([*parent, *parent.values()])  # a group's root is a value, never a key
    for v in members:
        groups.setdefault(find(v), []).append(v)
    return list(groups.values())


@dataclass(unsafe_hash=True)
class Position(Frozen):
    """Where an op sits in the block body's program order: [start, end] covers its regions."""

    start: int
    end: int


def positions(block: Block) -> dict[Op, Position]:
    """Pre-order numbering of every op under ``block``; a region op spans its contents."""
    out: dict[Op, Position] = {}
    counter = 0

    def visit(op: Op) -> None:
        nonlocal counter
        start = counter
        counter += 1
        for region in op.regions:
            for inner in region.ops:
                visit(inner)
        out[op] = Position(start, counter - 1)

    for op in block.ops:
        visit(op)
    return out


def stores_of_register_tiles(kernel: Kernel) -> list[Store]:
    """Stores of 2-D register tiles: the epilogues that stage through shared memory."""
    return [op for op in walk_block(block_loop(kernel).regions[0])
            if isinstance(op, Store) and isinstance(op.operands[1].type, TileType)
            and op.operands[1].type.space == "rt" and not op.attrs.get("unstaged")]


def shared_copies(kernel: Kernel) -> list[Copy]:
    return [op for op in kernel.walk() if isinstance(op, Copy) and is_shared(op.result)]
