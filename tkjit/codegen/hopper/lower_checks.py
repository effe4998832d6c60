"""What the general lowering's consumers can take (``consumer_refusal``: None or a Refusal naming
the op and why), and how a product's operands lie in shared memory for wgmma (``a_operand``,
``b_operand``, ``wgmma_n``), which the consumer role uses to emit it."""
from __future__ import annotations

from ...ir.core import Op
from ...ir.ops import MMA_OPS, REDUCE_OPS, Copy, For, If, Load, Store, Yield
from ...ir.types import BF16, F16, F32, TileType
from ...passes.hopper import is_shared, swizzle_bytes, wgmma_n
from . import wgmma
from .lower import MMA_DTYPES


def consumer_refusal(op: Op, consumers: int, in_ring_loop: bool, users: dict[int, list[Op]],
                     at_tile: bool = False):
    """None when the consumer emitters take ``op`` (and everything inside it); else a Refusal.
    ``consumers``: the consumer warpgroups sharing each tile's rows (1 with ping-pong);
    ``at_tile``: ``op`` stands directly in the block body (a product there reads tiles loaded once
    per tile: the protocol's ``TileProduct``)."""
    from .lower import Refusal
    if isinstance(op, Yield):
        return None
    if op.NAME == "copy_cols":
        from .lower_copy_cols import copy_cols_refusal
        return copy_cols_refusal(op)
    if isinstance(op, Load):
        t = op.result.type
        if is_shared(op.result):
            return None  # a one-shot ring (the producer's); the mbarrier pass placed it
        if isinstance(t, TileType) and t.dtype not in (BF16, F16, F32):
            return Refusal(op, f"{t.dtype} register tiles are not lowered yet")
        return None
    if isinstance(op, Store):
        v = op.operands[1]
        if is_shared(v):
            return Refusal(op, "a shared tile stored to global memory (a TMA store from a consumer "
                               "is not lowered yet); store a register tile")
        return None
    if isinstance(op, Copy):
        from .lower_shared_store import tile_write_refusal
        from .lower_tile_read import is_tile_read, tile_read_refusal
        return tile_read_refusal(op) if is_tile_read(op) else tile_write_refusal(op, in_ring_loop, users)
    if isinstance(op, tuple(c for c in REDUCE_OPS if c.AXIS == "col")):
        return Refusal(op, "a column reduction combines the warps of every consumer through shared "
                           "memory, which the general lowering does not plan yet")
    if isinstance(op, MMA_OPS):
        return _mma_refusal(op, consumers, in_ring_loop, users, at_tile)
    if isinstance(op, (For, If)):
        for region in op.regions:
            for inner in region.ops:
                if isinstance(inner, MMA_OPS):
                    return Refusal(inner, "a matrix product outside the loop that streams its "
                                          "operands (its wgmma would not be a protocol step)")
                why = consumer_refusal(inner, consumers, False, users)
                if why is not None:
                    return why
        return None
    for v in list(op.results):
        t = v.type
        if isinstance(t, TileType) and t.space == "rt" and t.dtype not in (BF16, F16, F32):
            return Refusal(op, f"{t.dtype} register tiles are not lowered yet")
    return None


def _mma_refusal(op: Op, consumers: int, in_ring_loop: bool, users: dict[int, list[Op]], at_tile: bool = False):
    from .lower import Refusal
    from ...passes.mbarrier import is_tile_write
    a, b = op.operands[0], op.operands[1]
    if at_tile:  # a product of tiles loaded once per tile (one-shot rings), outside any loop
        once = [v for v in (a, b) if is_shared(v)]
        if not all(isinstance(v.owner, Load) and v.owner.parent is op.parent for v in once):
            return Refusal(op, "a product outside any loop reads shared tiles the producer loads once "
                               "per tile, in the block body (a tile the consumers write there is not "
                               "lowered yet)")
    elif not in_ring_loop:
        return Refusal(op, "a matrix product inside a loop that streams no operands or an 'if' "
                           "(its wgmma would not be a protocol step)")
    if not is_shared(b) or not (isinstance(b.owner, Load) or is_tile_write(b.owner)):
        return Refusal(op, "B must be a shared tile the producer loads or the consumers write "
                           "(wgmma reads B from shared memory)")
    if is_shared(a) and not (isinstance(a.owner, Load) or is_tile_write(a.owner)):
        return Refusal(op, "A must be a shared tile the producer loads or the consumers write, or "
                           "a register tile")
    if not is_shared(a) and op.NAME not in ("mma_AB", "mma_ABt"):
        return Refusal(op, f"{op.NAME} with A in registers: wgmma's register A is [M, K] (mma_AB, "
                           "mma_ABt)")
    if a.type.dtype != b.type.dtype or a.type.dtype not in MMA_DTYPES:
        return Refusal(op, f"{a.type.dtype} x {b.type.dtype} products: the general lowering emits "
                           "wgmma of two bf16, f16, e4m3 or e5m2 operands")
    if a.type.dtype.name in wgmma.FP8 and (op.NAME != "mma_ABt" or not is_shared(a)):
        return Refusal(op, f"{op.NAME} of fp8 tiles: fp8 wgmma reads both operands K-major from "
                           "shared memory, so write mma_ABt with B stored [N, K] (transposes for "
                           "the other forms are not arranged yet)")
    t = op.result.type
    if t.dtype != F32:
        return Refusal(op, "accumulators other than f32 are not lowered yet")
    if t.rows % (64 * consumers):
        return Refusal(op, f"a {t.rows}-row accumulator does not split into 64-row slabs over "
                           f"{consumers} consumer warpgroups")
    if wgmma_n(t.cols, b_operand(op).panel_cols if b_operand(op).major == "MN" else 8) is None:
        return Refusal(op, f"{t.cols} accumulator columns do not split into wgmma widths")
    if len(op.operands) > 2:
        acc = op.operands[2]
        if [u for u in users.get(id(acc), []) if u is not op and not _reads_before(u, op, users)]:
            return Refusal(op, f"the accumulator %{acc.hint} is read after the product (wgmma "
                               "updates it in place)")
    return None


def _reads_before(user: Op, op: Op, users: dict[int, list[Op]]) -> bool:
    """``user`` runs before ``op`` in the same block (the consumers emit a block's ops in program
    order), so it read the accumulator's registers before the wgmma updates them in place; and
    nothing after ``op`` reads a register value made from it (one may share the accumulator's
    registers: a cvt to the same dtype binds the same ones). A shared tile written from it (a
    copy) holds its own bytes."""
    block = getattr(op, "parent", None)
    ops = getattr(block, "ops", None)
    if not ops or user not in ops:
        return False
    at = ops.index(op)
    if ops.index(user) > at:
        return False
    derived = [r for r in user.results if not is_shared(r)]
    seen = set()
    while derived:
        v = derived.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        for u in users.get(id(v), []):
            if u is op:
                return False
            if u not in ops or ops.index(u) > at:
                return False
            derived += [r for r in u.results if not is_shared(r)]
    return True


def users_of(kernel) -> dict[int, list[Op]]:
    """id(value) -> the ops reading it (for the in-place accumulator rule)."""
    users: dict[int, list[Op]] = {}
    for op in kernel.walk():
        for x in op.operands:
            users.setdefault(id(x), []).append(op)
    return users


def a_operand(op):
    """How A lies in shared memory: K-major [M, K] for mma_AB/ABt, MN-major [K, M] for AtB/AtBt."""
    t = op.operands[0].type
    span = swizzle_bytes(t)
    if op.NAME in ("mma_AB", "mma_ABt"):
        return wgmma.Operand("K", t.rows, t.cols, span, t.dtype.nbytes)
    return wgmma.Operand("MN", t.rows, t.cols, span, t.dtype.nbytes)


def b_operand(op):
    """How B lies: MN-major [K, N] for mma_AB/AtB, K-major [N, K] for mma_ABt/AtBt."""
    t = op.operands[1].type
    span = swizzle_bytes(t)
    if op.NAME in ("mma_AB", "mma_AtB"):
        return wgmma.Operand("MN", t.rows, t.cols, span, t.dtype.nbytes)
    return wgmma.Operand("K", t.rows, t.cols, span, t.dtype.nbytes)


MAX_SPLIT = 8
"""The portable cluster size: a split tile's CTAs form one cluster."""


def split_part_registers(acc_type: TileType, consumers: int) -> int:
    """f32 accumulator registers per consumer thread: what split-K cuts into parts."""
    return acc_type.rows * acc_type.cols // (128 * consumers)


def split_refusal(kernel, schedule, consumers: int):
    """None when split-K (the block loop's ``split``) can be lowered: one ring loop carrying one
    f32 accumulator from ``zeros()``, read in the loop only as its last product's accumulator,
    and after the loop only elementwise ops of the accumulator's shape ending in stores of it
    (each CTA computes the whole tile but stores only its part, so nothing may mix parts); the
    parts are whole 8-column groups and the partials fit over the ring. Else a Refusal."""
    from ...ir.ops import BINARY_OPS, BROADCAST_OPS, UNARY_OPS, Cvt, Zeros
    from ...passes.hopper import block_loop
    from ...passes.mbarrier import in_flight
    from .lower import Refusal
    blocks = block_loop(kernel)
    split = schedule.split
    loop = schedule.split_loop
    if split > MAX_SPLIT:
        return Refusal(blocks, f"split = {split}: a split tile is one cluster, at most {MAX_SPLIT} CTAs")
    if loop is None:
        return Refusal(blocks, "split-K needs a ring loop with a matrix product in the block body")
    if kernel.attrs.get("pingpong"):
        return Refusal(blocks, "ping-pong consumers alternate over a CTA's tiles; split-K gives a CTA one tile")
    if len(schedule.protocol.rings) != 1:
        return Refusal(blocks, "split-K reuses the one ring of its loop for the partials; this tile "
                               "has other shared tiles")
    carried = list(loop.variadic())
    if len(carried) != 1 or not isinstance(carried[0].type, TileType) or carried[0].type.dtype != F32:
        return Refusal(loop, "split-K adds the loop's partial results: it must carry exactly one "
                             "f32 accumulator tile")
    if not isinstance(carried[0].owner, Zeros):
        return Refusal(loop, "split-K adds every CTA's partial: the accumulator must start from zeros()")
    mmas = [op for op in loop.regions[0].ops if isinstance(op, MMA_OPS)]
    if mmas and not is_shared(mmas[-1].operands[0]):
        return Refusal(mmas[-1], "split-K keeps the loop's last product in flight from trip to trip, and "
                                 "this one reads a register A made in the trip, which split-K's protocol "
                                 "does not hold: its A must be a shared tile")
    if not mmas or not in_flight(loop) or mmas[-1].operands[2] is not loop.regions[0].args[1]:
        return Refusal(loop, "split-K adds the loop's partial results: the loop may use its "
                             "carried tile only as the accumulator of its last product")
    acc_t: TileType = carried[0].type
    ops = [op for op in blocks.regions[0].ops if not isinstance(op, Yield)]
    derived = set(map(id, loop.results))
    for op in ops[ops.index(loop) + 1:]:
        reads = any(id(x) in derived for x in op.operands)
        if isinstance(op, Store):
            v = op.operands[1]
            if id(v) not in derived:
                return Refusal(op, "with split-K every CTA of a cluster runs the tile's other ops: "
                                   "only stores of the split accumulator (each CTA its part) are lowered")
            continue
        if isinstance(op, (For, If)):
            return Refusal(op, "split-K: control flow after the split loop is not lowered yet")
        if not reads:
            continue
        if not isinstance(op, (*BINARY_OPS, *UNARY_OPS, *BROADCAST_OPS, Cvt)):
            return Refusal(op, "after a split loop each CTA holds the sum of only its part of the "
                               "accumulator: only elementwise ops may read it")
        t = op.result.type
        if not isinstance(t, TileType) or (t.rows, t.cols) != (acc_t.rows, acc_t.cols):
            return Refusal(op, "after a split loop only elementwise ops of the accumulator's shape may read it")
        derived.add(id(op.result))
    for op in ops[:ops.index(loop)]:
        if any(isinstance(inner, Store) for inner in op.walk()):
            return Refusal(op, "with split-K every CTA of a cluster runs the tile's ops: only stores "
                               "of the split accumulator are lowered")
    regs = split_part_registers(acc_t, consumers)
    if (regs // 4) % split:
        return Refusal(loop, f"split = {split}: each consumer thread's {regs} accumulator registers "
                             f"do not part into {split} runs of whole 8-column groups")
    ring = schedule.protocol.rings[0]
    need = split_reduce_bytes(acc_t, consumers, split)
    have = ring.stages * loop.attrs["stage_stride"]
    if need > have:
        return Refusal(loop, f"split = {split}: the partials ({need} B) do not fit over the {have}-byte ring")
    return None


def split_reduce_bytes(acc_type: TileType, consumers: int, split: int) -> int:
    """Shared memory a CTA of a split tile receives: one slot per other CTA of the cluster, each
    1/split of every consumer thread's accumulator registers."""
    return (split - 1) * consumers * 128 * (split_part_registers(acc_type, consumers) // split) * 4


__all__ = ["consumer_refusal", "users_of", "wgmma_n", "a_operand", "b_operand", 
           "split_refusal", "split_part_registers", "split_reduce_bytes", "MAX_SPLIT"]
