"""fuse-elementwise: register tiles that never exist as tiles, where holding them would not fit.

An elementwise op on a register tile writes a whole tile of registers, and the op reading it reads
them all; warp-spec counts each such temporary as a live tile (liveness.consumer_pressure), so a
kernel with a few steps of elementwise arithmetic (a score's scale, bias and mask) can need more
registers than a consumer gets and fall off the wgmma path. This pass marks two kinds of tile
with ``fuse`` (liveness.deferred; the emitters and the estimate follow the one rule):

- ``chain``: a single-use temporary of an elementwise op (map, arithmetic with tiles, vectors or
  scalars, row/column broadcast, cmp_select, iota) whose one user, in the same block, is
  elementwise too: the user's emitter computes it element by element, fragment register by
  fragment register, as it reads it (codegen/emit_fused.py), so its operands live until the user
  instead. No wgmma and no op with regions may stand between the two (a wgmma writes its
  accumulator in place; a loop's carried tiles are rewritten where it ends).
- ``remat``: an index-derived tile -- iota, and elementwise ops of index-derived tiles and
  scalars only -- read only by elementwise ops: computed again at each use (an add and a convert
  an index, then the arithmetic) instead of held across the loop body or the loop. A tile a
  product reads is never index-derived: its accumulator is written in place, so what is
  recomputed after the product must not read it.

``mode``: ``auto`` marks them only where they change the fit: the most cooperative consumers
whose registers hold the tiles (warp_spec.fitting_split) with nothing deferred, with the chains,
with the chains and the index tiles; the first of these that reaches the best fit is taken and
logged with the counts. A kernel that fits as it is keeps its code, and so does one that pins
its consumers (``@consumers``: warp-spec takes the pin without weighing registers, so there is
no fit to change; examples/attention_alibi.tk pins 2 consumers at an estimated 356 registers and
ptxas fits it in 232 without spilling). ``chains`` / ``all`` mark them regardless; ``off`` marks nothing. f32 register tiles only.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import PassError
from ..ir.core import Kernel, Op, Value
from ..ir.ops import BINARY_OPS, BROADCAST_OPS, MMA_OPS, UNARY_OPS, CausalMask, CmpSelect, Cvt, Iota
from ..ir.types import F32, ScalarType, TileType
from .hopper import block_loop, walk_block
from .liveness import FUSE
from .manager import Pass, PassContext, register_pass

MODES = ("auto", "off", "chains", "all")
MAKERS = (*UNARY_OPS, *BINARY_OPS, *BROADCAST_OPS, CmpSelect, Iota)
"""Ops whose tile can be deferred (``computes_elementwise``)."""


def computes_elementwise(op: Op) -> bool:
    """Whether ``op`` makes an f32 register tile whose every element is a function of the same
    element of its tile operands (and of scalars, or of its row's / column's vector value):
    what can be computed one element at a time wherever it is read."""
    if not isinstance(op, MAKERS) or len(op.results) != 1:
        return False
    if isinstance(op, BINARY_OPS) and op.KIND != "arith":
        return False
    t = op.result.type
    return isinstance(t, TileType) and t.space == "rt" and t.dtype == F32


def reads_elementwise(user: Op, v: Value) -> bool:
    """Whether ``user`` reads tile ``v`` element by element through the emitters' element view
    (emit_elementwise._elements), each element once: maps, arithmetic, the tile of a broadcast,
    cmp_select, causal_mask, a narrowing cvt."""
    if user.operands.count(v) != 1 or len(user.results) != 1:
        return False
    t = user.result.type
    if not (isinstance(t, TileType) and t.space == "rt"):
        return False
    if isinstance(user, Cvt):
        return t.dtype != F32
    if isinstance(user, (*BROADCAST_OPS, CausalMask)):
        return user.operands[0] is v
    if isinstance(user, BINARY_OPS):
        return user.KIND == "arith"
    return isinstance(user, (*UNARY_OPS, CmpSelect))


def readers_of(kernel: Kernel) -> dict[Value, list[Op]]:
    out: dict[Value, list[Op]] = {}
    for op in walk_block(block_loop(kernel).regions[0]):
        for v in op.operands:
            out.setdefault(v, []).append(op)
    return out


def chain_ops(kernel: Kernel, readers: dict[Value, list[Op]]) -> list[Op]:
    """The single-use temporaries the chains defer (module docstring)."""
    out = []
    for op in walk_block(block_loop(kernel).regions[0]):
        if not computes_elementwise(op):
            continue
        users = readers.get(op.result, [])
        if len(users) != 1 or users[0].parent is not op.parent or not reads_elementwise(users[0], op.result):
            continue
        ops = op.parent.ops
        between = ops[ops.index(op) + 1:ops.index(users[0])]
        if any(isinstance(o, MMA_OPS) or o.regions for o in between):
            continue
        out.append(op)
    return out


def index_ops(kernel: Kernel, readers: dict[Value, list[Op]]) -> list[Op]:
    """The index-derived tiles read only elementwise (module docstring), in program order."""
    derived: set[Value] = set()
    for op in walk_block(block_loop(kernel).regions[0]):
        if computes_elementwise(op) and all(isinstance(v.type, ScalarType) or v in derived for v in op.operands) \
                and not any(isinstance(u, MMA_OPS) for u in readers.get(op.result, [])):
            derived.add(op.result)  # (a product's accumulator is written in place: never recomputed from)
    out = []
    for op in walk_block(block_loop(kernel).regions[0]):
        if len(op.results) != 1 or op.result not in derived:
            continue
        users = readers.get(op.result, [])
        if users and all(reads_elementwise(u, op.result) for u in users):
            out.append(op)
    return out


def plans(kernel: Kernel) -> list[tuple[str, dict[Op, str]]]:
    """(name, {op: fuse}) for each level ``auto`` weighs: nothing, the chains, the chains and the
    index tiles (an index tile a chain also takes is rematerialized)."""
    readers = readers_of(kernel)
    chains = {op: "chain" for op in chain_ops(kernel, readers)}
    both = dict(chains)
    both.update({op: "remat" for op in index_ops(kernel, readers)})
    return [("nothing", {}), ("chains", chains), ("chains and index tiles", both)]


def apply(kernel: Kernel, plan: dict[Op, str]) -> None:
    for op in walk_block(block_loop(kernel).regions[0]):
        if op.attrs.get("fuse") in FUSE:
            del op.attrs["fuse"]
    for op, how in plan.items():
        op.attrs["fuse"] = how


@register_pass
@dataclass(frozen=True)
class FuseElementwise(Pass):
    """The ``fuse-elementwise`` pass (module docstring)."""

    name = "fuse-elementwise"
    summary = "elementwise temporaries and index tiles computed per element at their users where holding them does not fit"
    target_specific = True
    mode: str = "auto"
    """auto (only where it changes the fit), off, chains, all (chains and index tiles)."""

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        if self.mode not in MODES:
            raise PassError(f"fuse-elementwise: mode must be {', '.join(MODES)}, got '{self.mode}'")
        apply(kernel, {})
        if self.mode == "off":
            return kernel
        levels = plans(kernel)
        if self.mode != "auto":
            _, plan = levels[1] if self.mode == "chains" else levels[2]
            why = f"asked for by fuse-elementwise{{mode={self.mode}}}"
        else:
            _, plan, why = choose(kernel, levels)
        self.mark(kernel, ctx, plan, why)
        return kernel

    @staticmethod
    def mark(kernel: Kernel, ctx: PassContext, plan: dict[Op, str], why: str) -> None:
        """Set ``fuse`` on the plan's ops and log the kernel's decision and each op's (nothing
        for an empty plan)."""
        apply(kernel, plan)
        if not plan:
            return
        chains = sum(1 for how in plan.values() if how == "chain")
        remat = len(plan) - chains
        ctx.decide(f"@{kernel.name}", f"{chains} elementwise temporar{'y' if chains == 1 else 'ies'} computed "
                   f"inside their users, {remat} index tile(s) recomputed at each use",
                   f"{why}; each is computed element by element (fragment register by fragment register) "
                   "where it is read, so no register holds it as a tile", chains=chains, remat=remat)
        readers = readers_of(kernel)
        for op, how in plan.items():
            users = readers.get(op.result, [])
            where = ", ".join(_name(u) for u in users)
            text = (f"computed element by element inside its one user, the {where}" if how == "chain"
                    else f"recomputed element by element at each of its uses ({where})")
            why = (CHAIN_WHY if how == "chain" else REMAT_WHY) + f" (fuse = {how})"
            ctx.decide(_name(op, subject=True), text, why, fuse=how)


CHAIN_WHY = ("a single-use temporary its user reads element by element: what it reads stays live until that "
             "user instead of a tile of its own")
REMAT_WHY = ("made from row/column indices and scalars only (an add and a convert an index, then its "
             "arithmetic): recomputed where it is read instead of a tile held until its last use")


def _name(op: Op, subject: bool = False) -> str:
    if subject and op.result.hint:
        return f"%{op.result.hint}"
    at = f" at {op.span.location()}" if op.span is not None else ""
    return f"{op.NAME}{at}"


def choose(kernel: Kernel, levels) -> tuple[str, dict[Op, str], str]:
    """``auto``'s level (module docstring) and why, in the counts warp-spec logs."""
    from .warp_spec import MAX_CONSUMERS, consumer_fit, fitting_split
    accs = [op.result for op in kernel.walk() if isinstance(op, MMA_OPS)]
    if not accs or len(levels[2][1]) == 0:
        return "nothing", {}, ""
    if kernel.attrs.get("consumers"):  # warp-spec takes a pinned count as it is: no fit to change
        return "nothing", {}, ""
    slabs = max(v.type.rows for v in accs) // 64
    best = max((d for d in range(1, slabs + 1) if slabs % d == 0 and d <= MAX_CONSUMERS), default=1)
    results = []
    for name, plan in levels:
        if name != "nothing" and not plan:
            continue
        apply(kernel, plan)
        found, _, need, room = fitting_split(kernel, slabs)
        n = found or 0
        if not found:
            need, room = consumer_fit(kernel, best)
        results.append((name, plan, n, need, room))
        if n == best:
            break
    apply(kernel, {})
    top = max(r[2] for r in results)
    name, plan, n, need, room = next(r for r in results if r[2] == top)
    if not plan:
        return name, {}, ""
    held = results[0]
    before = (f"holding every tile, {held[2]} consumer(s) fit" if held[2] else
              f"holding every tile no consumer split fits ({held[3]} registers needed > {held[4]} with {best})")
    return name, plan, (f"auto: {before}; deferring the {name}, {n} consumer(s) need {need} registers "
                        f"a thread of the {room} they can get")
