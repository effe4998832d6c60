"""The Hopper (sm_90a) backend: TMA, mbarrier rings, warp specialization and wgmma.

    out = emit_hopper_ptx(kernel, options=None, decisions=None)   # (ptx, metadata) or None

One route: the general lowering (lower.py: any block program the scheduling passes annotated,
op by op, walking the schedule the async-schedule pass wrote as IR). For a kernel it does not take
it returns None, so the caller falls back to the register-tile backend; the reason is appended to
``decisions`` (``{"decision": "backend", "value": "mma.sync", "why": ..., "refusal":
lower.Refusal}``) when a list is given.

The two whole-kernel templates behind exact pattern matchers are gone. The GEMM template
(match.py, plan.py, gemm.py, multicast.py, streamk.py) was deleted on 2026-11-27, once the general
lowering took every GEMM under ``auto`` and was within noise of the template on the 20 GEMM
benchmark rows in the same run. The attention template (attention_match.py, attention_plan.py,
attention.py, attention_softmax.py) was deleted the same day, once the general lowering was
within 2% of it (or faster) on every row of the attention benchmark (D 64 / 128, causal and not,
N 1k-16k) in the same run (H200; docs/hopper-codegen.md, "The attention template retired").

``options``: ``lowering`` (``auto`` or ``general``: both take the general lowering; ``general``
makes a refusal an error upstream), ``arch`` (only ``sm_90a`` has wgmma), ``unaligned_rows``
(the compiler passes its option, default False: the general lowering then assumes rows of whole
16-byte units and leaves the copying producer out).
Metadata is the register-tile backend's (name, entry, arch, backend, params, dims, grid, block,
smem_bytes, num_warps, decisions) plus parameter entries of kind ``tensormap`` (which tensor,
box and swizzle the launcher encodes), ``registers`` (the setmaxnreg split) and ``protocol``
(the synchronization protocol the kernel follows, as text).
"""
from __future__ import annotations

from ...ir.core import Kernel

ARCHS = ("sm_90a",)


def emit_hopper_ptx(kernel: Kernel, options: dict | None = None,
                    decisions: list | None = None) -> tuple[str, dict] | None:
    options = dict(options or {})
    schedule_ir = None
    if kernel.tile_program is not None:  # the async-schedule pass's kernel: the walk comes from it
        schedule_ir, kernel = kernel, kernel.tile_program
    from .lower import lower_kernel, refusal
    refused = refusal(kernel, options)
    if refused is None:
        return lower_kernel(kernel, options, schedule_ir)
    if decisions is not None:
        decisions.append({"decision": "backend", "value": "mma.sync",
                          "why": f"the Hopper wgmma path does not apply: the general lowering cannot "
                                 f"take {refused.text()}",
                          "refusal": refused})
    return None


__all__ = ["emit_hopper_ptx"]
