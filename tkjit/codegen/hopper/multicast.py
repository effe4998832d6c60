"""2-CTA clusters with TMA multicast of B for the persistent GEMM (plan ``multicast = 2``).

The two CTAs of a cluster (``%cluster_ctarank`` r = 0, 1) always work on a *pair* of tiles: the
same B column block n, tile rows m = 2·mp and 2·mp + 1. Each CTA loads its own A box and half
of B's stage (MN-major B: half of its 64-column panels; K-major B: half of its rows, a box of
BN/2 rows) with ``.multicast::cluster`` (ctaMask 0b11), so each half lands at the same offset in
both CTAs and completes its bytes on the ``full[s]`` at the same offset in both. B's L2 -> SM
traffic halves.

The ring protocol of the pair:

    full[s]   count 1 (this CTA's producer's arrive.expect_tx of the whole stage: its A, both
              halves of B); the peer's half may land before that arrival (tx goes negative,
              the phase cannot complete while the arrival is pending)
    empty[s]  count 2 x consumers: every consumer warpgroup of *both* CTAs arrives on both CTAs'
              empty[s] (the local arrive, and mapa + mbarrier.arrive.shared::cluster on the
              peer's), because either producer's half overwrites the stage in both CTAs. The
              remote arrive keeps the default .release.cta semantics, as CUTLASS's
              ClusterBarrier::arrive does: what it orders is this thread's wgmma reads, retired by
              wait_group; .release.cluster puts MEMBAR.ALL.GPU + ERRBAR + CGAERRBAR before every
              release (SASS), which measured 0.63-0.9x of the unpaired kernel on the H200
    start     mbarrier.init, fence.mbarrier_init.release.cluster, then a cluster barrier: no
              remote arrival or multicast byte reaches a barrier before it is initialised
    end       the consumers meet at a cluster barrier before exit, so no CTA exits while its
              peer's consumers may still arrive on its empty barriers

The pair walks *pair units* u = clusterid, += nclusterid over cdiv(tiles_m, 2) x tiles_n units
(grouped by group/2 unit rows, the same tile rows as the unpaired order). Odd tail: when tiles_m
is odd, the last unit row's second tile lies past M; that CTA still runs the unit (its A boxes
lie wholly outside A: TMA zero-fills them and still counts their bytes; its stores are clipped
away), because its half of B is what its peer needs.
"""
from __future__ import annotations

from .builder import Builder

CTAS = 2
MASK = (1 << CTAS) - 1


def cluster_sync(b: Builder) -> None:
    """barrier.cluster with release/acquire: every non-exited thread of both CTAs meets."""
    b("barrier.cluster.arrive.release.aligned;", "barrier.cluster.wait.acquire.aligned;")


def load_2d(dst: str, tmap: str, inner: str, outer: str, bar: str) -> str:
    """One box into shared offset ``dst`` of every CTA of the cluster, completing its bytes on
    the mbarrier at offset ``bar`` in each."""
    return (f"cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
            f".multicast::cluster [{dst}], [{tmap}, {{{inner}, {outer}}}], [{bar}], {MASK};")


def arrive_peer(b: Builder, bar: str, peer: str) -> list[str]:
    """Arrive on the mbarrier at this CTA's shared offset ``bar`` in CTA ``peer`` of the cluster
    (default semantics: no cluster-scope memory barrier, see above)."""
    remote = b.reg()
    return [f"mapa.shared::cluster.u32 {remote}, {bar}, {peer};",
            f"mbarrier.arrive.shared::cluster.b64 _, [{remote}];"]
