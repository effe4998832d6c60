"""Emitters for control flow: the block loop, sequential ``for`` loops with carried values, ``if``.

Carried values (loop iter args, if results) get fixed registers; ``yield`` becomes moves into
them (through temporaries when a yield permutes them). A loop with pipelined loads gets its
prologue, trip start and stage rotation from pipeline.py. Every condition is a scalar, so all
control flow is uniform over the thread block (``bra.uni``), and barriers inside it are safe.

The block loop: the grid is one-dimensional (``ctaid.x`` = the linear block number; no 65535
limits on y/z) and the linear number is decomposed with the *last* block index fastest, so
consecutive CTAs share the rows of A in a GEMM. ``group = G`` visits the last two indices in
groups of G rows (Triton's grouped order) for L2 reuse. ``persistent`` launches
min(total, SMs) CTAs that loop over blocks with stride ``nctaid.x``. ``cluster = k`` launches k
CTAs per block, clusters of k consecutive CTAs: block number ``ctaid.x / k``.
"""
from __future__ import annotations

from ..errors import NotAvailableError
from ..ir.ops import Blocks, For, If, Yield
from ..ir.types import BOOL, I32, ScalarType, TileType, VectorType
from .pipeline import advance_stages, emit_prologue, emit_trip_start
from .values import RegTile, RegVec, Scalar

_KIND_OF_PREFIX = (("%rd", "b64"), ("%p", "pred"), ("%h", "b16"), ("%r", "b32"), ("%f", "f32"))
_MOV = {"b64": "mov.b64", "pred": "mov.pred", "b16": "mov.b16", "b32": "mov.b32", "f32": "mov.f32"}


def reg_kind(reg: str) -> str:
    for prefix, kind in _KIND_OF_PREFIX:
        if reg.startswith(prefix):
            return kind
    raise ValueError(reg)


def registers_of(rep) -> list[str]:
    """The PTX registers holding a scalar, register tile or vector, in one fixed order."""
    if isinstance(rep, Scalar):
        return [rep.reg]
    if isinstance(rep, RegTile):
        return [r for band in rep.regs for chunk in band for r in chunk]
    if isinstance(rep, RegVec):
        return [r for unit in rep.regs for r in unit]
    raise NotAvailableError("shared tiles cannot be carried through loops or ifs on this backend")


def fresh(ctx, t):
    """A value of type ``t`` in new registers (the fixed home of a carried value)."""
    if isinstance(t, ScalarType):
        kind = "b32" if t.dtype == I32 else "pred" if t.dtype == BOOL else "f32"
        return Scalar(ctx.new(kind), t.dtype)
    if isinstance(t, TileType) and t.space == "rt":
        layout = ctx.tile_layout(t)
        per = 2 if t.dtype.bits == 16 else 4
        kind = "b32" if per == 2 else "f32"
        regs = [[[ctx.new(kind) for _ in range(per)] for _ in range(layout.chunks)] for _ in range(layout.bands)]
        return RegTile(t, layout, regs)
    if isinstance(t, VectorType):
        split = ctx.vec_split(t)
        return RegVec(t, split, [[ctx.new("f32") for _ in range(2)] for _ in range(split.per_warp)])
    raise NotAvailableError(f"cannot carry {t} through a loop or if on the register-tile backend")


def moves(ctx, dsts: list, srcs: list) -> list[str]:
    """Parallel moves src → dst for lists of values (safe when they permute each other)."""
    pairs = [(d, s) for dv, sv in zip(dsts, srcs) for d, s in zip(registers_of(dv), registers_of(sv)) if d != s]
    targets = {d for d, _ in pairs}
    out, staged = [], []
    for d, s in pairs:
        if s in targets:
            tmp = ctx.new(reg_kind(s))
            out.append(f"{_MOV[reg_kind(s)]} {tmp}, {s};")
            staged.append((d, tmp))
        else:
            staged.append((d, s))
    out += [f"{_MOV[reg_kind(d)]} {d}, {s};" for d, s in staged]
    return out


def emit_yield(ctx, op) -> list[str]:
    return []   # the enclosing for/if moves the yielded values


def emit_for(ctx, op: For) -> list[str]:
    out: list[str] = []
    lo, hi, step = (ctx.get(v).reg for v in op.operands[:3])
    body = op.regions[0]
    pipe = ctx.pipelines.get(id(op))
    carried = [fresh(ctx, v.type) for v in op.variadic()]
    k = ctx.new("b32")
    out.append(f"mov.b32 {k}, {lo};")
    out += moves(ctx, carried, [ctx.get(v) for v in op.variadic()])
    if pipe is not None:
        stage = emit_prologue(ctx, pipe, lo, hi, step, out)
    head, done = ctx.label("for"), ctx.label("for_end")
    p = ctx.new("pred")
    hoisted = pipe is None and getattr(getattr(ctx, "kernel", None), "attrs", {}).get("loop_barriers") == "hoisted"
    if hoisted:
        pre, outer_log, at_loop = ctx.sync.state(), ctx.sync.log, len(out)
        ctx.sync.written, ctx.sync.read, ctx.sync.log = [], [], []
    else:
        ctx.sync.assume_anything()
    out.append(f"{head}:")
    out.append(f"setp.ge.s32 {p}, {k}, {hi};")
    out.append(f"@{p} bra.uni {done};")
    at_body = len(out)
    ctx.bind(body.args[0], Scalar(k, I32))
    for arg, rep in zip(body.args[1:], carried):
        ctx.bind(arg, rep)
    if pipe is not None:
        emit_trip_start(ctx, pipe, k, hi, step, stage, out)
    out += ctx.emit_block(body)
    if hoisted:
        _place_loop_barrier(ctx, pre, outer_log, at_loop, at_body, out)
    out += moves(ctx, carried, [ctx.get(v) for v in body.terminator.operands])
    if pipe is not None:
        advance_stages(ctx, pipe, stage, out)
    out.append(f"add.s32 {k}, {k}, {step};")
    out.append(f"bra.uni {head};")
    out.append(f"{done}:")
    if pipe is not None:
        out.append("cp.async.wait_all;")
        for load in pipe.loads:
            ctx.prefetched.pop(id(load), None)
    ctx.sync.assume_anything()
    from .emit_reduce import combine_partial_sums
    for r, rep in zip(op.results, combine_partial_sums(ctx, op, carried, out)):
        ctx.bind(r, rep)
    if "stages" in op.attrs and pipe is None:
        ctx.decide("stages", 1, "no shared-tile load of this loop can be fetched ahead (its coordinates "
                   "are not computed from the loop variable alone), or @stages(1)")
    return out


def _place_loop_barrier(ctx, pre, outer_log, at_loop: int, at_body: int, out: list[str]) -> None:
    """``loop_barriers = "hoisted"`` (stream-cols' loop_sync, hoist or auto): the loop body was emitted as if
    nothing were pending at its head; its accesses before its own first barrier (``head``) race
    either with what the trip before left pending (a barrier at the top of every trip, as without
    the option) or only with what was pending before the loop (one barrier before the loop), or
    with neither (no barrier)."""
    from .context import SharedSync
    log, ctx.sync.log = ctx.sync.log, outer_log
    head = []
    for kind, region in log:
        if kind == "bar":
            break
        head.append((kind, region))
    if SharedSync.races(ctx.sync.state(), head):
        out.insert(at_body, ctx.sync.BARRIER)
        where = "every trip (its body's accesses race with the trip before's)"
    elif SharedSync.races(pre, head):
        out.insert(at_loop, ctx.sync.BARRIER)
        where = "once, before the loop"
    else:
        where = "none at the loop's head"
    ctx.decide("loop_barriers", "hoisted",
               "loop_barriers = hoisted (stream-cols' loop_sync: hoist, or auto's choice there): a loop whose "
               "body only reads shared memory written before it "
               "meets the barrier once before the loop instead of at the top of every trip; the shared-memory "
               "hazard tracker decides per loop (a body that writes what its next trip reads keeps the "
               f"barrier in the loop); here: {where}")
    if outer_log is not None:  # an enclosing hoisted loop: anything may be pending after this one
        outer_log += [("w", SharedSync.EVERYTHING), ("r", SharedSync.EVERYTHING)]


def emit_if(ctx, op: If) -> list[str]:
    out: list[str] = []
    cond = ctx.get(op.operands[0]).reg
    results = [fresh(ctx, r.type) for r in op.results]
    l_else, l_end = ctx.label("else"), ctx.label("endif")
    out.append(f"@!{cond} bra.uni {l_else};")
    before = ctx.sync.state()
    out += _branch(ctx, op.regions[0], results)
    after_then = ctx.sync.state()
    out.append(f"bra.uni {l_end};")
    out.append(f"{l_else}:")
    ctx.sync.restore(before)
    out += _branch(ctx, op.regions[1], results)
    ctx.sync.join(after_then, ctx.sync.state())
    out.append(f"{l_end}:")
    for r, rep in zip(op.results, results):
        ctx.bind(r, rep)
    return out


def _branch(ctx, region, results) -> list[str]:
    """One branch of an if, ending with the moves of what it yields into the if's results
    (emit_reduce.edge_versioned: emitted twice under one edge branch where that applies)."""
    from .emit_reduce import edge_versioned

    def finish() -> list[str]:
        return moves(ctx, results, [ctx.get(v) for v in region.terminator.operands])
    versioned = edge_versioned(ctx, region, finish)
    if versioned is not None:
        return versioned
    return ctx.emit_block(region) + finish()


def block_indices(ctx, op: Blocks, lin: str, counts: list[str], out: list[str],
                  bounded: bool = False) -> list[str]:
    """Block indices from the linear block number (last index fastest, optional grouping, or
    heaviest first: ``heavy_indices``). ``bounded``: ``lin`` is known to be below the tile count
    (the general lowering's tile walk tests it first), so a 2-D grouped loop needs no
    ``lin mod (mb * nb)``: one 32-bit division less per tile in each role."""
    n = len(counts)
    if "heavy" in op.attrs:
        return heavy_indices(ctx, op, lin, counts, out)
    group = op.attrs.get("group", 1)
    idx = [None] * n
    rest = lin
    if group > 1 and n >= 2:
        mb, nb = counts[-2], counts[-1]
        if bounded and n == 2:
            inner = lead = lin
        else:
            inner, size = ctx.new("b32"), ctx.new("b32")
            out.append(f"mul.lo.u32 {size}, {mb}, {nb};")
            out.append(f"rem.u32 {inner}, {lin}, {size};")
            lead = ctx.new("b32")
            out.append(f"div.u32 {lead}, {lin}, {size};")
        width, gid, first, gsize, within = (ctx.new("b32") for _ in range(5))
        out.append(f"mul.lo.u32 {width}, {nb}, {group};")
        out.append(f"div.u32 {gid}, {inner}, {width};")
        out.append(f"mul.lo.u32 {first}, {gid}, {group};")
        out.append(f"sub.u32 {gsize}, {mb}, {first};")
        out.append(f"min.u32 {gsize}, {gsize}, {group};")
        out.append(f"rem.u32 {within}, {inner}, {width};")
        m, nn = ctx.new("b32"), ctx.new("b32")
        out.append(f"rem.u32 {m}, {within}, {gsize};")
        out.append(f"add.u32 {m}, {m}, {first};")
        out.append(f"div.u32 {nn}, {within}, {gsize};")
        idx[-2], idx[-1] = m, nn
        rest, todo = lead, range(n - 3, -1, -1)
    else:
        todo = range(n - 1, -1, -1)
    for d in todo:
        if d == 0:
            idx[0] = rest
            break
        r, q = ctx.new("b32"), ctx.new("b32")
        out.append(f"rem.u32 {r}, {rest}, {counts[d]};")
        out.append(f"div.u32 {q}, {rest}, {counts[d]};")
        idx[d], rest = r, q
    return idx


def heavy_indices(ctx, op: Blocks, lin: str, counts: list[str], out: list[str]) -> list[str]:
    """The grid pass's heaviest-first order: index ``heavy`` descending, in chunks of the other
    indices (row-major, a "head") whose streamed tensors fit ``L2_BUDGET``: at most cap =
    L2_BUDGET / the bytes of the last two dimensions of every tensor the block body's ring loops
    load (at least 1, at most every head) heads a chunk. The heads are split into m = cdiv(heads,
    cap) chunks as even as can be: the first heads mod m of base + 1 heads, the rest of base =
    heads / m. Inside a chunk the heavy index runs slowest (n - 1 - inside / height) and the heads
    fastest. Even chunks, because a chunk's heaviest tiles start only when the chunks before it
    have been handed out: a last chunk of one head (16 heads under a cap of 5) starts its longest
    tile near the end and runs alone past everyone else (H200, 2026-11-27, ncu of causal
    examples/attention.tk D = 64 N = 16384: SMs idle 10.6% of the kernel with chunks 5/5/5/1,
    2.7% with the template's 6/6/4; `benchmarks/probes/ncu_attention.sh`)."""
    from ..passes.hopper import L2_BUDGET, pipelined_loops, shared_loads
    axis = op.attrs["heavy"]
    others = [d for d in range(len(counts)) if d != axis]
    heads = ctx.new("b32")
    out.append(f"mov.u32 {heads}, 1;")
    for d in others:
        out.append(f"mul.lo.u32 {heads}, {heads}, {counts[d]};")
    slice_bytes = ctx.new("b32")
    out.append(f"mov.u32 {slice_bytes}, 0;")
    loops = [loop for loop in pipelined_loops(op) if loop in op.regions[0].ops]
    for ld in (ld for loop in loops for ld in shared_loads(loop.regions[0])):
        g = ld.operands[0].type
        const, named = g.dtype.nbytes, []
        for x in g.dims[-2:]:
            if isinstance(x, int):
                const *= x
            else:
                named.append(ctx.dim_operand(x))
        t = ctx.new("b32")
        out.append(f"mov.u32 {t}, {const};")
        out += [f"mul.lo.u32 {t}, {t}, {r};" for r in named]
        out.append(f"add.u32 {slice_bytes}, {slice_bytes}, {t};")
    cap, m, base, extra, big, split, late = (ctx.new("b32") for _ in range(7))
    t, c, inside, first, height, ii, hh, head = (ctx.new("b32") for _ in range(8))
    is_late = ctx.new("pred")
    n = counts[axis]
    out += [f"max.u32 {slice_bytes}, {slice_bytes}, 1;",
            f"div.u32 {cap}, {L2_BUDGET}, {slice_bytes};", f"max.u32 {cap}, {cap}, 1;",
            f"min.u32 {cap}, {cap}, {heads};",
            f"add.u32 {m}, {heads}, {cap};", f"sub.u32 {m}, {m}, 1;", f"div.u32 {m}, {m}, {cap};",
            f"div.u32 {base}, {heads}, {m};", f"rem.u32 {extra}, {heads}, {m};",
            # the first `extra` chunks hold base + 1 heads ((base + 1)·n tiles each), the rest base
            f"add.u32 {height}, {base}, 1;", f"mul.lo.u32 {big}, {height}, {n};",
            f"mul.lo.u32 {split}, {big}, {extra};", f"setp.ge.u32 {is_late}, {lin}, {split};",
            f"sub.u32 {late}, {lin}, {split};", f"selp.b32 {t}, {late}, {lin}, {is_late};",
            f"selp.b32 {height}, {base}, {height}, {is_late};",
            f"mul.lo.u32 {big}, {height}, {n};",
            f"div.u32 {c}, {t}, {big};", f"rem.u32 {inside}, {t}, {big};",
            f"mul.lo.u32 {first}, {c}, {height};",
            f"mul.lo.u32 {late}, {extra}, {base};", f"add.u32 {late}, {late}, {extra};",
            f"selp.b32 {late}, {late}, 0, {is_late};", f"add.u32 {first}, {first}, {late};",
            f"div.u32 {ii}, {inside}, {height};", f"rem.u32 {hh}, {inside}, {height};",
            f"add.u32 {head}, {first}, {hh};"]
    idx = [None] * len(counts)
    heavy = ctx.new("b32")
    out += [f"sub.u32 {heavy}, {counts[axis]}, 1;", f"sub.u32 {heavy}, {heavy}, {ii};"]
    idx[axis] = heavy
    rest = head
    for k, d in enumerate(reversed(others)):
        if k == len(others) - 1:
            idx[d] = rest
            break
        r, q = ctx.new("b32"), ctx.new("b32")
        out += [f"rem.u32 {r}, {rest}, {counts[d]};", f"div.u32 {q}, {rest}, {counts[d]};"]
        idx[d], rest = r, q
    return idx


def emit_blocks(ctx, op: Blocks) -> list[str]:
    out: list[str] = []
    counts = [ctx.get(v).reg for v in op.variadic()]
    body = op.regions[0]
    total = counts[0]
    for c in counts[1:]:
        t = ctx.new("b32")
        out.append(f"mul.lo.u32 {t}, {total}, {c};")
        total = t
    lin = ctx.new("b32")
    out.append(f"mov.u32 {lin}, %ctaid.x;")
    k = op.attrs.get("cluster", 1)
    if k > 1:  # the k CTAs of a cluster (consecutive x: the cluster is k x 1 x 1) run the same block
        out.append(f"div.u32 {lin}, {lin}, {k};")
    persistent = op.attrs.get("schedule", "grid") == "persistent"
    head, done = ctx.label("block"), ctx.label("blocks_done")
    p = ctx.new("pred")
    out.append(f"{head}:")
    out.append(f"setp.ge.u32 {p}, {lin}, {total};")
    out.append(f"@{p} bra.uni {done};")
    ctx.sync.assume_anything()
    for arg, reg in zip(body.args, block_indices(ctx, op, lin, counts, out)):
        ctx.bind(arg, Scalar(reg, I32))
    out += ctx.emit_block(body)
    if persistent:
        step = ctx.new("b32")
        out.append(f"mov.u32 {step}, %nctaid.x;")
        out.append(f"add.u32 {lin}, {lin}, {step};")
        out.append(f"bra.uni {head};")
    out.append(f"{done}:")
    return out


CONTROL_EMITTERS = {Blocks: emit_blocks, For: emit_for, If: emit_if, Yield: emit_yield}