"""The Hopper (sm_90a) backend: TMA, mbarrier rings, warp specialization and wgmma.

    out = emit_hopper_ptx(kernel, options=None, decisions=None)   # (ptx, metadata) or None

Two routes: the general lowering (lower.py: any block program the scheduling passes annotated,
op by op, following the mbarrier pass's protocol) and the online-softmax attention template
behind its exact matcher (attention_match.py / attention.py), which ``auto`` still prefers where
it matches, until the general lowering matches its speed. For a kernel neither takes it returns
None, so the caller falls back to the register-tile backend; the reason is appended to
``decisions`` (``{"decision": "backend", "value": "mma.sync", "why": ..., "refusal":
lower.Refusal}``) when a list is given.

The GEMM template (match.py, plan.py, gemm.py, multicast.py, streamk.py) was deleted on
2026-11-27: the general lowering took every GEMM under ``auto`` -- plain, split-K, rows TMA cannot
address, multicast pairs, stream-K -- each GPU-verified, and was within noise of the template on
the 20 GEMM benchmark rows in the same run (H200; docs/hopper-codegen.md).

``options``: ``lowering`` (``auto``: the attention template where it matches, else the general
lowering; ``general``; ``template``: the attention template only -- any other kernel, a GEMM
included, is refused with the reason), ``arch`` (only ``sm_90a`` has wgmma), ``hopper`` (False:
never take the attention template), ``unaligned_rows`` (the compiler passes its option, default
False: the general lowering then assumes rows of whole 16-byte units and leaves the copying
producer out).
Metadata is the register-tile backend's (name, entry, arch, backend, params, dims, grid, block,
smem_bytes, num_warps, decisions) plus parameter entries of kind ``tensormap`` (which tensor,
box and swizzle the launcher encodes), ``registers`` (the setmaxnreg split) and ``protocol``
(the synchronization protocol the kernel follows, as text).
"""
from __future__ import annotations

from ...ir.core import Kernel

# The attention matcher, kernel and plan are imported only for a kernel that may be attention (two
# matrix products): they are about half of this package's import, which a GEMM's cold compile would
# otherwise pay. The matcher's module is attention_match.py, not match_attention.py: a submodule
# named like the function would, once imported, rebind the package attribute `match_attention`.
_LAZY = {"attention_protocol": ".attention", "AttentionKernel": ".attention",
         "make_attention_plan": ".attention_plan", "match_attention": ".attention_match",
         "AttentionMatch": ".attention_match"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(_LAZY[name], __name__), name)

ARCHS = ("sm_90a",)
DELETED = ("the GEMM template was deleted on 2026-11-27 (the general lowering takes GEMMs: "
           "lowering='auto' or 'general'); 'template' is the attention template only")


def emit_hopper_ptx(kernel: Kernel, options: dict | None = None,
                    decisions: list | None = None) -> tuple[str, dict] | None:
    options = dict(options or {})
    schedule_ir = None
    if kernel.tile_program is not None:  # the async-schedule pass's kernel: the walk comes from it
        schedule_ir, kernel = kernel, kernel.tile_program
    lowering = options.get("lowering", "auto")
    template_why = general_why = None
    if lowering in ("auto", "template"):  # auto: the attention template is still measured faster
        out = _attention(kernel, options)
        if not isinstance(out, str):
            return out
        template_why = out
    if lowering in ("auto", "general"):
        from .lower import lower_kernel, refusal
        refused = refusal(kernel, options)
        if refused is None:
            return lower_kernel(kernel, options, schedule_ir)
        general_why = refused
    if decisions is not None:
        parts = []
        if general_why is not None:
            parts.append(f"the general lowering cannot take {general_why.text()}")
        if template_why is not None:
            parts.append(f"no template matches ({template_why})" if lowering == "auto"
                         else f"lowering='template': {template_why}; {DELETED}")
        decisions.append({"decision": "backend", "value": "mma.sync",
                          "why": f"the Hopper wgmma path does not apply: {'; '.join(parts)}",
                          "refusal": general_why})
    return None


AHEAD_OF_GENERAL = ("attention",)
"""Templates that ``lowering=auto`` still prefers to the general lowering, because the general
lowering is measured slower on their benchmark rows: the attention forward (0.67-0.93x of its
template, H200, 2026-11-27, benchmarks/results/2026-11-27-nvidia-h200-s10-attn-3*.json; issue 18).
The GEMM template is gone (deleted 2026-11-27, see above)."""


def _attention(kernel: Kernel, options: dict):
    """The attention template's PTX and metadata, or why it does not take ``kernel``."""
    arch = options.get("arch", "sm_90a")
    if arch not in ARCHS:
        return f"the target is {arch}; wgmma and setmaxnreg need sm_90a"
    if options.get("hopper", True) is False:
        return "turned off by the 'hopper' option"
    attention = plan_attention(kernel)
    if isinstance(attention, str):
        return f"kernel '{kernel.name}' is not the attention pattern: {attention}"
    from .attention import AttentionKernel
    return AttentionKernel(*attention).emit()


def plan_attention(kernel: Kernel):
    """The matched attention kernel and its plan, or why it is not one this path compiles. A kernel
    with fewer than two matrix products is no attention kernel: it never imports the attention
    modules (a GEMM's cold compile)."""
    from ...ir.ops import MMA_OPS
    products = sum(isinstance(op, MMA_OPS) for op in kernel.walk())
    if products < 2:
        return (f"it has {products} matrix product(s); attention has two (S = mma_ABt(q, k), "
                "then mma_AB(cvt(p), v, ...))")
    from .attention_match import NoMatch, match_attention
    m = match_attention(kernel)
    if isinstance(m, str):
        return m
    from .attention_plan import make_attention_plan
    try:
        return m, make_attention_plan(m)
    except NoMatch as e:
        return str(e)


__all__ = ["emit_hopper_ptx", "plan_attention", "attention_protocol", "match_attention", "DELETED"]
