"""stream-cols' rewrite: the block body as loops over column chunks, one per pass (two where the
cache keeps only the first chunks), with the row reductions carried (``StreamRewriter``)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..ir.core import Block, Op, Value
from ..ir.ops import Add, Const, Copy, CopyCols, Cvt, Fill, For, Load, Max, Min, Mul, Store, Sub, Yield, Zeros
from ..ir.types import F32, TileType, VectorType
from .stream_cache import CACHE_BYTES, cache_plan
from .stream_plan import COMBINE, I32_T, IDENTITY, StreamPlan, _chunked

if TYPE_CHECKING:
    from .stream_cols import StreamCols

class StreamRewriter:
    def __init__(self, plan: StreamPlan, options: StreamCols):
        self.plan, self.options = plan, options
        self.out: list[Op] = []
        self.outer: dict[Value, Value] = {}     # narrow value -> its value in the new body
        self.loops_made: list[For] = []
        self.cached: dict[Op, Value] = {}       # wide tile load -> its shared tile (first chunks) in the new body
        self.cached_chunks = 0                  # how many chunks from the first the shared tiles hold
        self.copying: set = set()               # the cached loads the loop being built copies
        self.passes_made = 0
        self.deferred: list[Value] = []         # cached row blocks whose loads do not wait (the next one's does)
        dims = [op.operands[0].type.dims[-1] for op in plan.body.ops if isinstance(op, (Load, Store))
                and (op.result if isinstance(op, Load) else op.operands[1]) in plan.wide]
        self.tile_partials = options.reduce == "tile" and all(isinstance(d, int) and d % plan.width == 0 for d in dims)
        self.cache_plan = cache_plan(plan, options.cache_bytes or CACHE_BYTES) if options.cache == "shared" \
            else ([], 0, "the pass option cache=none")

    def rewrite(self) -> list[tuple[For, list[str]]]:
        plan = self.plan
        old = list(plan.body.ops)
        term = old[-1] if old and isinstance(old[-1], Yield) else None
        narrow = [op for op in old if op is not term and op not in plan.phase]
        loops = []
        for p in range(plan.phases + 1):
            now = [op for op in narrow
                   if max((plan.avail.get(r, 0) for r in op.results), default=_avail_of(op, plan)) == p]
            late = _after_tile_loads(now) if p == 0 else set()
            for op in now:
                if op not in late:
                    self.out.append(self._clone(op, self.outer))
            if p == 0:
                self._load_cached(defer_all=bool(late))
                for op in now:  # narrow register-tile loads and what needs them: after the row blocks' copies
                    if op in late:
                        self.out.append(self._clone(op, self.outer))
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

    def _load_cached(self, defer_all: bool = False) -> None:
        """The shared tiles of ``cache=shared`` (each tensor's first chunks), loaded before the first
        pass; each but the last without waiting for its copies (``defer_all``: the last too: register
        loads follow, which the backend then issues before it waits)."""
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
        made = [ld for ld in self.out if isinstance(ld, Load) and ld.result in self.cached.values()]
        deferred = made if defer_all else made[:-1]
        for ld in deferred:  # in flight together: the last load's wait (or the backend's) covers them all
            ld.attrs["wait"] = "deferred"
        self.deferred = [ld.result for ld in deferred]

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


def _avail_of(op: Op, plan: StreamPlan) -> int:
    return max((plan.avail.get(v, 0) for o in op.walk() for v in o.operands), default=0)


def _after_tile_loads(ops: list[Op]) -> set:
    """The ops of ``ops`` that are (or need) a register-tile load: issued after the kept row
    blocks' loads, so that those copies are in flight while these wait for their own bytes."""
    late: set = set()
    for op in ops:
        if (isinstance(op, Load) and isinstance(op.result.type, TileType) and op.result.type.space == "rt") or \
                any(v.owner in late for v in op.operands):
            late.add(op)
    return late
