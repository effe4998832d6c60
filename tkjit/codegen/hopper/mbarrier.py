"""mbarrier instructions (PTX §9.7.13.15) as strings: init, arm with transaction bytes, arrive,
and the parity wait loop. Barrier operands are 32-bit shared-window addresses."""
from __future__ import annotations


def init(bar: str, count: int) -> str:
    return f"mbarrier.init.shared::cta.b64 [{bar}], {count};"


INIT_FENCE = "fence.mbarrier_init.release.cluster;"


def arrive_expect_tx(bar: str, nbytes: int) -> str:
    """Arrive once and expect ``nbytes`` of TMA traffic before the phase can complete."""
    return f"mbarrier.arrive.expect_tx.shared::cta.b64 _, [{bar}], {nbytes};"


def arrive(bar: str) -> str:
    return f"mbarrier.arrive.shared::cta.b64 _, [{bar}];"


def wait_parity(bar: str, parity: str, pred: str, label: str) -> list[str]:
    """Spin until the phase with ``parity`` has completed (try_wait may suspend a while)."""
    return [f"{label}:",
            f"mbarrier.try_wait.parity.shared::cta.b64 {pred}, [{bar}], {parity};",
            f"@!{pred} bra {label};"]


def arrive_peer(remote: str, bar: str, peer: str) -> list[str]:
    """Arrive on the mbarrier at this CTA's shared offset ``bar`` in CTA ``peer`` of the cluster
    (a multicast pair's release of a stage the peer's producer refills too), through the register
    ``remote``. Default semantics (.release.cta), as CUTLASS's ClusterBarrier::arrive: what it
    orders is this thread's wgmma reads, retired by wait_group; .release.cluster puts
    MEMBAR.ALL.GPU + ERRBAR + CGAERRBAR before every release (SASS), which measured 0.63-0.9x of
    the unpaired kernel on the H200 (the GEMM template's pair, 2026-11-21)."""
    return [f"mapa.shared::cluster.u32 {remote}, {bar}, {peer};",
            f"mbarrier.arrive.shared::cluster.b64 _, [{remote}];"]
