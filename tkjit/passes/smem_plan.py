"""smem-plan: where every shared buffer lives, within 232,448 bytes.

Buffers (``smem_buffers``) are placed largest first at the lowest offset that is aligned (1,024
bytes for swizzled tiles, 128 for other TMA targets) and clashes with no buffer in use at the
same time, so a buffer that is dead by then is reused: in a kernel that is not persistent, an
epilogue staging tile goes over the input ring once its loop is done. An epilogue stages its
whole tile when that fits, else chunks of 64 rows per consumer, as many 128-byte panels wide as
fit (a wider round means fewer stmatrix/TMA-store rounds; 1,024 B are left for the kernel to
round its shared base up to a swizzle boundary) -- the Hopper emitter stages exactly this. The
chunk width goes on the store as ``staging_cols`` (``epilogue=chunks``: one panel). The mbarrier words follow
(8 bytes each: full[s] and empty[s] per stage of every ring, a pair per once-per-tile load).

Records ``smem`` on loads, copies and stores (stage 0's slot for a ring), ``stage_stride`` and
``bars`` on pipelined loops, ``bars`` (and with two slots ``slot_stride``) on once-per-tile loads,
``staging`` (and for chunks ``staging_cols``) on stores, and the kernel's ``smem`` (dynamic
shared bytes); the map goes to the decision log one row per buffer.
Over the limit, a PassError names the largest buffers.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import PassError
from ..ir.core import Kernel
from ..ir.ops import For, Store
from .hopper import (MBARRIER_BYTES, SMEM_LIMIT, SWIZZLE_ALIGN, ceil_to, nbytes, one_shot_loads, pipelined_loops,
                     stores_of_register_tiles)
from .decisions import subject_of
from .manager import Pass, PassContext, register_pass
from .smem_buffers import Buffer, buffers, fits_in, round_widths, slot_stride, stage_slots, stage_stride

EPILOGUES = ("auto", "tile", "chunks")


def has_product(kernel: Kernel) -> bool:
    from ..ir.ops import MMA_OPS
    return any(isinstance(op, MMA_OPS) for op in kernel.walk())


def unstageable(store: Store, consumers: int, grid) -> str:
    """Why no staging can serve ``store`` wherever it is placed ('' when one can), its register
    tile held on the consumers' warp grid ``grid`` (``lower_layout.consumer_grid``)."""
    from ..ir.types import BF16, F16, F32
    from .epilogue import PANEL_COLS
    t, g = store.operands[1].type, store.operands[0].type
    if grid.contiguous_cols:
        return "its consumers hold it in the contiguous column order (16 bytes a lane straight to global memory)"
    if g.dtype not in (BF16, F16) or t.dtype not in (BF16, F16, F32):
        return f"a store of {t} to {g.dtype.name} (staging takes 16-bit tensors)"
    if t.cols % PANEL_COLS:
        return f"{t.cols} columns are not whole {PANEL_COLS}-column panels"
    if t.rows % (64 * consumers):
        return f"{t.rows} rows are not 64-row slabs of every one of {consumers} consumer(s)"
    rows, cols = grid.row_split(t.rows), grid.col_split(t.cols)
    if cols.warp_span > 1 or rows.groups < rows.warp_span or rows.per_warp > 1 and not rows.interleave:
        # the staging's stmatrix writes band u of warp w at row 64u + 16w, every column: a wgmma
        # accumulator's rows (lower_epilogue._packed), not these
        return (f"its consumers' {grid.wr}x{grid.wc} warps hold {rows.per_warp} band(s) of 16 rows each "
                f"{'and split its columns' if cols.warp_span > 1 else 'in a run'}, not a warpgroup's "
                "64-row slabs, which the staging's stmatrix writes")
    return ""


@dataclass
class Placement:
    """A buffer at its byte offset in shared memory."""

    buffer: Buffer
    offset: int

    @property
    def end(self) -> int:
        return self.offset + self.buffer.size


def place(bufs: list[Buffer], reuse: bool) -> list[Placement]:
    """First fit, largest first; buffers in use at the same time never share bytes, but a staging
    the pipeline pass put in a one-shot tile's slot (``within``) goes at that tile's offset."""
    placed: list[Placement] = []
    for b in sorted((b for b in bufs if b.within is None), key=lambda b: (-b.size, b.start)):
        offset = 0
        while True:
            offset = ceil_to(offset, b.align)
            clash = next((p for p in placed
                          if (not reuse or p.buffer.overlaps_in_time(b))
                          and p.offset < offset + b.size and offset < p.end), None)
            if clash is None:
                break
            offset = clash.end
        placed.append(Placement(b, offset))
    for b in (b for b in bufs if b.within is not None):
        host = next(p for p in placed if p.buffer.op is b.within)
        if b.size > host.buffer.size or host.offset % b.align:
            raise PassError(f"smem-plan: the {b.name} ({nbytes(b.size)}, {b.align}-byte aligned) does "
                            f"not fit the {host.buffer.name} it was put in", b.op.span)
        placed.append(Placement(b, host.offset))
    return placed


def _fits_host(bufs: list[Buffer], store: Store) -> bool:
    """Whether ``store``'s staging fits the tile it was put in (always, when it has its own bytes)."""
    b = next(b for b in bufs if b.kind == "staging" and b.op is store)
    return b.within is None or fits_in(b.within, b.size, b.align)


@register_pass
@dataclass(frozen=True)
class SmemPlan(Pass):
    """The ``smem-plan`` pass: offsets of every shared buffer, dead-buffer reuse, mbarrier words,
    the 227 KB limit."""

    name = "smem-plan"
    summary = "offsets of every shared buffer, dead-buffer reuse, mbarrier words, the 227 KB limit"
    target_specific = True
    epilogue: str = "auto"
    """How register tiles are staged for their stores: auto (whole tile when it fits), tile, chunks."""
    reuse: bool = True
    """Let buffers whose lifetimes do not overlap share bytes."""

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        if self.epilogue not in EPILOGUES:
            raise PassError(f"smem-plan: epilogue must be {', '.join(EPILOGUES)}, got '{self.epilogue}'")
        loops = pipelined_loops(kernel)
        missing = [loop for loop in loops if "stages" not in loop.attrs]
        if missing:
            raise PassError("smem-plan: this loop has no stage count; run the pipeline pass first",
                            missing[0].span)
        stages = {loop: loop.attrs["stages"] for loop in loops}
        consumers = kernel.attrs.get("consumers", 1)
        self.no_staging(kernel, ctx, consumers)
        staging = self.staging_forms(kernel, stages, consumers)
        widths = self.chunk_widths(kernel, stages, staging, consumers)
        placed = place(buffers(kernel, stages, staging, consumers, widths), self.reuse)
        bars_at, total = _footprint(kernel, placed)
        if total > SMEM_LIMIT:
            raise self.too_big(kernel, placed, total)
        self.annotate(kernel, placed, staging, widths, bars_at)
        kernel.attrs["smem"] = total
        self.record(kernel, ctx, placed, bars_at, total)
        return kernel

    @staticmethod
    def no_staging(kernel: Kernel, ctx: PassContext, consumers: int) -> None:
        """In a kernel with no matrix product, a register-tile store that no staging can serve (its
        rows not in 64-row slabs of every consumer, a tensor that is not 16-bit, columns not whole
        64-column panels: ``epilogue.staging_columns``'s conditions), whose consumers hold it in
        the contiguous column order (16 bytes a lane straight to global memory) or whose warp grid
        does not hold it as a wgmma accumulator's slabs (the register-tile grid gives a warp a run
        of bands: staged, rows 16 .. 31 of a 128-row tile were stored from rows 32 .. 47) gets none: marked
        ``unstaged``, it takes no shared memory, which in such a memory-bound kernel sets how many
        CTAs an SM holds (RMSNorm at D = 1024: 8 KB of staging no store used, 5 CTAs an SM instead
        of 6). Kernels with a product keep their plan (their PTX is unchanged)."""
        if has_product(kernel):
            return
        from ..codegen.hopper.lower_layout import consumer_grid, consumer_warps
        grid = consumer_grid(kernel, consumer_warps(kernel))[0]
        for store in stores_of_register_tiles(kernel):
            why = unstageable(store, consumers, grid)
            if why:
                store.attrs["unstaged"] = True
                ctx.decide(subject_of(store), "from registers: no staging tile",
                           f"no matrix product, and {why}: the bytes would only cost CTAs an SM",
                           staging="registers")

    def staging_forms(self, kernel: Kernel, stages: dict[For, int], consumers: int) -> dict[Store, str]:
        stores = stores_of_register_tiles(kernel)
        if self.epilogue != "auto":
            return {s: self.epilogue for s in stores}
        forms = {s: "chunks" for s in stores}
        for store in stores:  # upgrade one store at a time while everything still fits
            trial = {**forms, store: "tile"}
            bufs = buffers(kernel, stages, trial, consumers)
            if not _fits_host(bufs, store):
                continue
            placed = place(bufs, self.reuse)
            if _footprint(kernel, placed)[1] <= SMEM_LIMIT:
                forms = trial
        return forms

    def chunk_widths(self, kernel: Kernel, stages: dict[For, int], staging: dict[Store, str],
                     consumers: int) -> dict[Store, int]:
        """Columns per round of each chunked store: one panel for ``epilogue=chunks``; in auto,
        the widest round that fits with room left to align the shared base (one store at a time)."""
        widths: dict[Store, int] = {}
        for store in [s for s in stores_of_register_tiles(kernel) if staging[s] == "chunks"]:
            options = round_widths(store)
            widths[store] = options[-1]
            if self.epilogue != "auto":
                continue
            for cols in options:
                trial = {**widths, store: cols}
                bufs = buffers(kernel, stages, staging, consumers, trial)
                if not _fits_host(bufs, store):
                    continue
                placed = place(bufs, self.reuse)
                if _footprint(kernel, placed)[1] + SWIZZLE_ALIGN <= SMEM_LIMIT:
                    widths = trial
                    break
        return widths

    def annotate(self, kernel: Kernel, placed: list[Placement], staging: dict[Store, str],
                 widths: dict[Store, int], bars_at: int) -> None:
        at = bars_at
        for p in placed:
            op = p.buffer.op
            if isinstance(op, For):
                for ld, slot in stage_slots(op):
                    ld.attrs["smem"] = p.offset + slot
                op.attrs["stage_stride"] = stage_stride(op)
            elif isinstance(op, Store):
                op.attrs["smem"] = p.offset
                op.attrs["staging"] = staging[op]
                if op in widths:
                    op.attrs["staging_cols"] = widths[op]
            else:
                op.attrs["smem"] = p.offset
                if op.attrs.get("slots", 1) > 1:
                    op.attrs["slot_stride"] = slot_stride(op)
        for loop in pipelined_loops(kernel):
            loop.attrs["bars"] = at
            at += MBARRIER_BYTES * 2 * loop.attrs["stages"]
        for ld in ringed(one_shot_loads(kernel)):
            ld.attrs["bars"] = at
            at += MBARRIER_BYTES * 2 * ld.attrs.get("slots", 1)

    def record(self, kernel: Kernel, ctx: PassContext, placed: list[Placement], bars_at: int,
               total: int) -> None:
        rows = []
        for p in sorted(placed, key=lambda p: p.offset):
            b = p.buffer
            shares = [q.buffer.name for q in placed if q is not p and q.buffer.within is None and q.offset < p.end
                      and p.offset < q.end and q.buffer.size >= b.size and q.offset <= p.offset]
            reason = f"{b.detail}; {b.lifetime}"
            if b.within is not None:
                ctx.decide(b.name, f"the bytes of tile {subject_of(b.within.result)}, dead after its last product",
                           f"pipeline{{staging=slot}} (staging_in): {b.detail}, within its "
                           f"{nbytes(b.within.result.type.nbytes)} at byte {p.offset:,}; the slot is "
                           "released at the end of the tile, once the TMA store has read the staging",
                           offset=p.offset, size=b.size, within=subject_of(b.within.result))
                rows.append({"buffer": b.name, "offset": p.offset, "size": b.size})
                continue
            if shares:
                reason += f"; reuses the bytes of the {', '.join(shares)}, dead by then"
            ctx.decide(b.name, f"bytes {p.offset:,} .. {p.end - 1:,} ({nbytes(b.size)}, "
                       f"{b.align}-byte aligned)", reason, offset=p.offset, size=b.size)
            rows.append({"buffer": b.name, "offset": p.offset, "size": b.size})
        if total > bars_at:
            ctx.decide("mbarriers", f"bytes {bars_at:,} .. {total - 1:,} ({nbytes(total - bars_at)})",
                       "full[s] and empty[s] for every stage of every ring, and a pair for every "
                       "tile loaded once per tile, 8 bytes each")
        ctx.decide(f"@{kernel.name}", f"{nbytes(total)} of dynamic shared memory",
                   f"{nbytes(SMEM_LIMIT - total)} under the {nbytes(SMEM_LIMIT)} limit",
                   smem=total, map=rows)

    def too_big(self, kernel: Kernel, placed: list[Placement], total: int) -> PassError:
        biggest = sorted(placed, key=lambda p: -p.buffer.size)[:3]
        named = "; ".join(f"the {p.buffer.name}: {nbytes(p.buffer.size)}"
                          + (f" ({p.buffer.detail})" if p.buffer.kind == "ring" else "")
                          for p in biggest)
        return PassError(f"@{kernel.name} needs {nbytes(total)} of shared memory; the limit is "
                         f"{nbytes(SMEM_LIMIT)}. Largest buffers: {named}. Lower @stages or use "
                         "smaller tiles", kernel.span)


def ringed(loads: list) -> list:
    """The loads of ``loads`` a ring's mbarriers guard: not those the consumers fill themselves
    (warp-spec's ``fill = "cp.async"``: no producer, no mbarrier)."""
    return [ld for ld in loads if ld.attrs.get("fill") != "cp.async"]


def _footprint(kernel: Kernel, placed: list[Placement]) -> tuple[int, int]:
    """(where the mbarrier words start, total bytes)."""
    bars_at = ceil_to(max((p.end for p in placed), default=0), MBARRIER_BYTES)
    words = 2 * (sum(loop.attrs["stages"] for loop in pipelined_loops(kernel))
                 + sum(ld.attrs.get("slots", 1) for ld in ringed(one_shot_loads(kernel))))
    return bars_at, bars_at + MBARRIER_BYTES * words
