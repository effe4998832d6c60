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
What it decided, and why a kernel it leaves alone cannot be streamed, is logged; the front end
asks ``oversized_tile_problem`` whether a too-large register tile will be streamed, and reports
it at the tile's declaration when it cannot be.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import DiagnosticError, PassError
from ..ir.core import Block, Kernel, Op, Value
from ..ir.ops import (BINARY_OPS, BROADCAST_OPS, REDUCE_OPS, UNARY_OPS, Add, Blocks, Const, Copy, CopyCols, Cvt,
                      Fill, For, Load, Max, Min, Mul, Store, Sub, Yield, Zeros)
from ..ir.types import F32, I32, MAX_REGISTER_TILE_BYTES, ScalarType, TileType, VectorType, register_tile_problem
from .decisions import subject_of
from .manager import Pass, PassContext, register_pass

CACHE_BYTES = 160 * 1024
"""The most bytes of whole row blocks ``cache=shared`` keeps in shared memory (of the 227 KB a
block may use: the chunk loops' store staging and the reductions' scratch need the rest)."""
AUTO_REREAD_WARPS = 8
AUTO_REREAD_STAGES = 4
"""What ``cache=auto`` takes when the row block is over its budget and later chunks are read again
(with ``reduce=tile``): the best of the options measured at D = 4096 / 8192 (docs/codegen.md)."""
AUTO_CACHE_BYTES = 64 * 1024
"""The cache budget ``cache=auto`` takes (three 64 KB blocks fit one SM's shared memory)."""
CACHED_CHUNK_BYTES = 16 * 1024
"""The most bytes of one chunk tile under ``cache=auto`` (16 x 256 f32 for BR = 16): the passes
read their chunks from shared memory, so a narrow chunk costs no extra global load, and its
registers are few."""
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
        body = block_body(kernel)
        if body is None:
            return kernel
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
        rewriter = _Rewriter(plan, self)
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
                   + (f"the pass option" if self.cols else f"the widest whose tiles stay within {CHUNK_BYTES:,} B")
                   + ("; chunk loads into shared tiles: measured on an H200, the best of the load forms, stage "
                      "counts, chunk widths and orders tried, or within 3% of it (docs/codegen.md)"
                      if self.loads == "shared" and self.stages == 2 and not self.cols else ""),
                   chunk=plan.chunk, passes=plan.phases, loads=self.loads)
        for loop, sinks in loops:
            ctx.decide(subject_of(loop), f"chunk pass: {', '.join(sinks)}", "")
        return kernel


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
        cached, chunks, _ = _cache_plan(plan, budget) if plan is not None else ([], 0, "")
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


class _Rewriter:
    def __init__(self, plan: StreamPlan, options: StreamCols):
        self.plan, self.options = plan, options
        self.out: list[Op] = []
        self.outer: dict[Value, Value] = {}     # narrow value -> its value in the new body
        self.loops_made: list[For] = []
        self.cached: dict[Op, Value] = {}       # wide tile load -> its shared tile (first chunks) in the new body
        self.cached_chunks = 0                  # how many chunks from the first the shared tiles hold
        self.copying: set = set()               # the cached loads the loop being built copies
        self.passes_made = 0
        dims = [op.operands[0].type.dims[-1] for op in plan.body.ops if isinstance(op, (Load, Store))
                and (op.result if isinstance(op, Load) else op.operands[1]) in plan.wide]
        self.tile_partials = options.reduce == "tile" and all(isinstance(d, int) and d % plan.width == 0 for d in dims)
        self.cache_plan = _cache_plan(plan, options.cache_bytes or CACHE_BYTES) if options.cache == "shared" \
            else ([], 0, "the pass option cache=none")

    def rewrite(self) -> list[tuple[For, list[str]]]:
        plan = self.plan
        old = list(plan.body.ops)
        term = old[-1] if old and isinstance(old[-1], Yield) else None
        narrow = [op for op in old if op is not term and op not in plan.phase]
        loops = []
        for p in range(plan.phases + 1):
            for op in narrow:
                if max((plan.avail.get(r, 0) for r in op.results), default=_avail_of(op, plan)) == p:
                    self.out.append(self._clone(op, self.outer))
            if p == 0:
                self._load_cached()
            if p < plan.phases:
                sinks = [op for op in old if plan.phase.get(op) == p and not (op.results and op.result in plan.wide)]
                if sinks:
                    loops += self._loop(p, sinks)
        if term is not None:
            self.out.append(self._clone(term, self.outer))
        for op in self.out:
            op.parent = plan.body
        plan.body.ops = self.out
        return loops

    def _load_cached(self) -> None:
        """The shared tiles of ``cache=shared`` (each tensor's first chunks), loaded before the first pass."""
        loads, chunks, _ = self.cache_plan
        for op in loads:
            coords = [self.outer.get(v, v) for v in op.variadic()]
            if any(v.owner is not None and v.owner.parent is self.plan.body for v in coords):
                continue  # a coordinate computed after the first pass: the chunks are loaded again
            if chunks < self.plan.width // self.plan.chunk and not _is_zero(coords[-1]):
                continue  # a part of a tile at a later column: its first chunks are not a tile of their own
            t = op.result.type
            st = TileType("st", op.operands[0].type.dtype, t.rows, chunks * self.plan.chunk)
            ld = Load([op.operands[0], *coords], {}, [st], span=op.span, result_hints=[f"{_named(op.result.hint, 'x')}_row"])
            self.out.append(ld)
            self.cached[op] = ld.result
        self.cached_chunks = chunks

    # -- one chunk loop ------------------------------------------------------------------
    def _loop(self, p: int, sinks: list[Op]) -> list[tuple[For, list[str]]]:
        """Pass ``p`` over every chunk: one loop, or two where ``cache=shared`` keeps only the first
        chunks in shared memory (the cached chunks, and the rest re-read from global memory; a
        backward pass takes the re-read ones first, which the pass before read last)."""
        plan = self.plan
        reductions = [op for op in sinks if op.results]
        inits = []
        for red in reductions:
            t = _chunked(red.operands[0].type, plan) if self.tile_partials else red.result.type
            init = Zeros([], {}, [t], span=red.span) if red.FN == "sum" else \
                Fill([], {"value": IDENTITY[red.FN]}, [t], span=red.span)
            self.out.append(init)
            inits.append(init.result)
        n = plan.width // plan.chunk
        backward = self.options.order == "alternate" and self.passes_made % 2 == 1
        self.passes_made += 1
        m = self.cached_chunks if self.cached else 0
        ranges = [(0, m, True), (m, n, False)] if 0 < m < n else [(0, n, m == n)]
        if backward:
            ranges.reverse()
        loops = []
        for lo, hi, cached in ranges:
            loop = self._range_loop(sinks, reductions, inits, lo, hi, backward, cached)
            inits = list(loop.results[:len(reductions)])
            names = [f"{red.NAME} of %{red.operands[0].hint or '?'}" for red in reductions] + \
                [f"store to %{s.operands[0].hint}" for s in sinks if not s.results]
            if len(ranges) > 1:
                names.append(f"chunks {lo}..{hi - 1} " + ("copied from shared memory" if cached else "loaded again"))
            loops.append((loop, names))
        for red, r in zip(reductions, inits):
            if self.tile_partials:  # the pass's one reduction of its carried partials
                final = type(red)([r], {}, None, span=red.span, result_hints=[red.result.hint])
                self.out.append(final)
                r = final.result
            self.outer[red.result] = r
        return loops

    def _range_loop(self, sinks, reductions, inits, lo: int, hi: int, backward: bool, cached: bool) -> For:
        """One loop over chunks lo .. hi-1 of a pass (``cached``: its cached loads are copy_cols)."""
        plan = self.plan
        span = sinks[0].span
        zero, count, one = (self._const(v, span) for v in (0, hi - lo, 1))
        needed = self._needed(sinks)
        copied = set(self.cached) if cached else set()
        loads = [op for op in plan.body.ops if op in needed and isinstance(op, Load)
                 and isinstance(op.result.type, TileType) and op not in copied]
        ahead = loads if self.options.loads == "registers" and self.options.prefetch else []
        if copied and not loads and self.options.prefetch:  # no pipelined tile loads to hide the vectors' latency
            ahead = ahead + [op for op in plan.body.ops if op in needed and isinstance(op, Load)
                             and isinstance(op.result.type, VectorType)]
        firsts = []
        if ahead:  # software pipelining: the chunk a trip uses was loaded by the trip before
            start = self._const(hi - 1 if backward else lo, span)
            pre = dict(self.outer)
            for op in ahead:
                self._chunk_op(op, start, pre, self.out, narrow=True)
                firsts.append(pre[op.result])
        body = Block([Value(I32_T, "c")] + [Value(v.type, _named(red.result.hint, "acc")) for v, red in zip(inits, reductions)]
                     + [Value(v.type, f"{_named(v.hint, 'x')}_next") for v in firsts])
        c = body.args[0]
        if backward:
            # every other pass walks the chunks backwards: it starts with those the pass before
            # touched last, which L2 is likeliest to still hold
            last = Const([], {"value": hi - 1}, [I32_T], span=span)
            back = Sub([last.result, c], {}, None, span=span, result_hints=["chunk"])
            body.append(last)
            body.append(back)
            c = back.result
        elif lo:
            first = Const([], {"value": lo}, [I32_T], span=span)
            fwd = Add([first.result, c], {}, None, span=span, result_hints=["chunk"])
            body.append(first)
            body.append(fwd)
            c = fwd.result
        local = dict(self.outer)
        nexts = []
        if ahead:  # the next trip's chunk (the last trip loads its own again: a cache hit)
            step = Const([], {"value": 1}, [I32_T], span=span)
            end = Const([], {"value": lo if backward else hi - 1}, [I32_T], span=span)
            moved = (Sub if backward else Add)([c, step.result], {}, None, span=span)
            following = (Max if backward else Min)([moved.result, end.result], {}, None, span=span,
                                                  result_hints=["next"])
            for op in (step, end, moved, following):
                body.append(op)
            for op, arg in zip(ahead, body.args[1 + len(reductions):]):
                self._chunk_op(op, following.result, local, body, narrow=True)
                nexts.append(local[op.result])
                local[op.result] = arg
                if arg.type != _chunked(op.result.type, plan):  # carried in the tensor's dtype
                    wide = Cvt([arg], {"dtype": op.result.type.dtype.name}, None, span=op.span,
                               result_hints=[op.result.hint])
                    body.append(wide)
                    local[op.result] = wide.result
        ordered = [op for op in loads if op not in ahead] + [op for op in plan.body.ops
                                                             if op in needed and op not in loads and op not in ahead]
        self.copying = copied
        for op in ordered:  # the loop's shared loads first: the pipeline fetches those ahead
            self._chunk_op(op, c, local, body)
        self.copying = set()
        yields = []
        for red, acc in zip(reductions, body.args[1:]):
            if self.tile_partials:
                part = local[red.operands[0]]
            else:
                reduced = type(red)([local[red.operands[0]]], {}, None, span=red.span)
                body.append(reduced)
                part = reduced.result
            combined = COMBINE[red.FN]([acc, part], {}, None, span=red.span)
            body.append(combined)
            yields.append(combined.result)
        body.append(Yield(yields + nexts, {}, None, span=span))
        pipelined = self.options.loads == "shared" and any(op not in ahead for op in loads)
        attrs = {"stages": self.options.stages} if self.options.stages and pipelined else {}
        loop = For([zero, count, one, *inits, *firsts], attrs, None, [body], span=span,
                   result_hints=[red.result.hint for red in reductions] + [None] * len(firsts))
        self.out.append(loop)
        self.loops_made.append(loop)
        return loop

    def _needed(self, sinks: list[Op]) -> set:
        plan, needed, todo = self.plan, set(), list(sinks)
        while todo:
            op = todo.pop()
            if op in needed:
                continue
            needed.add(op)
            todo += [v.owner for v in op.operands if v in plan.wide]
        return needed

    def _chunk_op(self, op: Op, c: Value, local: dict, body, narrow: bool = False) -> None:
        """Append ``op``'s chunk form to ``body`` (a Block, or the list of ops before the loop).
        ``narrow``: a tile load of a 16-bit tensor into an f32 tile keeps the tensor's dtype (half
        the registers while it is carried; converting it later is exact)."""
        plan = self.plan
        if op.results == [] or op.result not in plan.wide:  # the sinks: stores (reductions: by the loop)
            if isinstance(op, Store):
                coords = self._chunk_coords(op.variadic(), c, local, body, op.span)
                body.append(Store([local.get(op.operands[0], op.operands[0]), local[op.operands[1]], *coords],
                                  dict(op.attrs), None, span=op.span))
            return
        t = op.result.type
        ct = _chunked(t, plan)
        if isinstance(op, Load) and op in self.copying:
            new = CopyCols([self.cached[op], c], {}, [ct], span=op.span, result_hints=[op.result.hint])
        elif isinstance(op, Load):
            coords = self._chunk_coords(op.variadic(), c, local, body, op.span)
            src = op.operands[0]
            if isinstance(t, TileType) and self.options.loads == "shared":
                st = TileType("st", src.type.dtype, ct.rows, ct.cols)
                ld = Load([src, *coords], {}, [st], span=op.span, result_hints=[f"{_named(op.result.hint, 'x')}_s"])
                body.append(ld)
                if self.options.direct and src.type.dtype.bits == 16:
                    # the contiguous column order reads a shared tile only through copy_cols
                    zero = Const([], {"value": 0}, [I32_T], span=op.span)
                    body.append(zero)
                    new = CopyCols([ld.result, zero.result], {}, [ct], span=op.span, result_hints=[op.result.hint])
                else:
                    new = Copy([ld.result], {}, [ct], span=op.span, result_hints=[op.result.hint])
            else:
                if narrow and isinstance(ct, TileType) and src.type.dtype.bits == 16 and ct.dtype == F32:
                    ct = TileType("rt", src.type.dtype, ct.rows, ct.cols)
                new = Load([src, *coords], {}, [ct], span=op.span, result_hints=[op.result.hint])
        else:
            operands = [local.get(v, v) for v in op.operands]
            new = type(op)(operands, dict(op.attrs), [ct], span=op.span, result_hints=[op.result.hint])
        body.append(new)
        local[op.result] = new.result

    def _chunk_coords(self, coords, c: Value, local: dict, body: Block, span) -> list[Value]:
        """The last coordinate k (in units of the whole width) becomes k * chunks + c."""
        coords = [local.get(v, v) for v in coords]
        k = coords[-1]
        if isinstance(k.owner, Const) and k.owner.attrs["value"] == 0:
            return coords[:-1] + [c]
        n = Const([], {"value": self.plan.width // self.plan.chunk}, [I32_T], span=span)
        mul = Mul([k, n.result], {}, None, span=span)
        add = Add([mul.result, c], {}, None, span=span)
        for op in (n, mul, add):
            body.append(op)
        return coords[:-1] + [add.result]

    def _const(self, value: int, span) -> Value:
        op = Const([], {"value": value}, [I32_T], span=span)
        self.out.append(op)
        return op.result

    def _clone(self, op: Op, mapping: dict) -> Op:
        from .rewrite import _clone_op
        return _clone_op(op, mapping)


def _named(hint: str | None, default: str) -> str:
    """A value's name for the values made from it: its hint, unless it has none or a number (a
    parsed ``%7`` keeps 7 as its hint, which the printer ignores), so that compiling the source and
    compiling its printed IR name them alike."""
    return hint if hint and not hint.isdigit() else default


def _is_zero(v: Value) -> bool:
    return isinstance(v.owner, Const) and v.owner.attrs["value"] == 0


def _cache_plan(plan: StreamPlan, budget: int) -> tuple[list[Op], int, str]:
    """The wide tile loads ``cache=shared`` keeps in shared memory (those more than one pass
    reads), how many chunks of each from the first (as many as budget holds; the rest are
    re-read), and why."""
    phases_of = {}
    for op in plan.body.ops:  # the passes that need a load: those of every op its value reaches
        if isinstance(op, Load) and op.result in plan.wide and isinstance(op.result.type, TileType):
            seen, todo, ph = set(), [op], set()
            while todo:
                o = todo.pop()
                if o in seen:
                    continue
                seen.add(o)
                ph.add(plan.phase.get(o, 0))
                todo += [u for u in plan.body.ops if any(v in plan.wide and v.owner is o for v in u.operands)]
            phases_of[op] = ph
    reread = [op for op, ph in phases_of.items() if len(ph) > 1]
    if not reread:
        return [], 0, "no pass re-reads a loaded tile"
    last = [op.operands[0].type.dims[-1] for op in reread]
    if any(not isinstance(d, int) or d % plan.width for d in last):
        return [], 0, "a re-read tensor's rows are not a constant multiple of the width: its chunks have padding columns"
    n = plan.width // plan.chunk
    per_chunk = sum(op.result.type.rows * plan.chunk * op.operands[0].type.dtype.nbytes for op in reread)
    chunks = min(n, budget // per_chunk)
    if chunks == 0:
        return [], 0, f"one chunk of the re-read row blocks takes {per_chunk:,} B, over the {budget:,} B kept"
    if chunks == n:
        return reread, n, f"{per_chunk * n:,} B of row blocks kept in shared memory for the passes that re-read them"
    return reread, chunks, (f"the row blocks take {per_chunk * n:,} B, so the first {chunks} of {n} chunks "
                            f"({per_chunk * chunks:,} B, within {budget:,} B) are kept in shared memory and "
                            "the rest are read again (the backward passes start with them: L2 likely still holds them)")


def _avail_of(op: Op, plan: StreamPlan) -> int:
    return max((plan.avail.get(v, 0) for o in op.walk() for v in o.operands), default=0)


def _chunked(t, plan: StreamPlan):
    if isinstance(t, TileType):
        return TileType(t.space, t.dtype, t.rows, plan.chunk)
    return VectorType(t.kind, t.dtype, plan.chunk)
