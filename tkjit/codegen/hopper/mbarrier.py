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
