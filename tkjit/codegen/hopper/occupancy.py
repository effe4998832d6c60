"""Registers for occupancy: a general-lowering kernel whose register count reg-budget left to ptxas
(no setmaxnreg, no ``.maxnreg``: ``reg_budget.FREE_WHY``) is assembled once as it is; where the
registers ptxas took hold fewer CTAs an SM than the kernel's shared memory does, it is assembled
again under the ``.maxnreg`` that holds one CTA more, and that build is kept when ptxas spills at
most ``SPILL_BYTES`` there. Both are ptxas's own answers about this very PTX, so the choice needs
no register estimate.

    build, decision = capped(ptx, metadata, report, assemble)   # build: (ptx, cubin, report) or None

Measured (H200, 2026-11-28, session 18, ``benchmarks/no_product_ab.py``, same runs, over the
register-tile backend): LayerNorm D = 4096 / 8192, ptxas's own 54 registers (4 CTAs of 256
threads an SM, shared memory holds 6) 0.954 / 0.915, and 0.959 / 0.933 in the run before;
``.maxnreg 48`` (5 CTAs, 4 bytes spilled) 0.991 / 0.976 and 0.995 / 0.980. Residual + LayerNorm
under ``.maxnreg 48`` (3 -> 4 CTAs, 200+ bytes spilled) 0.77-0.83: not kept.
"""
from __future__ import annotations

import re

from ...passes.hopper import REGISTER_FILE
from ...passes.reg_budget import ctas_by_smem

SPILL_BYTES = 4
"""The most spill-store bytes a capped build may have to be kept (LayerNorm's 4, measured faster
than a CTA an SM fewer; hundreds measured far slower)."""
MEASURED = ("LayerNorm D = 4096 / 8192, H200, session 18: ptxas's own 54 registers (4 CTAs an SM) "
            "0.954 / 0.915 of the register-tile backend, .maxnreg 48 (5 CTAs, 4 B spilled) 0.991 / 0.976; "
            "benchmarks/results/2026-11-28-nvidia-h200-s18-noprod-*.json")


def ctas_by_registers(registers: int, threads: int) -> int:
    """CTAs an SM the register file holds (registers allocated 8 a thread at a time)."""
    return REGISTER_FILE // (max(8, -(-registers // 8) * 8) * threads)


def free_registers(ptx: str, metadata: dict) -> bool:
    """The general lowering left this kernel's registers to ptxas (reg-budget's ``bound=auto``)."""
    return (metadata.get("lowering") == "general" and not re.search(r"^\.maxnreg\b", ptx, re.M)
            and "setmaxnreg" not in ptx)


def capped(ptx: str, metadata: dict, report, assemble):
    """((PTX, cubin, report) of the capped build, or None where it is not kept or not tried, the
    decision to log or None where nothing was tried; see the module). ``assemble(ptx) -> (cubin,
    report)``; ``report`` is the free build's."""
    if not free_registers(ptx, metadata) or not report.functions:
        return None, None
    threads, smem = metadata["block"][0], metadata.get("smem_bytes", 0)
    own = report.functions[0].registers
    have, room = ctas_by_registers(own, threads), ctas_by_smem(smem, threads)
    if have >= room:
        return None, None
    want = have + 1
    cap = min(255, REGISTER_FILE // (want * threads)) // 8 * 8
    if cap < 24:
        return None, None
    text = re.sub(r"^(\.reqntid [^\n]*)$", rf"\1\n.maxnreg {cap}", ptx, count=1, flags=re.M)
    cubin, rep = assemble(text)
    fn = rep.functions[0] if rep.functions else None
    if fn is None or fn.spill_store_bytes > SPILL_BYTES or ctas_by_registers(fn.registers, threads) < want:
        spilled = fn.spill_store_bytes if fn is not None else "?"
        return None, {"decision": "registers", "value": own,
                      "why": f"ptxas's own {own} registers hold {have} CTA(s) of {threads} threads an SM where "
                             f"shared memory ({smem:,} B a CTA) holds {room}; under .maxnreg {cap} ({want} CTAs) "
                             f"it spilled {spilled} B (more than {SPILL_BYTES}), so ptxas's own count stays "
                             f"({MEASURED})"}
    return (text, cubin, rep), {"decision": "registers", "value": cap,
             "why": f".maxnreg {cap}: ptxas's own {own} registers held {have} CTA(s) of {threads} threads an SM "
                    f"where shared memory ({smem:,} B a CTA) holds {room}; under .maxnreg {cap} it took "
                    f"{fn.registers}, {want} CTAs an SM, spilling {fn.spill_store_bytes} B (at most "
                    f"{SPILL_BYTES} kept; {MEASURED})"}


__all__ = ["capped", "ctas_by_registers", "ctas_by_smem", "free_registers", "SPILL_BYTES"]
