"""The shared-memory buffers of a warp-specialized kernel and when each one is in use.

    ring      a pipelined loop's stages: ``stages`` x ``stride`` bytes (its loads side by side
              in each stage, each slot aligned: 1024 B when swizzled, else 128 B)
    tile      a shared tile loaded once per tile (outside any loop; ``slots`` copies of it, used
              tile after tile, where the pipeline pass gave it two) or written by a copy
    staging   the shared tile an epilogue stores a register tile through (stmatrix, then one
              TMA store): the whole tile, or chunks of 64 rows x ``cols`` columns per consumer
              (a round of 128-byte panels; one panel unless smem-plan widens the round) that
              the consumer reuses round after round

Lifetimes are ranges of the block body's program order (``hopper.positions``). In a persistent
kernel rings and once-per-tile tiles live for the whole tile (the producer fills them for the
next tile while consumers finish this one); otherwise a ring lives for its loop and a tile
from its load to its last use. A staging tile lives from its store to the end of the tile
(the TMA store reads it asynchronously), unless the pipeline pass put it in the bytes of a tile
loaded once per tile (the store's ``staging_in``: ``staging_host``), which it then shares (``within``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import PassError
from ..ir.core import Kernel, Op, Value
from ..ir.ops import For, Load, Store
from ..ir.types import TileType
from .decisions import subject_of
from .hopper import (SWIZZLE_ALIGN, TMA_ALIGN, block_loop, ceil_to, one_shot_loads, pipelined_loops,
                     positions, shared_copies, shared_loads, stores_of_register_tiles,
                     swizzle_for_row_bytes, tile_align)
from .liveness import use_position

CHUNK_ROWS, CHUNK_ROW_BYTES = 64, 128


@dataclass
class Buffer:
    """One shared-memory buffer to place: its size, alignment and lifetime (in op order)."""

    kind: str            # "ring" | "tile" | "staging"
    op: Op               # the For, Load, Copy or Store it belongs to
    size: int
    align: int
    start: int
    end: int
    detail: str = ""
    lifetime: str = ""
    within: Op | None = None
    """The one-shot load whose bytes this (staging) buffer shares (``staging_host``): it takes no
    bytes of its own; smem-plan places it at that tile's offset."""

    @property
    def name(self) -> str:
        what = {"ring": "ring of", "tile": "tile", "staging": "staging tile of"}[self.kind]
        subject = subject_of(self.op.result) if self.kind == "tile" else subject_of(self.op)
        return f"{what} {subject}"

    def overlaps_in_time(self, other: "Buffer") -> bool:
        return self.start <= other.end and other.start <= self.end


def staging_host(kernel: Kernel, store: Store) -> Load | None:
    """The tile loaded once per tile in whose one slot the pipeline pass put ``store``'s staging
    (the store's ``staging_in``: its index among the block body's one-shot loads), or None."""
    index = store.attrs.get("staging_in")
    if index is None:
        return None
    once = one_shot_loads(kernel)
    if not isinstance(index, int) or not 0 <= index < len(once):
        raise PassError(f"staging_in = {index!r} names no tile loaded once per tile (there are "
                        f"{len(once)})", store.span)
    return once[index]


def fits_in(host: Load, size: int, align: int) -> bool:
    """Whether a staging of ``size`` bytes aligned to ``align`` fits one slot of ``host``."""
    return size <= host.result.type.nbytes and tile_align(host.result.type) % align == 0


def stage_slots(loop: For) -> list[tuple[Load, int]]:
    """Each load of the loop with its byte offset inside one stage."""
    out, at = [], 0
    for ld in shared_loads(loop.regions[0]):
        at = ceil_to(at, tile_align(ld.result.type))
        out.append((ld, at))
        at += ld.result.type.nbytes
    return out


def stage_stride(loop: For) -> int:
    slots = stage_slots(loop)
    last, at = slots[-1]
    align = max(tile_align(ld.result.type) for ld, _ in slots)
    return ceil_to(at + last.result.type.nbytes, align)


def slot_stride(load: Load) -> int:
    """Bytes between the slots of a tile loaded once per tile (the pipeline pass's ``slots``):
    the tile rounded up to its alignment."""
    return ceil_to(load.result.type.nbytes, tile_align(load.result.type))


def one_shot_bytes(load: Load, slots: int | None = None) -> int:
    """The shared bytes of a tile loaded once per tile, all its slots."""
    slots = load.attrs.get("slots", 1) if slots is None else slots
    return load.result.type.nbytes if slots == 1 else slots * slot_stride(load)


def stage_data_bytes(loop: For) -> int:
    """What the loop's loads bring per trip: the expect-tx bytes of a stage."""
    return sum(ld.result.type.nbytes for ld in shared_loads(loop.regions[0]))


def panel_cols(store: Store) -> int:
    """Columns of the stored tile in one 128-byte panel row (64 for a 16-bit destination)."""
    return max(1, CHUNK_ROW_BYTES // store.operands[0].type.dtype.nbytes)


def round_widths(store: Store) -> list[int]:
    """The chunk widths (columns per round) a store can stage, widest first: whole panels that
    divide the tile's columns."""
    step, cols = panel_cols(store), store.operands[1].type.cols
    return [c for c in range(cols - cols % step, 0, -step) if cols % c == 0] or [step]


def staging_sizes(store: Store, consumers: int, cols: int | None = None,
                  whole_tiles: bool = False) -> dict[str, tuple[int, int]]:
    """The staging forms of a register-tile store: name -> (bytes, alignment). A chunk is 64
    rows x ``cols`` columns per consumer (one 128-byte panel when ``cols`` is None).
    ``whole_tiles`` (ping-pong consumers, each storing whole tiles of its own, possibly at the
    same time): every consumer has its own staging of all the tile's rows."""
    t: TileType = store.operands[1].type
    out_bytes = store.operands[0].type.dtype.nbytes
    whole = t.rows * t.cols * out_bytes
    align = SWIZZLE_ALIGN if swizzle_for_row_bytes(t.cols * out_bytes) else TMA_ALIGN
    chunk_row = CHUNK_ROW_BYTES if cols is None else cols * out_bytes
    if whole_tiles:
        return {"tile": (consumers * whole, SWIZZLE_ALIGN),
                "chunks": (consumers * min(whole, t.rows * chunk_row), SWIZZLE_ALIGN)}
    return {"tile": (whole, align),
            "chunks": (min(whole, consumers * CHUNK_ROWS * chunk_row), SWIZZLE_ALIGN)}


def buffers(kernel: Kernel, stages: dict[For, int], staging: dict[Store, str],
            consumers: int, widths: dict[Store, int] | None = None) -> list[Buffer]:
    """Every buffer with its size, alignment and lifetime (``stages`` per pipelined loop,
    ``staging`` form per register-tile store, ``widths``: columns per chunk round where wider
    than one panel)."""
    body = block_loop(kernel).regions[0]
    pos = positions(body)
    last = max((p.end for p in pos.values()), default=0)
    persistent = block_loop(kernel).attrs.get("schedule") == "persistent"
    out: list[Buffer] = []
    for loop in pipelined_loops(kernel):
        p = pos[loop]
        span = (0, last) if persistent else (p.start, p.end)
        slots = ", ".join(f"{subject_of(ld.result)} at +{at:,}" for ld, at in stage_slots(loop))
        out.append(Buffer("ring", loop, stages[loop] * stage_stride(loop), SWIZZLE_ALIGN, *span,
                          f"{stages[loop]} stages x {stage_stride(loop):,} B ({slots})",
                          "in use all tile long: the producer fills the next tile's stages "
                          "early" if persistent else "in use while its loop runs"))
    for op in [*one_shot_loads(kernel), *shared_copies(kernel)]:
        t = op.result.type
        own = _value_span(op.result, pos)
        if isinstance(op, Load):
            # the producer's TMA may land it any time in the tile, ahead of the consumers (a load
            # written after a ring loop is issued while the loop's last stages are still read):
            # its bytes are taken from the tile's start, never lent by a ring
            span = (0, last) if persistent else (0, own[1])
        else:
            span = _in_loop(op, own, body, pos)
        slots = op.attrs.get("slots", 1) if isinstance(op, Load) else 1
        size = one_shot_bytes(op) if isinstance(op, Load) else t.nbytes
        out.append(Buffer("tile", op, size, tile_align(t), *span,
                          str(t) if slots == 1 else f"{slots} slots x {slot_stride(op):,} B of {t}",
                          "in use all tile long (persistent)" if span[0] == 0 and persistent
                          else "in use while its loop runs: written again every trip" if span != own
                          else "in use from its definition to its last use"))
    for store in stores_of_register_tiles(kernel):
        form = staging[store]
        cols = (widths or {}).get(store)
        pingpong = bool(kernel.attrs.get("pingpong"))
        size, align = staging_sizes(store, consumers, cols, pingpong)[form]
        row = CHUNK_ROW_BYTES if cols is None else cols * store.operands[0].type.dtype.nbytes
        rows = store.operands[1].type.rows if pingpong else CHUNK_ROWS
        detail = ((f"the whole tile{f' for each of {consumers} ping-pong consumers' if pingpong else ''}")
                  if form == "tile" else f"{consumers} x {rows} rows x {row} B, reused chunk by chunk")
        start, _ = _in_loop(store, (pos[store].start, last), body, pos)
        host = staging_host(kernel, store)
        lifetime = ("in the bytes of tile " + subject_of(host.result) + ", dead after its last "
                    "product; its slot is released once the TMA store has read the staging"
                    if host is not None else "in use from the store to the end of the tile")
        out.append(Buffer("staging", store, size, align, start, last, detail, lifetime, host))
    return out


def _in_loop(op: Op, span: tuple[int, int], body, pos) -> tuple[int, int]:
    """A buffer written inside a loop is written again every trip: it lives across the loop's
    back edge, so at least over the whole loop (the block-body op that holds it)."""
    outer = next((top for top in body.ops if top is not op and pos[top].start <= pos[op].start <= pos[top].end), None)
    if outer is None or not isinstance(outer, For):
        return span
    return min(span[0], pos[outer].start), max(span[1], pos[outer].end)


def _value_span(v: Value, pos) -> tuple[int, int]:
    start = pos[v.owner].start
    end = start
    for op in pos:
        if v in op.operands:
            end = max(end, use_position(op, v, pos))
    return start, end

