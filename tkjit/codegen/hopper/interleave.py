"""Where a consumer's IR ops fall between the steps of its protocol program: the one rule both
the PTX emitter (lower_consumer.py) and the CPU executor of the schedule (interpreter/roles.py)
follow, so that what the CPU checks is what the GPU runs.

    for kind, step, op in interleave(ops, steps, anchor): ...

``anchor(step, ops)`` gives the index of the IR op a step stands for (a one-shot tile's full
``Wait``, the ``CopyFill`` of a tile the consumers fill (its load), the ``FillWait`` of such tiles
filled with their copies in flight (the first op reading one), a ring loop's ``IfTrips``, a
trip's ``Mma`` (its product) or ``Read`` (its copy of a ring tile into registers) or a product of
one-shot tiles, the ``ConsumerSync`` before a store staged
over a ring, split-K's ``ClusterReduce`` before the first op reading the loop's results) or None. A step anchored at op i comes after ops [.., i) and takes op i itself
(``"anchored"``); a step with no op of its own comes where it stands among the anchored ones (a
wait right after its wgmma), or, after the last of them, once every pending op has run (the
releases and waits that end a trip or a tile). The steps right before a held product
(``Mma(held=True)``: the previous group's wait and its stage's release) come right before it,
after the register work that makes its A. Items: ``("op", None, op)``, ``("step", step,
None)``, ``("anchored", step, op)``.
"""
from __future__ import annotations

from ...ir.core import Op
from ...ir.ops import MMA_OPS, For, Load, Yield
from ...passes.hopper import reads_any
from ...passes.sync_protocol import (ClusterExchange, ClusterReduce, ConsumerSync, HoldStore, IfHeld, IfTrips, Mma,
                                     MmaWait, NotFirst, Read, ScratchSync, StagedStore, StreamKFixup, TileWrite, CopyFill, FillWait, Wait)


def interleave(ops: list[Op], steps, anchor) -> list[tuple]:
    """(See the module.) Two steps may stand for one op (the ``ConsumerSync`` before a staged
    store over a ring, then its ``StagedStore``): the last of them takes it. An ``IfHeld`` (a
    held tile's stores, run under the wgmma group just issued) stays right after the step
    before it."""
    if hasattr(anchor, "start"):
        anchor.start()
    anchors = [anchor(step, ops) for step in steps]
    for n, step in enumerate(steps):  # a held product retires the group before it right before it
        if isinstance(step, Mma) and step.held and anchors[n] is not None:
            k = n - 1
            while k >= 0 and anchors[k] is None and isinstance(steps[k], (MmaWait, NotFirst)):
                anchors[k] = anchors[n]
                k -= 1
    placed = [a for a in anchors if a is not None]
    if placed != sorted(placed):
        raise AssertionError(f"internal: protocol steps anchored out of program order ({placed})")
    out: list[tuple] = []
    i = 0
    for n, (step, j) in enumerate(zip(steps, anchors)):
        if j is None:
            if out and out[-1][0] == "anchored" and (isinstance(step, IfHeld) or (
                    isinstance(step, MmaWait) and step.pending == 0 and isinstance(out[-1][1], Mma))):
                out.append(("step", step, None))  # stays with the step it follows
                continue
            if all(a is None for a in anchors[n + 1:]):
                out += [("op", None, op) for op in ops[i:]]
                i = len(ops)
            out.append(("step", step, None))
            continue
        out += [("op", None, op) for op in ops[i:j]]
        i = j
        if j in anchors[n + 1:]:  # a later step stands for this op too
            out.append(("step", step, None))
            continue
        out.append(("anchored", step, ops[j]))
        i = j + 1
    out += [("op", None, op) for op in ops[i:]]
    return out


def tile_anchor(ring_of_load: dict, loop_of: dict, staged_over_rings: list, store_of: dict | None = None,
                scratch_ops: list = ()):
    """The anchor of the tile body's steps (``loop_of``: ring -> its IR loop; the k-th
    ``ConsumerSync`` stands for the k-th store staged over a ring, the k-th ``Mma`` for the k-th
    product of the body (of tiles loaded once per tile), the k-th ``ScratchSync`` for the k-th op
    of ``scratch_ops``; ``store_of``: a staged store's name -> the IR store its ``StagedStore`` or
    ``HoldStore`` stands for). Counted afresh for every tile (``interleave`` calls ``start``)."""
    return _TileAnchor(ring_of_load, loop_of, list(staged_over_rings), store_of or {}, list(scratch_ops))


class _TileAnchor:
    def __init__(self, ring_of_load: dict, loop_of: dict, staged_over_rings: list, store_of: dict,
                 scratch_ops: list):
        self.ring_of_load, self.loop_of, self.staged, self.store_of = ring_of_load, loop_of, staged_over_rings, store_of
        self.scratch_ops = scratch_ops
        self.start()

    def start(self) -> None:
        self.syncs, self.products, self.scratch = iter(self.staged), None, iter(self.scratch_ops)
        self.filled = None
        self.in_flight: list = []  # the values of the blocks filled with their copies in flight

    def fills(self, ops: list[Op]):
        """The loads of ``ops`` the consumers fill (warp-spec's ``fill``), one per ``CopyFill``."""
        if self.filled is None:
            self.filled = iter([op for op in ops if isinstance(op, Load) and op.attrs.get("fill") == "cp.async"])
        return self.filled

    def __call__(self, step, ops: list[Op]) -> int | None:
        if isinstance(step, (StagedStore, HoldStore)):
            return ops.index(self.store_of[step.store])
        if isinstance(step, Mma):  # a product of one-shot tiles (TileProduct)
            if self.products is None:
                self.products = iter([i for i, op in enumerate(ops) if isinstance(op, MMA_OPS)])
            return next(self.products)
        if isinstance(step, Wait) and step.bar == "full":
            for i, op in enumerate(ops):
                if isinstance(op, Load) and self.ring_of_load.get(op) == step.ring:
                    return i
        if isinstance(step, CopyFill):  # the k-th for the k-th load the consumers fill
            load = next(self.fills(ops))
            if step.wait:  # its cp.async.wait_all lands the copies in flight too (mbarrier.py)
                self.in_flight = []
            else:
                self.in_flight.append(load.result)
            return ops.index(load)
        if isinstance(step, FillWait):  # the first op reading a block whose copies are in flight
            at = next((i for i, op in enumerate(ops) if reads_any(op, self.in_flight)), None)
            self.in_flight = []
            return at
        if isinstance(step, IfTrips):
            return ops.index(self.loop_of[step.ring])
        if isinstance(step, ConsumerSync):
            return ops.index(next(self.syncs))
        if isinstance(step, (ScratchSync, ClusterExchange)):  # (the exchange's op: mbarrier.Schedule.scratch_ops)
            return ops.index(next(self.scratch))
        if isinstance(step, (ClusterReduce, StreamKFixup)):
            return first_reader(ops, self.loop_of[step.ring])
        return None


def first_reader(ops: list[Op], loop: For) -> int | None:
    """The index of the first op after ``loop`` that reads one of its results (split-K's
    reduction comes right before it)."""
    return next((i for i in range(ops.index(loop) + 1, len(ops)) if reads_any(ops[i], loop.results)), None)


def trip_anchor(loop: For, store_of: dict | None = None):
    """The anchor of a trip's steps: the k-th ``Mma`` step is the k-th product of the loop body,
    the k-th ``TileWrite`` its k-th copy of a register tile into a shared tile, the k-th ``Read``
    its k-th copy of a ring tile into registers, a ``StagedStore`` its store."""
    from ...passes.mbarrier import is_tile_write, ring_reads
    order = iter([op for op in loop.regions[0].ops if isinstance(op, MMA_OPS)])
    writes = iter([op for op in loop.regions[0].ops if is_tile_write(op)])
    reads = iter(ring_reads(loop))
    store_of = store_of or {}

    def anchor(step, ops: list[Op]) -> int | None:
        if isinstance(step, StagedStore):
            return ops.index(store_of[step.store])
        if isinstance(step, TileWrite):
            return ops.index(next(writes))
        if isinstance(step, Read):
            return ops.index(next(reads))
        return ops.index(next(order)) if isinstance(step, Mma) else None
    return anchor


def body_ops(block) -> list[Op]:
    """A block's ops without its terminator."""
    return [op for op in block.ops if not isinstance(op, Yield)]


def level2_parts(loop: For):
    """A level-2 trip's IR (mbarrier.pipelined): (ops before the first product, the first
    product, the register work that does not read the carried tile, the ops that do -- up to the
    second product --, the second product)."""
    from ...passes.mbarrier import pipelined
    first, second, arg = pipelined(loop)
    ops = body_ops(loop.regions[0])
    chain = {arg}
    before, work, rescale = [], [], []
    seen_first = False
    for op in ops:
        if op is first:
            seen_first = True
            continue
        if op is second:
            continue
        if any(x in chain for x in op.operands):
            chain.update(op.results)
            rescale.append(op)
        elif seen_first:
            work.append(op)
        else:
            before.append(op)
    # the op that makes the second product's register A (cvt<bf16>(p)) runs after that product of
    # the previous trip is waited for: its registers are that product's input, and ptxas would
    # serialize the wgmmas (C7513) if it shared them with the held copy while the product runs
    maker = second.operands[0].owner
    if maker in work:
        work.remove(maker)
        rescale.insert(0 if loop.attrs.get("pack") == "first" else pack_at(maker, rescale), maker)
    return before, first, work, rescale, second


def pack_at(maker: Op, rescale: list) -> int:
    """Where the op making the second product's register A goes among the ops that read the
    carried tile: after every one of them that does not read its result (the rescale of the
    accumulator, mul_row(o, alpha), then the pack, cvt<bf16>(p)). The two are independent and
    ptxas keeps the order it is given; packed first (``mbarrier{pack=first}``, the loop's attr
    ``pack``), it alternated the packs with the rescale's FMULs in causal attention_nol D = 128
    and lost their operand reuse (passes/mbarrier.PACK_MEASURED)."""
    made = set(maker.results)
    return next((i for i, op in enumerate(rescale) if made & set(op.operands)), len(rescale))


def pipelined_trip(loop: For, steps) -> list[tuple]:
    """The items of a level-2 trip (sync_protocol.pipelined_loop's steps): the ops before the first
    product, the first product; the previous trip's second product and the waits; the register
    work (under that second product); its wait and the previous stage's release; the ops that
    read the carried tile (now final for the previous trip); then ``("hold", None, second)``:
    the second product's operands kept for the next trip (or the loop's end). Split rings
    (sync_protocol.split_loop) add the first ring's release before the work and the second
    ring's wait and advance, which are steps where they stand. A ``Read`` step stands for the
    trip's next copy of a ring tile into registers, taken out of the ops before the first product
    or out of the register work, where it stands (the ops before it come first)."""
    from ...passes.mbarrier import ring_reads
    from ...passes.sync_protocol import Advance, NotFirst, Release
    before, first, work, rescale, second = level2_parts(loop)
    out: list[tuple] = []
    held = False
    copies = iter(ring_reads(loop))

    def upto(ops: list, op) -> list[tuple]:
        """The items of the ops of ``ops`` before ``op``; those and ``op`` are taken out of it."""
        i = ops.index(op)
        items = [("op", None, o) for o in ops[:i]]
        del ops[:i + 1]
        return items
    for step in steps:
        if isinstance(step, Read):  # a ring tile read into registers: where its copy stands
            op = next(copies)
            out += upto(before if op in before else work, op)
            out.append(("anchored", step, op))
        elif isinstance(step, Mma) and step.which == "cur":
            out += [("op", None, op) for op in before]
            out.append(("anchored", step, first))
        elif isinstance(step, NotFirst) and any(isinstance(s, Release) for s in step.body):
            out += [("op", None, op) for op in work]
            out.append(("step", step, None))
        elif isinstance(step, Advance) and not held:  # (split rings: the first Advance)
            out += [("op", None, op) for op in rescale]
            out.append(("hold", None, second))
            out.append(("step", step, None))
            held = True
        else:
            out.append(("step", step, None))
    return out
