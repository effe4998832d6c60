"""A row block the consumers fill themselves (warp-spec's ``fill = "cp.async"``; the protocol's
``CopyFill`` step) in the general lowering of a kernel with no matrix product.

No producer, no mbarrier, no tensor map: every consumer thread copies its 16-byte pieces of the
block with ``cp.async.cg`` (zero-filled past the tensor) through the register-tile backend's
copy (``globalmem.copy_in``), into that backend's row-XOR layout (``smem.Geometry``) at the
offset smem-plan gave the load; then, as the step, ``cp.async.wait_all`` (each thread's own
copies have landed) and the consumers' named barrier (every thread's have). A block stream-cols
marked ``wait = deferred`` (``CopyFill(wait = False)``) leaves its copies in flight beside the
work that does not read it -- the next block's copies, the first chunk's loads straight from
global memory and their row sums -- and the ``FillWait`` step before its first reader waits and
meets instead (``ConsumerRole.fill_wait``), as the register-tile backend waits for its deferred loads. ``copy_cols`` of
the block is then the register-tile backend's reader of that layout (``emit_copy_cols``), with
no barrier of its own: the step's meeting ordered the only write of the block (one tile per
CTA: warp-spec's ``consumer_fill``).
"""
from __future__ import annotations

from ..emit_copy_cols import read_chunk
from ..globalmem import GlobalView, copy_in
from ..smem import Geometry
from ..values import SharedTile


def emit_copy_fill(role, op) -> list[str]:
    """The copies of ``op``, the load of the block a ``CopyFill`` step stands for (the step itself,
    its wait and meeting where it waits, is ``ConsumerRole.copy_fill``)."""
    ctx, t = role.ctx, op.result.type
    out: list[str] = []
    view = GlobalView(ctx, op.operands[0], op.variadic(), t.rows, t.cols, out)
    tile = SharedTile(t, Geometry.of_tile(t), op.attrs["smem"])
    copy_in(ctx, view, tile.geometry, tile.offset, out, wait=False)
    ctx.bind(op.result, tile)
    return out


def is_filled(ctx, op) -> bool:
    """Whether ``op`` (a copy_cols) reads a block the consumers filled (bound to a SharedTile)."""
    return isinstance(ctx.values.get(id(op.operands[0])), SharedTile)


def emit_filled_copy_cols(ctx, op) -> list[str]:
    """A chunk of a block the consumers filled: the register-tile backend's reader, no barrier."""
    return read_chunk(ctx, op, hazards=False)


__all__ = ["emit_copy_fill", "emit_filled_copy_cols", "is_filled"]
