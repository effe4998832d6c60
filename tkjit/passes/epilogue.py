"""epilogue: how each register-tile store leaves the consumers of a warp-specialized kernel.

For every ``store`` of a register tile the pass decides, and logs why:

* **staged** (``epilogue = "staged"``): through the staging tile smem-plan planned for it --
  each consumer stmatrix-es its rows into its share of the staging, a round of
  ``epilogue_cols`` columns at a time, and one thread TMA-stores each round. When a round's
  staging holds an even number of 64-column panels it is used as two halves in turn (the
  stmatrix of one overlaps the TMA store still reading the other). ``staging_rounds`` gives each
  round's buffer and how many store groups may still be in flight before it writes; the mbarrier
  pass turns them into the protocol's epilogue steps (``sync_protocol.staged_store``).
* **deferred** (``epilogue = "deferred"``): staged, and held in registers of its own until the
  next tile's first wgmma group is issued, so that the tensor cores work under the stores
  (``sync_protocol.defer_store``): a persistent kernel whose tile ends in a staged store of a
  tile already in the tensor's 16-bit dtype, after a ring loop with products, where the packed
  tile fits beside the accumulators (``defer_choice``). Measured on the GEMM template (H200,
  2026-11-21): M = N = 4096 with K = 64..512 1.06-1.12 -> 1.07-1.11 of cuBLAS, neutral at 4096^3.
* otherwise from registers (no attribute): no staging planned, a 32-bit tensor, too little
  staging for a consumer's rows, split-K (each CTA stores its part), rows TMA may not address
  (the option ``unaligned_rows``), or a store the protocol cannot place (inside an ``if``, a loop
  without a ring, or a level-2 loop).

Option ``rcp`` (``rcp_choice``, the kernel attribute ``epilogue_rcp``) pins the pipe of the
reciprocals of the maps that take one (``mathfn.RCP_OPS``) for same-run A/Bs: fma (``_rcp_fma``)
or mufu (``rcp.approx``); auto leaves each map its own (gelu MUFU, the sigmoid's FMA).

It runs after reg-budget (the deferral must fit the consumers' registers) and before mbarrier
(the protocol holds the epilogue's steps). Option ``defer`` (auto/off/on: on defers wherever the tile fits, for same-run A/Bs).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import PassError
from ..ir.core import Kernel
from ..ir.ops import MMA_OPS, For, Store, Yield
from ..ir.types import BF16, F16, F32, TileType
from .hopper import block_loop, shared_loads
from .liveness import CONSUMER_OVERHEAD, consumer_pressure
from .manager import Pass, PassContext, register_pass

PANEL_COLS = 64
"""A staging panel: 64 rows x 64 columns of a 16-bit tensor, rows of 128 bytes, 128B-swizzled
(what a TMA box of 64 x 64 with CU_TENSOR_MAP_SWIZZLE_128B reads)."""
PANEL_BYTES = 64 * 128


def staging_columns(op: Store, consumers: int, whole_tiles: bool = False) -> int:
    """Columns per round of the staging smem-plan planned for ``op``, or 0 to store registers.
    ``consumers``: those sharing each tile's rows; ``whole_tiles``: ping-pong, where each of the
    two consumers has a staging of its own for all its rows."""
    t: TileType = op.operands[1].type
    g = op.operands[0].type
    if "smem" not in op.attrs or op.attrs.get("staging") not in ("tile", "chunks"):
        return 0
    if g.dtype not in (BF16, F16) or t.dtype not in (BF16, F16, F32) or t.cols % PANEL_COLS:
        return 0
    if t.rows % (64 * consumers) or op.attrs["smem"] % 1024:
        return 0
    rows = t.rows // consumers
    cols = t.cols if op.attrs["staging"] == "tile" else int(op.attrs.get("staging_cols", PANEL_COLS))
    copies, chunk_rows = (2, rows) if whole_tiles else (1, 64)
    planned = (copies * t.rows * t.cols * 2 if op.attrs["staging"] == "tile"
               else copies * consumers * chunk_rows * cols * 2)
    if copies * consumers * rows * cols * 2 > planned or t.cols % cols:
        return 0
    return cols


def staging_halves(cols: int) -> bool:
    """Whether a consumer's staging of ``cols`` columns is used as two halves in turn: when it
    holds an even number of panels."""
    return (cols // PANEL_COLS) % 2 == 0


def staging_rounds(tile_cols: int, cols: int) -> tuple[tuple[int, int], ...]:
    """(buffer, pending) per round of a staged store of ``tile_cols`` columns through a staging of
    ``cols``: buffer 0/1 the half the round writes (0: the whole staging), pending how many of
    the consumer's store groups may still read their staging before the round writes -- 1 (the
    other half's) with two halves, 0 with one buffer, and 0 at a tile's first round when the
    tile has an odd number of rounds (the last one used the same half)."""
    halves = staging_halves(cols)
    per = cols // 2 if halves else cols
    rounds = tile_cols // per
    return tuple((r % 2 if halves else 0, 1 if halves and (r > 0 or rounds % 2 == 0) else 0)
                 for r in range(rounds))


def ring_loops(kernel: Kernel) -> list[For]:
    """The block body's loops that load shared tiles (each follows a ring)."""
    return [op for op in block_loop(kernel).regions[0].ops if isinstance(op, For) and shared_loads(op.regions[0])]


def placement(kernel: Kernel, op: Store) -> str | None:
    """Where a staged store's protocol steps can stand: directly in the block body ("tile"),
    directly in a ring loop's trip that is not software-pipelined ("trip"), else None."""
    from .mbarrier import pipelined
    body = block_loop(kernel).regions[0]
    if op.parent is body:
        return "tile"
    for loop in ring_loops(kernel):
        if op.parent is loop.regions[0]:
            return "trip" if pipelined(loop) is None else None
    return None


LEVEL2_SLACK = 32
"""Registers a consumer thread keeps free beside a deferred tile past a level-2 loop (see
``defer_choice``): the MLP defers with 96 free and measured faster, the attention variants with 8
free measured 1-4% slower."""


def defer_choice(kernel: Kernel, op: Store, owners: int, pingpong: bool,
                 level2: bool = False) -> tuple[bool, str]:
    """Whether ``op`` (the tile's last op, staged) is deferred, and why (``level2``: past a loop
    software-pipelined at level 2 also where fewer than LEVEL2_SLACK registers stay free: option
    defer=on)."""
    if pingpong:
        return False, "ping-pong: a consumer's epilogue already runs while the other consumer's wgmmas do"
    if block_loop(kernel).attrs.get("schedule") != "persistent":
        return False, "one tile per CTA: no next tile to overlap the stores with"
    t: TileType = op.operands[1].type
    if t.dtype != op.operands[0].type.dtype:
        return False, "the stored tile is not already in the tensor's 16-bit dtype"
    if "regs" not in kernel.attrs:
        return False, "no register split decided (run reg-budget first)"
    regs = kernel.attrs["regs"][1]
    per_thread = t.rows * t.cols // (128 * owners)
    packed = per_thread // 2
    accs = sum(v.type.rows * v.type.cols // (128 * owners)
               for loop in ring_loops(kernel) for v in loop.results if isinstance(v.type, TileType))
    # the held tile lives through the next tile's first trip: beside the accumulators, whatever
    # else a trip holds (register tiles loaded or computed in the loop: an A operand scaled in
    # registers spilled 37 LDL/STL when only the accumulators were counted)
    trips = max([consumer_pressure(kernel, owners, within=loop).peak for loop in ring_loops(kernel)], default=0)
    # a loop the mbarrier pass software-pipelines (level 2) holds two products in flight (counted
    # as one trip, attention_nol D = 128 deferred and spilled 94 STL); beside them the held tile
    # measured slower where it leaves ptxas little room, faster where it leaves much
    from .mbarrier import level2_needs
    needs = level2_needs(kernel)
    level2_held = max([x - CONSUMER_OVERHEAD for _, x in needs], default=0)
    held = max(accs, trips, level2_held)
    room = regs - CONSUMER_OVERHEAD
    what = ("the accumulators" if held == accs else "what a trip of the loop holds" if held == trips
            else "what level 2 of the loop holds (two products in flight)")
    if needs and not level2 and held + packed > room - LEVEL2_SLACK:
        return False, (f"a loop is software-pipelined at level 2 (two products in flight): {what} "
                       f"({held}) and the packed tile ({packed}) leave fewer than {LEVEL2_SLACK} of "
                       f"the {room} registers free, and there deferring measured slower (H200, "
                       "2026-11-27, same run, lowering=general, deferred -> stored in the tile: "
                       "attention_exp D = 128 causal / non-causal +3.9 / +4.3%, attention_f16 +3.7%, "
                       "attention_nol causal +0.8%; the MLP, 96 + 32 of 224, is 1.4% faster deferred; "
                       "benchmarks/results/2026-11-27-nvidia-h200-s14-nodefer-ab.json, -deferon-ab.json)")
    if held + packed > room:
        return False, (f"the packed tile ({packed} registers) and {what} ({held}) exceed the "
                       f"{room} registers a consumer thread has beside {CONSUMER_OVERHEAD} for the rest")
    return True, (f"each consumer thread holds {'its accumulators' if held == accs else what} ({held} "
                  f"registers) and the previous tile packed to 16 bits ({packed}) within its {regs}; a "
                  "tile's stores run after the next tile's first wgmma group is issued (or after the last tile)")


def _deferrable(kernel: Kernel, op: Store) -> bool:
    """The tile ends in ``op`` after a ring loop with products (what ``defer_store`` overlaps)."""
    ops = [x for x in block_loop(kernel).regions[0].ops if not isinstance(x, Yield)]
    if not ops or ops[-1] is not op:
        return False
    return any(isinstance(x, MMA_OPS) for loop in ring_loops(kernel) for x in loop.regions[0].ops)


def _split_k(kernel: Kernel) -> bool:
    """Split-K takes the tile: each CTA of the cluster stores its part from registers."""
    return int(block_loop(kernel).attrs.get("split", 1) or 1) > 1 and \
        any(isinstance(x, MMA_OPS) for loop in ring_loops(kernel) for x in loop.walk())


def row_may_be_unaligned(param) -> bool:
    """Whether a row of ``param`` may not be a whole number of 16-byte units: its length is a
    named dim, or a constant that is not such a multiple."""
    last = param.type.dims[-1]
    return isinstance(last, str) or (last * param.type.dtype.nbytes) % 16 != 0


RCP_MEASURED = (
    "H200, 2026-11-27, 128x128 ping-pong bias + gelu at 4096^3, same run: its reciprocal on the "
    "FMA pipe (768 SASS instructions a thread more, one MUFU an element fewer) took 308 K SM "
    "cycles against 298 K on MUFU (ncu; the plain GEMM 280 K), 0.911 against 0.942x cuBLAS (the "
    "generality table's timing); with its exponential on the FMA pipe too (a variant measured and "
    "dropped), 321 K and 0.875x. The other consumer's wgmmas do not hide the epilogue: it costs "
    "about a cycle a warp instruction, a MUFU one no dearer than an FMA one "
    "(benchmarks/results/2026-11-27-nvidia-h200-s16-gelu-rcp.json)")
"""Why ``auto`` moves no reciprocal: what the FMA-pipe reciprocal measured where MUFU was
thought to be the cost."""


SIGMOID_MUFU_MEASURED = (
    "H200, 2026-11-27, two same runs of benchmarks/epilogue_variants.py (the generality table's "
    "timing), the bias + silu GEMM against cuBLAS, the sigmoid's reciprocal on the FMA pipe / on "
    "MUFU: 0.963 / 0.988 and 0.968 / 1.000 at 4096^3 (128x128 ping-pong), 1.003 / 1.006 and "
    "0.975 / 0.990 at 8192^3, the outputs the same; benchmarks/results/2026-11-27-nvidia-h200-s17-"
    "silu-mufu-{1,2}.json")
"""Why ``auto`` puts the sigmoid's reciprocal on MUFU after a tensor-core product."""


def rcp_choice(kernel: Kernel, asked: str) -> tuple[str, str]:
    """(the pinned pipe, why) of the reciprocals of the maps that take one (``mathfn.RCP_OPS``),
    or ("", "") where ``auto`` leaves each map its own or the kernel has none. ``auto`` pins MUFU
    where a kernel with a tensor-core product has a map whose own reciprocal is on the FMA pipe
    (the sigmoid's: sigmoid, silu, gelu_tanh): measured faster there (SIGMOID_MUFU_MEASURED); gelu's
    is on MUFU already, and a kernel with no product keeps each map's own."""
    from ..codegen.mathfn import RCP_OPS
    from ..ir.ops import MMA_OPS
    names = sorted({op.NAME for op in block_loop(kernel).walk() if op.NAME in RCP_OPS})
    if not names:
        return "", ""
    if asked == "auto":
        fma_own = [n for n in names if RCP_OPS[n] == "fma"]
        if not fma_own or not any(isinstance(op, MMA_OPS) for op in kernel.walk()):
            return "", ""
        return "mufu", (f"{', '.join(fma_own)}: auto, in the epilogue of a tensor-core product, one MUFU "
                        "rcp.approx instead of the FMA pipe's seven instructions an element, which the "
                        f"other consumer's wgmmas do not hide ({SIGMOID_MUFU_MEASURED})")
    return asked, f"{', '.join(names)}: asked for by the pass option rcp={asked}"


@register_pass
@dataclass(frozen=True)
class Epilogue(Pass):
    """The ``epilogue`` pass: staged or register stores, the staging's rounds, the deferral."""

    name = "epilogue"
    summary = "register-tile stores: staged through shared memory and TMA or from registers; deferred or not"
    target_specific = True
    defer: str = "auto"
    """auto: defer a tile's staged store under the next tile's first wgmma group where it fits (past
    a loop at level 2, with LEVEL2_SLACK registers to spare); on: wherever it fits; off."""
    rcp: str = "auto"
    """fma / mufu: pin the epilogue's reciprocals to that pipe (``rcp_choice``); auto: MUFU for the
    sigmoid's after a tensor-core product (SIGMOID_MUFU_MEASURED), else each map's own (RCP_MEASURED
    says why gelu's stays on MUFU)."""

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        if self.defer not in ("auto", "off", "on"):
            raise PassError(f"epilogue: defer must be auto, on or off, got '{self.defer}'")
        if self.rcp not in ("auto", "fma", "mufu"):
            raise PassError(f"epilogue: rcp must be auto, fma or mufu, got '{self.rcp}'")
        consumers = kernel.attrs.get("consumers")
        if not isinstance(consumers, int):
            raise PassError("epilogue: the kernel has no consumer count; run warp-spec first")
        pingpong = bool(kernel.attrs.get("pingpong"))
        owners = 1 if pingpong else consumers
        for op in block_loop(kernel).walk():
            if not isinstance(op, Store) or not isinstance(op.operands[1].type, TileType) \
                    or op.operands[1].type.space != "rt":
                continue
            op.attrs.pop("epilogue", None)
            op.attrs.pop("epilogue_cols", None)
            where = f"store at {op.span.location()}" if op.span else "store"
            cols = staging_columns(op, owners, pingpong)
            why = self.registers_because(kernel, op, cols, ctx)
            if why:
                if "smem" in op.attrs:
                    ctx.decide(where, "epilogue: registers", why)
                continue
            rounds = staging_rounds(op.operands[1].type.cols, cols)
            halves = staging_halves(cols)
            layout = (f"{len(rounds)} round(s) of {cols // 2 if halves else cols} columns per consumer, "
                      + ("two halves of its staging in turn (a round's stmatrix overlaps the store of "
                         "the other half)" if halves else "one staging buffer"))
            op.attrs["epilogue"] = "staged"
            op.attrs["epilogue_cols"] = cols
            deferred, reason = False, ""
            if _deferrable(kernel, op) and op.attrs.get("staging_in") is not None:
                reason = ("its staging lives in the one slot of a tile loaded once per tile "
                          "(pipeline{staging=slot}), which the next tile's first product reads: "
                          "the store cannot wait for it")
            elif _deferrable(kernel, op) and op.operands[1].type.dtype.bits == 16:
                deferred, reason = defer_choice(kernel, op, owners, pingpong, level2=self.defer == "on")
                if deferred and self.defer == "off":
                    deferred, reason = False, "the pass option defer=off"
            if deferred:
                op.attrs["epilogue"] = "deferred"
            ctx.decide(where, "staged: stmatrix + TMA store" + (", deferred to the next tile's first wgmma group"
                                                              if deferred else ""),
                       f"{layout}; " + (reason if deferred else "stored where the tile computes it"),
                       rounds=len(rounds), cols=cols, deferred=deferred)
            if reason and not deferred:
                ctx.decide(where, "epilogue overlap: none", reason)
        kernel.attrs.pop("epilogue_rcp", None)
        pipe, why = rcp_choice(kernel, self.rcp)
        if pipe:
            kernel.attrs["epilogue_rcp"] = pipe
            ctx.decide(f"@{kernel.name}", f"epilogue reciprocals on {'the FMA pipe' if pipe == 'fma' else 'MUFU'}",
                       why, epilogue_rcp=pipe)
        return kernel

    @staticmethod
    def registers_because(kernel: Kernel, op: Store, cols: int, ctx: PassContext) -> str:
        """Why ``op`` is stored from registers ('' when it is staged)."""
        if op.attrs.get("unstaged") and op.operands[0].type.dtype not in (BF16, F16):
            return (f"it stores to {op.operands[0].type.dtype.name}: the staging takes 16-bit tensors "
                    "(stmatrix), so the pipeline pass planned none")
        if op.attrs.get("unstaged") and not any(isinstance(o, MMA_OPS) for o in kernel.walk()):
            return "smem-plan planned no staging for it (no matrix product: it stores from registers)"
        if op.attrs.get("unstaged"):
            return ("the pipeline pass planned no staging for it: in this persistent loop the "
                    "staging would cost a ring loop a stage")
        if not cols:
            return ("no staging smem-plan planned for it fits: it needs a 16-bit tensor, whole "
                    "64-column panels and rows in 64-row slabs of every consumer")
        if _split_k(kernel):
            return "split-K: each CTA of the cluster stores its part of the tile from registers"
        if ctx.options.unaligned_rows and row_may_be_unaligned(op.operands[0]):
            return (f"{op.operands[0].hint}'s rows may not be whole 16-byte units (option "
                    "unaligned_rows), which a TMA store cannot address")
        if placement(kernel, op) is None:
            return ("it is not directly in the tile or in the trip of a ring loop that is not "
                    "software-pipelined, where the protocol's epilogue steps can stand")
        return ""
