"""Split-K: the CTAs of a cluster add their partial accumulators through distributed shared
memory (a reduce-scatter), so no workspace, counter or second kernel is needed.

A split tile is computed by a cluster of S CTAs; CTA r (``%cluster_ctarank``) ran its own slice
of the K loop. Every consumer thread of every CTA holds the same fragment of the tile (the same
registers are the same rows and columns), so its R accumulator registers are cut into S runs of
R/S (whole 8-column groups); part p goes to CTA p, which adds the parts and stores them:

    cluster barrier 1   every CTA is past its K loop: its ring is drained (consumers waited on
                        every stage, wgmma wait_group 0), so it may receive into it
    send                for each p != r: st.shared::cluster.v4 of part p into CTA p's slot for r
                        (slot r, or r - 1 past p: S - 1 slots of consumers x 128 threads x R/S f32,
                        thread-contiguous 16-byte vectors, so a warp's stores are conflict-free)
    cluster barrier 2   release/acquire: every part has landed; nothing touches another CTA's
                        shared memory after it, so CTAs may exit freely
    add                 the owner (p == r) adds its S - 1 slots to its own part, in slot order

``barrier.cluster`` waits for the cluster's non-exited threads only: the producer warpgroup has
exited (or will, having issued its last load, which needs nothing from the consumers) by then.
The rank is a run-time value and registers cannot be indexed, so the code for each p is emitted
once and chosen by predicates (uniform across the CTA).
"""
from __future__ import annotations

from .builder import Builder

VEC = 4
"""f32 values per shared-memory vector access."""
THREADS = 128


def cluster_sync(b: Builder) -> None:
    b("barrier.cluster.arrive.release.aligned;", "barrier.cluster.wait.acquire.aligned;")


def parts(regs: list[str], split: int) -> list[list[str]]:
    n = len(regs) // split
    return [regs[p * n:(p + 1) * n] for p in range(split)]


def reduce_scatter(b: Builder, regs: list[str], split: int, rank: str, buffer: str, consumer: str,
                   consumers: int, thread: str) -> None:
    """Leave in part ``rank`` of ``regs`` (this thread's accumulators) the sum over the cluster.
    ``buffer``: the shared address of the receive slots in this CTA (the same offset in every
    CTA); ``consumer`` and ``thread``: this thread's consumer index and index in its warpgroup."""
    runs = parts(regs, split)
    vectors = len(runs[0]) // VEC
    slot_bytes = consumers * vectors * THREADS * VEC * 4
    mine = b.reg()
    b(f"mad.lo.u32 {mine}, {consumer}, {vectors * THREADS}, {thread};", f"shl.b32 {mine}, {mine}, 4;",
      f"add.u32 {mine}, {mine}, {buffer};")
    cluster_sync(b)
    for p, run in enumerate(runs):
        skip, slot, local, remote = b.pred(), b.reg(), b.reg(), b.reg()
        later = b.pred()
        # slot of this CTA's part in CTA p: rank, or rank - 1 past p
        b(f"setp.eq.u32 {skip}, {rank}, {p};", f"setp.gt.u32 {later}, {rank}, {p};",
          f"mov.u32 {slot}, {rank};", f"@{later} sub.u32 {slot}, {rank}, 1;",
          f"mad.lo.u32 {local}, {slot}, {slot_bytes}, {mine};",
          f"mapa.shared::cluster.u32 {remote}, {local}, {p};")
        for v in range(vectors):
            vals = ", ".join(run[VEC * v:VEC * (v + 1)])
            b(f"@!{skip} st.shared::cluster.v4.f32 [{remote}+{v * THREADS * VEC * 4}], {{{vals}}};")
    cluster_sync(b)
    for p, run in enumerate(runs):
        other, end = b.pred(), b.label(f"part_{p}_added")
        b(f"setp.ne.u32 {other}, {rank}, {p};", f"@{other} bra.uni {end};")
        for q in range(split - 1):
            for v in range(vectors):
                got = [b.reg("f32") for _ in range(VEC)]
                b(f"ld.shared.v4.f32 {{{', '.join(got)}}}, [{mine}+{q * slot_bytes + v * THREADS * VEC * 4}];")
                b(*(f"add.f32 {r}, {r}, {x};" for r, x in zip(run[VEC * v:VEC * (v + 1)], got)))
        b.place(end)
