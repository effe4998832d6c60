"""2-CTA clusters with TMA multicast (the grid pass's ``multicast = 2``): which loads a pair of
CTAs shares, decided for the mbarrier pass (which marks their rings ``cluster = 2``) and followed
by the general Hopper lowering.

    pair = pair_plan(kernel)     # Pair(taken, why, loads)

The pair's CTAs (``%cluster_ctarank`` 0 and 1) run the tiles whose *paired* block index -- the
block loop's second to last, the one the grouped order walks in groups (a GEMM's tile row) -- is
``2 mp`` and ``2 mp + 1``, every other index equal. A ring-loop load whose coordinates do not
depend on the paired index (a GEMM's B) is the same box in both: each CTA loads half of it with
``.multicast::cluster`` (``split`` "panels": half of its swizzle panels, an even count; "rows":
half of the rows of every panel, whole 8-row swizzle atoms), which lands at the same offset in
both CTAs and completes its bytes on both CTAs' ``full[s]``. A ring holding such a load is
shared by the pair: each CTA's ``empty[s]`` counts both CTAs' consumers.

Not taken (the reason is logged by the mbarrier pass): the variant for rows TMA cannot address
(the compile option ``unaligned_rows``, which the mbarrier pass records on the kernel as the
attribute ``unaligned_rows``: its copying producer fills only its own CTA's stage; multicast is
an optimization, so that variant simply runs unpaired), split-K (its tile is a cluster already),
ping-pong consumers (with this refusal removed, session 16, the gelu example at 128 x 128
compiled, passed the compile-time sync check and ran in the roles interpreter bit for bit at
three shapes, the off-edge CTA included, but hung on an H200 at 4096^3. The cause, found after:
the ping-pong branch of ``sync_protocol.standard_protocol`` returned before the pair's
``ClusterSync`` steps, so a CTA could multicast into its peer and arrive on the peer's barriers
before the peer initialized them. ``sync_protocol.paired`` now gives that branch both syncs.
Session 17, lifted again on an H200: correct while each pair had one unit, a hang at the first
shape with more units than pairs -- the consumers' alternating walk strode by %nctaid.x, the
producer's by %nclusterid.x (now both ``lower_producer.walk_stride``), which the PTX simulator
shows (tests/test_general_multicast.py) and the roles interpreter, walking the protocol's tiles,
cannot. With that fixed the H200 ran it correctly at 7 shapes, 1 to 7.8 units a pair, but one
timing run found it no faster than the unpaired tile -- benchmarks/results/
2026-11-27-nvidia-h200-s17-pingpong-pairs.json -- so it stays refused, now for speed), the
heaviest-first order, a block loop of one index, ring loops whose bounds depend on the paired
index (the pair's rings would be filled for different trip counts), no load the pair can share.
Asked for together with stream-K (``grid{multicast=2,stream_k=1}``), the pair is taken and
stream-K is not (the mbarrier pass places no fix-up, lower_stream_k.not_applied says why), as the
GEMM template did.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.core import Kernel
from ..ir.ops import Load
from .hopper import block_loop, depends_on, pipelined_loops, shared_loads, swizzle_bytes

CTAS = 2
"""The CTAs of a pair (the only cluster size multicast takes)."""


@dataclass
class Pair:
    """Whether the pair is taken (``ctas`` 2) or not (1), why, and its shared loads -> split."""

    ctas: int
    why: str
    loads: dict = field(default_factory=dict)
    """IR load -> "panels" | "rows": how the pair halves it."""

    @property
    def asked(self) -> bool:
        return self.why != ""


def asked_for(kernel: Kernel) -> int:
    return int(kernel.attrs.get("multicast", 0) or 0)


def halving(load: Load) -> str:
    """How the pair halves ``load``'s box: "panels", "rows", or '' (neither halves evenly)."""
    t = load.result.type
    span = swizzle_bytes(t)
    if span == 0:
        return ""
    panels = t.cols * t.dtype.nbytes // span
    if panels % 2 == 0:
        return "panels"
    if (t.rows // 2) % 8 == 0 and t.rows % 2 == 0:
        return "rows"
    return ""


def pair_plan(kernel: Kernel) -> Pair:
    asked = asked_for(kernel)
    if asked == 0:
        return Pair(1, "")
    if asked == 1:
        return Pair(1, "turned off by the grid pass (multicast = 1)")
    if asked != CTAS:
        return Pair(1, f"multicast = {asked}: only pairs of CTAs share loads")
    if kernel.attrs.get("unaligned_rows"):
        return Pair(1, "not in the variant for rows TMA cannot address (compile option unaligned_rows): "
                       "its copying producer fills only its own CTA's stage, so each CTA loads its tiles "
                       "whole, unpaired")
    blocks = block_loop(kernel)
    if int(blocks.attrs.get("split", 1) or 1) > 1:
        return Pair(1, "split-K already makes each tile a cluster of its own")
    if kernel.attrs.get("pingpong"):
        return Pair(1, "not with ping-pong consumers: the pair runs correctly there but measured no faster "
                       "than the unpaired tile (H200, ratio to cuBLAS at 4096^3 0.959 vs 0.959, 8192^3 0.958 "
                       "vs 0.990; warp-spec{mode=cooperative} takes it)")
    if "heavy" in blocks.attrs:
        return Pair(1, "not with the heaviest-first tile order")
    args = blocks.regions[0].args
    if len(args) < 2:
        return Pair(1, "the block loop has one index: there is no tile row to pair")
    paired = {args[-2]}
    loops = pipelined_loops(kernel)  # directly in the block body (the mbarrier pass checks)
    loads: dict = {}
    uneven = []
    for loop in loops:
        if any(depends_on(v, paired) for v in loop.operands[:3]):
            return Pair(1, f"the loop at {_where(loop)} has bounds that depend on %{args[-2].hint}: the "
                           "pair's CTAs would fill their shared rings for different trip counts")
        for ld in shared_loads(loop.regions[0]):
            if any(depends_on(v, paired) for v in ld.variadic()):
                continue
            how = halving(ld)
            if how:
                loads[ld] = how
            else:
                uneven.append(ld)
    if not loads:
        more = (f" (%{uneven[0].result.hint}'s box halves into neither whole swizzle panels nor whole "
                "8-row atoms)") if uneven else ""
        return Pair(1, f"no ring load's coordinates are free of %{args[-2].hint}: nothing for the pair "
                       f"to share{more}")
    names = ", ".join(f"%{ld.result.hint} ({how}: {_half(ld, how)})" for ld, how in loads.items())
    return Pair(CTAS, f"asked for by the grid pass (grid{{multicast=2}}): clusters of 2 CTAs on the tiles "
                      f"with %{args[-2].hint} = 2mp and 2mp + 1; each CTA loads half of {names} with "
                      ".multicast::cluster into both, its other loads whole; the rings of those loads "
                      "count both CTAs' consumers on empty[s]; the pair walks cdiv(tiles, 2) units along "
                      f"%{args[-2].hint} (an odd last row: the off-edge CTA still loads its half, its "
                      "other boxes zero-filled, its stores clipped)", loads)



def lifting_pingpong(plan=None):
    """``plan`` (pair_plan by default) with the ping-pong refusal lifted: the kernel's ``pingpong``
    attribute hidden while it plans. Not used by the compiler: for the GPU probe
    (benchmarks/probes/pingpong_pairs.py) and the simulator tests that check the pair in-process
    while the refusal stands (``pairs.pair_plan = lifting_pingpong()``)."""
    plan = plan or pair_plan

    def lifted(kernel: Kernel) -> Pair:
        pingpong = kernel.attrs.pop("pingpong", None)
        try:
            return plan(kernel)
        finally:
            if pingpong is not None:
                kernel.attrs["pingpong"] = pingpong
    return lifted

def _half(ld: Load, how: str) -> str:
    t = ld.result.type
    span = swizzle_bytes(t)
    if how == "panels":
        n = t.cols * t.dtype.nbytes // span
        return f"{n // 2} of {n} panels, {t.nbytes // 2} of {t.nbytes} B"
    return f"{t.rows // 2} of {t.rows} rows of each panel, {t.nbytes // 2} of {t.nbytes} B"


def _where(op) -> str:
    return op.span.location() if op.span is not None else "?"


__all__ = ["Pair", "pair_plan", "asked_for", "halving", "CTAS"]
