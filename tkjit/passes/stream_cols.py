"""stream-cols: run a row-wise block program over column chunks when a register tile of it is too
large for the register file.

A norm written over whole rows (``x: rt<f32>[BR, D] = X.tile(i, 0)``, then row reductions,
row/column broadcasts, elementwise maps and stores) needs BR x D registers per block; at D = 4096
and more that exceeds what one thread block may hold (``MAX_REGISTER_TILE_BYTES``). Every op of
such a program works on each column independently except the row reductions, so the program can
run chunk by chunk over the columns:

* the *wide* values are the register tiles of the too-large tile's width W and the row vectors
  of length W; ops that make them (loads, elementwise maps and arithmetic, conversions, fills,
  broadcasts, column reductions) are column-local, and so are stores of them;
* a row reduction of a wide tile is a *sink*: its chunks' partial results combine in a value
  carried through the chunk loop (sum: add, max: max, min: min; f32 only, so the carried value
  is exact to the program's own rounding per chunk);
* a wide op that reads a row reduction's result can only run after that reduction's loop: the
  program splits into *phases*, one loop over the chunks each; a wide value needed in a later
  phase is recomputed there from its loads (the loads are issued again: L2 usually holds them);
* ops on neither (scalars, column vectors) run between the loops, as soon as their inputs exist.

Chunk loads are shared-tile loads copied into registers (``loads=shared``, the default: the loop
pipeline fetches them ahead) or register-tile loads (``loads=registers``). The chunk width is the
widest power-of-two divisor of W (a multiple of 16) whose chunk tiles stay within CHUNK_BYTES.
A row block a later pass reads again can instead stay on chip (``cache``, stream_cache.py): loaded
once into a shared tile (its first chunks, as many as the budget holds), every pass copying its
chunks from there (``copy_cols``); ``cache=auto``, the default, takes that for every row-wise
program with such a re-read, even one whose register tiles fit (docs/codegen.md, "Keeping the row
block on chip"); a row block over that budget is first split over a cluster of CTAs, each taking a
column slice (``cluster=auto``, stream_cluster.py; "A row block split over a cluster"). What it
decided, and why a kernel it leaves alone cannot be streamed, is logged; the front end asks
``oversized_tile_problem`` whether a too-large register tile will be streamed, and reports it at
the tile's declaration when it cannot be. The analysis is stream_plan.py, the
rewrite stream_rewrite.py.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import DiagnosticError, PassError
from ..ir.core import Block, Kernel
from ..ir.ops import Blocks, Load
from ..ir.ops.cluster import EXCHANGES
from ..ir.ops.control import MAX_CLUSTER_CTAS
from ..ir.types import MAX_REGISTER_TILE_BYTES, TileType, register_tile_problem
from .decisions import subject_of
from .manager import Pass, PassContext, register_pass
from .stream_cluster import MAX_CLUSTER, SHIFT_COLS, SLICE_REDUCE, SLICE_WARPS, cluster_for, split_over_cluster
from .stream_cache import (AUTO_CACHE_BYTES, AUTO_REREAD_STAGES, AUTO_REREAD_WARPS, CACHE_BYTES,  # noqa: F401
                           CACHED_CHUNK_BYTES, cache_plan)
from .stream_plan import (CHUNK_BYTES, NotStreamable, StreamPlan, _chunk_width, block_body,  # noqa: F401
                          is_oversized, plan_streaming)
from .stream_rewrite import StreamRewriter


def oversized_tile_problem(kernel: Kernel) -> DiagnosticError | None:
    """The front end's check: a register tile over the limit that stream-cols will not stream is
    an error at its definition (with the reason it cannot be streamed)."""
    for op in kernel.walk():
        for v in op.results:
            if not is_oversized(v):
                continue
            body = block_body(kernel)
            note = None
            if body is None or v.owner.parent is not body:
                note = "it is not computed in the block loop's body, so it cannot be streamed over column chunks"
            else:
                try:
                    plan_streaming(body)
                    return None
                except NotStreamable as e:
                    where = f" ({e.op.NAME} at {e.op.span.location()})" if e.op is not None and e.op.span else ""
                    note = f"it cannot be streamed over column chunks: {e.why}{where}"
            return DiagnosticError(register_tile_problem(v.type), op.span, notes=[note])
    return None


# ---------------------------------------------------------------- the rewrite

def row_tile_sources(body: Block) -> list[str]:
    """The global tensors a row block loads as register tiles (the row tiles it keeps)."""
    names: list[str] = []
    for op in (inner for top in body.ops for inner in top.walk()):
        if isinstance(op, Load) and isinstance(op.result.type, TileType) and op.result.type.space == "rt":
            name = op.operands[0].hint or "?"
            if name not in names:
                names.append(name)
    return names


LOOP_SYNC_MEASURED = ("Measured (H200, 2026-11-27, hoisted / a barrier a trip, same runs, "
                      "benchmarks/results/2026-11-27-nvidia-h200-s17-resln-sweep-{1,2}.json, ...-s17-loop-sync-ab.json): "
                      "residual + LayerNorm 1.024 / 1.025 / 1.026 at D = 4096 and 1.016 / 1.012 / 1.020 at 8192; "
                      "softmax 1.016 / 1.021, RMSNorm 0.998 / 1.002, LayerNorm 0.967 / 0.944 at D = 4096 / 8192; "
                      "one CTA a row block (D = 1024): 0.997-1.001")
"""What ``loop_sync=auto`` rests on."""


def hoist_loop_barriers(kernel: Kernel, ctx: PassContext, why: str) -> None:
    """Mark ``kernel``'s chunk loops for one barrier before the loop (the kernel attribute
    ``loop_barriers``, which codegen/emit_control.py reads) and log ``why``."""
    kernel.attrs["loop_barriers"] = "hoisted"
    ctx.decide(f"@{kernel.name}", "chunk loops: barrier hoisted out of the loop where the body only reads",
               f"{why}: a chunk loop that copies its chunks from the row block loaded before it meets one "
               "barrier before the loop instead of one at the top of every trip (ncu on residual + "
               "LayerNorm at D = 4096, H200, session 13: 9% of the stall samples on barriers, most at those "
               "per-trip barriers); the codegen's hazard tracker keeps a per-trip barrier where the body "
               f"writes what its next trip reads. {LOOP_SYNC_MEASURED}", loop_barriers="hoisted")


@register_pass
@dataclass(frozen=True)
class StreamCols(Pass):
    """The ``stream-cols`` pass (module docstring)."""

    name = "stream-cols"
    summary = "run a row-wise block program over column chunks when its register tiles are too large"
    cols: int = 0
    """Chunk width (0: the widest power of two whose chunk tiles stay within CHUNK_BYTES)."""
    loads: str = "shared"
    """``shared``: chunk loads into shared tiles (pipelined), copied into registers; ``registers``."""
    stages: int = -1
    """Pipeline stages pinned on the chunk loops of shared loads (0: the pipeline's choice; -1: 2,
    or AUTO_REREAD_STAGES where ``cache=auto`` re-reads chunks). 2:
    the best measured (docs/codegen.md); pinned, the Hopper passes' protocol check stays small."""
    force: bool = False
    """Stream even when every register tile fits (for measurement)."""
    prefetch: bool = True
    """With ``loads=registers``: each trip loads the next trip's chunk before it computes on its
    own (carried through the loop), so a chunk's loads are in flight while the one before is used."""
    direct: bool = False
    """Ask the register-tile backend for its contiguous column order (register tiles loaded and
    stored 16 bytes a lane, straight between global memory and registers); kernel attribute
    ``column_order``. ``loads=registers`` asks for it too when the kernel is streamed."""
    cache: str = "auto"
    """``auto``: ``shared`` (with ``direct``, ``force`` and chunks of CACHED_CHUNK_BYTES unless
    pinned, budget AUTO_CACHE_BYTES unless pinned) for a row-wise program one of whose loaded tiles a
    later pass reads again (a reduction's result used on the row block: norms, softmax), ``none``
    otherwise; ``shared``: a wide tile that more than one pass reads is loaded once, whole, into a shared
    tile before the first pass, and every pass copies its chunks from there (``copy_cols``)
    instead of loading them again from global memory; the chunk loops then prefetch their vector
    loads (the next trip's, carried through the loop). Where the whole row block does not fit in
    shared memory (CACHE_BYTES), the passes re-read as with ``none``."""
    cache_bytes: int = 0
    """The most bytes ``cache=shared`` keeps (0: CACHE_BYTES)."""
    reduce: str = "auto"
    """``auto``: ``chunk``, or ``tile`` where ``cache=auto`` re-reads chunks; ``chunk``: each trip reduces its chunk and combines the row results in the carried vector
    (with several warps over the columns, a cross-warp combine per trip); ``tile``: each trip
    combines its chunk elementwise into a carried chunk-sized tile and the pass reduces that tile
    once, after its loop (one cross-warp combine per pass; the carried tile costs registers).
    ``tile`` needs chunks without padding columns (a constant width, a multiple of the chunk)."""
    warps: int = 0
    """Warps per block for the register-tile backend (kernel attribute ``num_warps``; 0: its own
    choice from the largest register tile)."""
    resident: int = 0
    """k > 0: run the block loop persistently with k CTAs per SM (``Blocks`` attribute
    ``resident``), so that at most k x SMs row blocks are between a chunk's first read and its
    re-read by a later pass: k x SMs x BR x W x (bytes of the loaded tensors) must fit in L2 for
    the re-read to hit there. 0: the kernel's own schedule (one CTA per block)."""
    cluster: str = "auto"
    """``k`` (2..16; above 8 a non-portable cluster size, never chosen by ``auto``): the row block's columns split over a cluster of k CTAs, each streaming (and
    keeping on chip) its slice, the row reductions combined through distributed shared memory
    (stream_cluster.py); ``auto`` (the default; with ``cache=auto`` and no ``resident`` only, the
    other forms keep one CTA): where one CTA cannot keep a re-read row block within the cache
    budget, the fewest CTAs whose slices fit it and are at most MAX_SLICE columns
    wide (``cluster_for``; measured on an H200, docs/codegen.md); ``none``: one CTA per row block."""
    exchange: str = "push"
    """How a split row block's reductions meet (``cluster_sum {exchange}``, ops/cluster.py): ``push``
    (the default) -- each CTA stores its partial into every peer's shared memory with ``st.async``
    and waits on one local mbarrier; ``barrier`` -- each CTA stores its own, and two cluster
    barriers surround the remote reads (session 11's form)."""
    moments: bool = False
    """Over a split row block (``cluster``, push exchange): a row mean and the sum of squared
    deviations about it (LayerNorm's variance; stream_cluster.variance_pairs) are reduced per CTA
    about the CTA's own slice mean and combined in one ``cluster_moments`` exchange (Chan's
    formula), so no CTA waits for the cluster's mean before the variance pass; false: as
    ``variance`` decides (two ``cluster_sum`` exchanges, the variance pass after the first, unless
    ``variance=auto`` takes the one-pass form). Measured on an
    H200 (session 13, ``...-s13-resln-2-*.json``, share of the copy bandwidth, D = 4096 / 8192):
    residual + LayerNorm 82 / 83% with it against 83 / 84% without, LayerNorm 80 / 73% against
    82 / 82%: one exchange fewer does not pay for the combine (then with a division per rank)."""
    onepass: bool = False
    """With ``moments``: each CTA takes its slice's row sums and squared deviations in one pass,
    about a shift (the mean of the slice's first 256 columns, loaded on their own before the pass;
    stream_cluster.split_over_cluster), so the mean and the variance need one pass and one exchange
    instead of two each. Measured (H200, session 13, ``...-s13-resln-3.json``): residual +
    LayerNorm 86 / 87% of the copy against 84 / 86% (taken by ``variance=auto``), LayerNorm
    79 / 78% against 83 / 84%."""
    variance: str = "auto"
    """How a split row block's mean and variance are reduced when ``moments``/``onepass`` are not
    set: ``auto`` -- in one pass and one exchange (``moments`` + ``onepass``) where the block keeps
    two or more row tiles of global tensors (residual + LayerNorm: its shared memory already holds
    an SM at 3 CTAs, so the pass's extra registers cost no CTA, and one pass fewer over twice the
    bytes gains: 86 / 87% of the copy against 84 / 86% at D = 4096 / 8192, H200 same run,
    ``...-s13-resln-3.json``), else in two exchanges (LayerNorm: its registers set the CTAs an SM
    holds, and one pass measured 79 / 78% against 83 / 84%); ``two``: always two exchanges."""
    loop_sync: str = "auto"
    """``trip``: a chunk loop's body meets the shared-memory barrier at the top of every trip where
    anything may be pending (the hazard tracker's default at a loop head); ``hoist``: one barrier
    before the loop where the body only reads what was written before it (kernel attribute
    ``loop_barriers``, codegen/emit_control.py); ``auto`` (the default): ``hoist`` where the row
    block is split over a cluster and keeps two or more row tiles (its shared memory sets the CTAs an
    SM holds), ``trip`` elsewhere: where registers can set them, the hoisted loops let ptxas keep more
    live (LayerNorm 48 -> 54 registers, 5 -> 4 CTAs an SM, 0.967 / 0.944). LOOP_SYNC_MEASURED."""
    store_hint: str = "none"
    """Cache hint of the stores straight from registers (codegen/cache_hints.py): ``none``, ``cs``
    (st.global.cs) or ``evict_first`` (L1::no_allocate, an L2 evict-first policy). Off by default."""
    load_hint: str = "none"
    """``evict_first``: the row block's cp.async copies take an L2 evict-first policy. Off by default."""
    l2_prefetch: int = 0
    """64, 128 or 256: the row block's cp.async copies carry that L2 prefetch size. 0: none (default)."""
    maxnreg: int = 0
    """n > 0: the kernel is capped at n registers a thread (``.maxnreg``; the kernel attribute
    ``register_cap``, which reg-budget takes as its pin on the general lowering), for more CTAs an
    SM by registers. 0: ptxas's choice (default)."""
    order: str = "alternate"
    """``alternate``: every other pass walks the chunks backwards (L2 still holds what the pass
    before read last); ``forward``: every pass from the first chunk."""

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        if self.loads not in ("shared", "registers"):
            raise PassError(f"stream-cols: loads must be shared or registers, got {self.loads!r}")
        if self.cache not in ("auto", "shared", "none"):
            raise PassError(f"stream-cols: cache must be auto, shared or none, got {self.cache!r}")
        if self.reduce not in ("auto", "chunk", "tile"):
            raise PassError(f"stream-cols: reduce must be auto, chunk or tile, got {self.reduce!r}")
        if self.order not in ("alternate", "forward"):
            raise PassError(f"stream-cols: order must be alternate or forward, got {self.order!r}")
        if self.exchange not in EXCHANGES:
            raise PassError(f"stream-cols: exchange must be {' or '.join(EXCHANGES)}, got {self.exchange!r}")
        body = block_body(kernel)
        if body is None:
            return kernel
        self._access_options(kernel, ctx)
        if self.cluster != "none" and (self.cluster != "auto" or (self.cache == "auto" and not self.resident)):
            return self._split(kernel, body, ctx)
        if self.cache == "auto":
            chosen = self._auto(body)
            if chosen.cache == "shared":
                rereads = chosen.reduce == "tile" and chosen.warps == AUTO_REREAD_WARPS
                ctx.decide(f"@{kernel.name}", "row block kept on chip (cache=auto)"
                           + (", later chunks read again" if rereads else ""),
                           f"a later pass reads a loaded tile again: streamed over chunks of {chosen.cols} columns "
                           f"with the row block (up to {chosen.cache_bytes:,} B) in shared memory, read in the "
                           "contiguous column order (16 bytes a lane, no staging); "
                           + ("over that budget the later chunks are read again, with reduce=tile, "
                              f"{chosen.warps} warps and {chosen.stages} stages"
                              if rereads else "the whole block fits: per-chunk reductions, 4 warps, 2 stages")
                           + "; measured on an H200 against the other forms (docs/codegen.md, "
                           "benchmarks/results/2026-11-27-nvidia-h200-s11-norms-*.json)",
                           cols=chosen.cols, cache_bytes=chosen.cache_bytes, reduce=chosen.reduce,
                           warps=chosen.warps, stages=chosen.stages)
            return chosen.run(kernel, ctx)
        if self.stages < 0 or self.reduce == "auto":
            import dataclasses
            return dataclasses.replace(self, stages=2 if self.stages < 0 else self.stages,
                                       reduce="chunk" if self.reduce == "auto" else self.reduce).run(kernel, ctx)
        try:
            plan = plan_streaming(body, force=self.force, cols=self.cols)
        except NotStreamable as e:
            ctx.decide(f"@{kernel.name}", "not streamed", e.why)
            plan = None
        if self.direct or (plan is not None and self.loads == "registers"):
            kernel.attrs["column_order"] = "contiguous"
            ctx.decide(f"@{kernel.name}", "register tiles straight between global memory and registers",
                       ("cache=auto, for the row block it keeps in shared memory" if self.cache == "shared" and self.force
                        and self.direct else "the pass option" + (" (loads=registers)" if not self.direct else "")) +
                       ": the register-tile backend takes its contiguous column order where it can "
                       "(16 bytes per lane, no shared-memory staging); whole-row register tiles do not take it "
                       "by default: measured on an H200, the softmax example ran at 91% of the same-size copy "
                       "with it and 96% without (session 10)")
        if plan is None:
            return kernel
        if self.resident:
            _make_resident(kernel, plan, self.resident, ctx)
        if self.warps:
            kernel.attrs["num_warps"] = self.warps
            ctx.decide(f"@{kernel.name}", f"{self.warps} warps per block",
                       "the pass option warps (or cache=auto, over its budget)")
        rewriter = StreamRewriter(plan, self)
        loops = rewriter.rewrite()
        if self.reduce == "tile":
            ctx.decide(f"@{kernel.name}", "row reductions once per pass" if rewriter.tile_partials
                       else "row reductions per chunk",
                       "reduce=tile (the pass option, or cache=auto over its budget): " + (
                           "each trip adds (or maxes) its chunk into a carried chunk-sized tile, reduced once "
                           "after the pass's loop: one cross-warp combine per pass instead of one per trip"
                           if rewriter.tile_partials else
                           "a streamed tensor's width is not a constant multiple of the row block's: its last "
                           "chunk has padding columns, which a carried tile would mix into the partials"))
        if self.cache == "shared":
            names = ", ".join(f"%{op.result.hint or '?'}" for op in rewriter.cached)
            part = "" if rewriter.cached_chunks == plan.width // plan.chunk else \
                f" (chunks 0..{rewriter.cached_chunks - 1} of {plan.width // plan.chunk})"
            ctx.decide(f"@{kernel.name}", f"row blocks kept in shared memory: {names}{part}" if rewriter.cached
                       else "row blocks re-read by every pass",
                       "cache=shared: " + rewriter.cache_plan[2] +
                       ("; each is loaded whole before the first pass and every pass copies its chunks "
                        "from there (copy_cols), so global memory is read once; the chunk loops prefetch "
                        "their vector loads one trip ahead" if rewriter.cached else ""))
            if rewriter.deferred:
                names = ", ".join(f"%{v.hint}" for v in rewriter.deferred)
                ctx.decide(f"@{kernel.name}", f"row block loads in flight together: {names} wait = deferred",
                           "the kept row blocks are loaded one after another before the first pass: each load "
                           "but the last issues its copies without waiting for them, and the last one's wait "
                           "covers them all, so the CTA has every row block's bytes in flight at once instead "
                           "of one tensor's at a time (ncu on residual + LayerNorm, H200, session 13: the "
                           "CTAs spent 13% of their stall samples waiting for x's copies before issuing "
                           "res's)", deferred=[v.hint for v in rewriter.deferred])
        big = max((v.type for v in plan.wide if isinstance(v.type, TileType)), key=lambda t: t.nbytes)
        why = (f"{big} needs {big.nbytes:,} B of registers, over the {MAX_REGISTER_TILE_BYTES:,} B one register "
               "tile may hold" if big.nbytes > MAX_REGISTER_TILE_BYTES else
               "forced (force=true, or cache=auto for a row block a later pass reads again)")
        whole = rewriter.cached and rewriter.cached_chunks == plan.width // plan.chunk
        how = ("chunks copied from the row block in shared memory" if whole else
               "chunk loads into shared tiles, pipelined" if self.loads == "shared" else "chunk loads into registers")
        ctx.decide(f"@{kernel.name}", f"streamed over {plan.width // plan.chunk} column chunks of {plan.chunk} "
                   f"in {plan.phases} pass(es), {how}",
                   why +
                   "; every op works column by column except the row reductions, whose chunk results are "
                   "combined in a carried value; an op that needs a reduction's result runs in a later pass, "
                   "which loads its inputs again (from L2 when they are still there) instead of keeping "
                   f"BR x {plan.width} values on chip; chunks of {plan.chunk} columns: "
                   + ("the pass option" if self.cols else f"the widest whose tiles stay within {CHUNK_BYTES:,} B")
                   + ("; chunk loads into shared tiles: measured on an H200, the best of the load forms, stage "
                      "counts, chunk widths and orders tried, or within 3% of it (docs/codegen.md)"
                      if self.loads == "shared" and self.stages == 2 and not self.cols else ""),
                   chunk=plan.chunk, passes=plan.phases, loads=self.loads)
        for loop, sinks in loops:
            ctx.decide(subject_of(loop), f"chunk pass: {', '.join(sinks)}", "")
        return kernel


    def _split(self, kernel: Kernel, body: Block, ctx: PassContext) -> Kernel:
        """``cluster``: split the row block over a cluster (stream_cluster.py), then stream the slice."""
        import dataclasses
        rest = dataclasses.replace(self, cluster="none")
        if self.cluster == "auto":
            k, why = cluster_for(body, self.cache_bytes or AUTO_CACHE_BYTES)
        elif self.cluster.isdigit() and 2 <= int(self.cluster) <= MAX_CLUSTER_CTAS:
            k, why = int(self.cluster), "the pass option"
            if k > MAX_CLUSTER:
                why += (f" ({k} CTAs: over the portable {MAX_CLUSTER}, a Hopper non-portable cluster size the "
                        "launcher opts in to; cluster=auto never takes it)")
        else:
            raise PassError(f"stream-cols: cluster must be none, auto or 2 to {MAX_CLUSTER_CTAS} CTAs, got {self.cluster!r}")
        if k > 1 and self.resident:
            raise PassError("stream-cols: cluster and resident cannot be combined (a cluster runs on the grid schedule)")
        if k == 1:
            if why:
                ctx.decide(f"@{kernel.name}", "one CTA per row block", f"cluster=auto: {why}")
            return rest.run(kernel, ctx)
        tiles = row_tile_sources(body)
        if self.loop_sync == "auto" and "loop_barriers" not in kernel.attrs:
            if len(tiles) >= 2:
                hoist_loop_barriers(kernel, ctx, f"loop_sync=auto on a row block split over a cluster of {k} that "
                                    f"keeps {len(tiles)} row tiles ({', '.join(tiles)}), so its shared memory, not "
                                    "its registers, sets the CTAs an SM holds")
            else:
                ctx.decide(f"@{kernel.name}", "chunk loops: a barrier every trip",
                           f"loop_sync=auto on a row block of {len(tiles)} row tile(s): its registers can set the "
                           "CTAs an SM holds, and without the per-trip barriers ptxas kept more of them live "
                           f"(LayerNorm 48 -> 54 registers, 5 -> 4 CTAs an SM). {LOOP_SYNC_MEASURED}")
        moments, onepass = self.moments, self.onepass
        if self.variance not in ("auto", "two"):
            raise PassError(f"stream-cols: variance must be auto or two, got {self.variance!r}")
        if not (moments or onepass) and self.variance == "auto" and self.exchange == "push" and len(tiles) >= 2:
            moments = onepass = True
            ctx.decide(f"@{kernel.name}", "variance: one pass, one exchange (moments, onepass)",
                       f"variance=auto: the row block keeps {len(tiles)} row tiles ({', '.join(tiles)}), so its "
                       "shared memory, not its registers, sets the CTAs an SM holds, and one pass fewer over "
                       "the slice pays (H200, session 13: residual + LayerNorm 86 / 87% of the copy bandwidth "
                       "against 84 / 86% at D = 4096 / 8192, benchmarks/results/2026-11-27-nvidia-h200-s13-resln-3.json)")
        try:
            width, part, paired = split_over_cluster(kernel, body, k, self.exchange, moments, onepass)
        except NotStreamable as e:
            where = f" ({e.op.NAME} at {e.op.span.location()})" if e.op is not None and e.op.span else ""
            ctx.decide(f"@{kernel.name}", "not split over a cluster", e.why + where)
            return rest.run(kernel, ctx)
        ctx.decide(f"@{kernel.name}", f"row block split over a cluster of {k} CTAs, {part} columns each",
                   f"{why}: the k CTAs of a cluster run the same rows, CTA rank r columns r*{part} .. "
                   f"(r+1)*{part}-1 of each {width}-column tile and row vector; each row reduction reduces the "
                   "CTA's slice, then cluster_sum/max/min combines the k partials through distributed shared "
                   "memory in rank order, the same in every CTA; the slice is streamed below", cluster=k,
                   width=width, slice=part)
        ctx.decide(f"@{kernel.name}", f"cluster exchange: {self.exchange}",
                   "each CTA stores its partial into every peer's shared memory (st.async, counted by the "
                   "receiver's per-exchange mbarrier) and waits on its own mbarrier: no cluster barrier per "
                   "exchange" if self.exchange == "push" else
                   "each CTA stores its own partial; a cluster barrier before and one after the remote reads "
                   "(ld.shared::cluster)", exchange=self.exchange)
        if paired and moments:
            names = ", ".join(f"%{r.result.hint or '?'}" for r in paired)
            ctx.decide(f"@{kernel.name}", f"mean and variance in one exchange: row_sum {names} (cluster_moments)",
                       f"moments=true ({'the pass option' if self.moments else 'variance=auto'}): the sum of squared deviations about a row mean of the same tile is reduced "
                       f"by each CTA about its own slice's mean ({part} columns), and one exchange carries both "
                       "partials, combined in rank order by Chan's formula (m2 = sum of m2_j + n (mean_j - mean)^2): "
                       "no CTA waits for the cluster's mean before the variance pass, one exchange per row block "
                       "instead of two (ncu on residual + LayerNorm at D = 4096, H200, session 13: 8.5% of the "
                       "stall samples in the two exchange waits; alone, without onepass, it measured no faster: "
                       "benchmarks/results/2026-11-27-nvidia-h200-s13-resln-2-*.json)",
                       rows=[r.result.hint for r in paired])
            if onepass and part % SHIFT_COLS == 0 and part > SHIFT_COLS:
                ctx.decide(f"@{kernel.name}", "mean and variance from one pass over the slice (onepass)",
                           f"onepass=true ({'the pass option' if self.onepass else 'variance=auto'}): each CTA sums t - K and (t - K)^2 in the same pass, K "
                           f"the mean of its slice's first {SHIFT_COLS} columns (loaded on their own, after the "
                           "row blocks' copies are issued); its slice's m2 = sum (t-K)^2 - (sum (t-K))^2 / n, "
                           "then cluster_moments: two passes over the slice instead of three")
        elif paired:
            ctx.decide(f"@{kernel.name}", "mean and variance in two exchanges",
                       f"{'variance=two' if self.variance == 'two' else 'the barrier exchange' if self.exchange != 'push' else 'one row tile kept'}: the variance pass waits for the cluster's mean; measured "
                       "on an H200 (session 13), one cluster_moments exchange instead was no faster for "
                       "residual + LayerNorm (82 / 83% of the copy against 83 / 84% at D = 4096 / 8192) and "
                       "slower for LayerNorm (80 / 73% against 82 / 82%)")
        if self.cache == "auto":
            rest = dataclasses.replace(rest, reduce=self.reduce if self.reduce != "auto" else SLICE_REDUCE,
                                       warps=self.warps or SLICE_WARPS)
            ctx.decide(f"@{kernel.name}", f"slice streamed with reduce={rest.reduce}, {rest.warps} warps",
                       "cache=auto on a split row block: a carried tile of partials reduced once per pass and "
                       "8 warps, unless pinned (measured on an H200 with the push exchange, "
                       "stream_cluster.SLICE_WARPS)", reduce=rest.reduce, warps=rest.warps)
        return rest.run(kernel, ctx)

    def _access_options(self, kernel: Kernel, ctx: PassContext) -> None:
        """The off-by-default options on how the streamed kernel meets barriers, hints its global
        accesses and caps its registers: kernel attributes the register-tile backend reads, logged."""
        from ..codegen.cache_hints import L2_PREFETCH, LOAD_HINTS, STORE_HINTS
        if self.loop_sync not in ("auto", "trip", "hoist"):
            raise PassError(f"stream-cols: loop_sync must be auto, trip or hoist, got {self.loop_sync!r}")
        if self.store_hint not in STORE_HINTS:
            raise PassError(f"stream-cols: store_hint must be {', '.join(STORE_HINTS)}, got {self.store_hint!r}")
        if self.load_hint not in LOAD_HINTS:
            raise PassError(f"stream-cols: load_hint must be {', '.join(LOAD_HINTS)}, got {self.load_hint!r}")
        if self.l2_prefetch not in L2_PREFETCH:
            raise PassError(f"stream-cols: l2_prefetch must be one of {L2_PREFETCH}, got {self.l2_prefetch!r}")
        if self.maxnreg and not 24 <= self.maxnreg <= 255:
            raise PassError(f"stream-cols: maxnreg must be 24 to 255 registers, got {self.maxnreg}")
        who = f"@{kernel.name}"
        if self.loop_sync == "hoist" and "loop_barriers" not in kernel.attrs:
            hoist_loop_barriers(kernel, ctx, "loop_sync=hoist (the pass option; auto takes it where a row block "
                                "split over a cluster keeps two or more row tiles)")
        for attr, value, default, what in (
                ("store_hint", self.store_hint, "none", "stores straight from registers take the cache hint"),
                ("load_hint", self.load_hint, "none", "row block copies take the L2 policy"),
                ("l2_prefetch", self.l2_prefetch, 0, "row block copies take the L2 prefetch size (bytes)"),
                ("register_cap", self.maxnreg, 0, "registers a thread capped at")):
            if value != default and attr not in kernel.attrs:
                kernel.attrs[attr] = value
                ctx.decide(who, f"{what}: {value}",
                           f"{attr}={value} (the pass option, off by default until measured on an H200: "
                           "benchmarks/probes/resln_sweep.py)", **{attr: value})

    def _auto(self, body: Block) -> "StreamCols":
        """The options ``cache=auto`` stands for on this block body (see ``cache``)."""
        import dataclasses
        none = dataclasses.replace(self, cache="none")
        try:
            plan = plan_streaming(body, force=True, cols=self.cols)
            if plan is None or all(v.type.nbytes <= CACHED_CHUNK_BYTES for v in plan.wide if isinstance(v.type, TileType)):
                return none  # one chunk holds the whole row block: nothing to stream
            cols = self.cols or _chunk_width(plan.width, [v.type for v in plan.wide], CACHED_CHUNK_BYTES)
            plan = plan_streaming(body, force=True, cols=cols)
        except NotStreamable:
            return none
        budget = self.cache_bytes or AUTO_CACHE_BYTES
        cached, chunks, _ = cache_plan(plan, budget) if plan is not None else ([], 0, "")
        if not cached:
            return none
        whole = chunks == plan.width // plan.chunk
        # measured on an H200 (docs/codegen.md): a row block the cache holds whole runs best with
        # per-chunk reductions, 4 warps and 2 stages; one whose later chunks are read again with a
        # carried tile of partials, 8 warps and 4 stages
        return dataclasses.replace(
            self, cache="shared", direct=True, force=True, cols=cols, cache_bytes=budget,
            reduce=self.reduce if self.reduce != "auto" else "chunk" if whole else "tile",
            warps=self.warps or (0 if whole else AUTO_REREAD_WARPS),
            stages=self.stages if self.stages >= 0 else 2 if whole else AUTO_REREAD_STAGES)


def _make_resident(kernel: Kernel, plan: StreamPlan, k: int, ctx: PassContext) -> None:
    """Persistent block loop with ``k`` CTAs per SM (the ``resident`` option), logged with the
    bytes it keeps between a chunk's first read and its re-read."""
    if k < 1:
        raise PassError(f"stream-cols: resident must be at least 1 CTA per SM, got {k}")
    blocks = next(op for op in kernel.body.ops if isinstance(op, Blocks))
    if blocks.attrs.get("split", 1) > 1:
        ctx.decide(f"@{kernel.name}", "resident ignored", "the block loop is split over clusters")
        return
    blocks.attrs["schedule"] = "persistent"
    blocks.attrs["resident"] = k
    loaded = {op.operands[0] for op in plan.body.ops if isinstance(op, Load) and op.result in plan.wide
              and isinstance(op.result.type, TileType)}
    per_block = sum(next(op.result.type.rows for op in plan.body.ops if isinstance(op, Load) and op.operands[0] is g
                         and op.result in plan.wide) * plan.width * g.type.dtype.nbytes for g in loaded)
    ctx.decide(f"@{kernel.name}", f"persistent, {k} CTA(s) per SM",
               f"the pass option: at most {k} row block(s) per SM are in flight, so between a chunk's first "
               f"read and its re-read by a later pass each SM has read at most {k} x {per_block:,} B "
               "(the row block's loaded tensors): the re-read finds them in L2 when the SMs' total fits it",
               resident=k, bytes_per_block=per_block)
