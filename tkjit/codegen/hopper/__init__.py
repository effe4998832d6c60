"""The Hopper (sm_90a) backend: TMA, mbarrier rings, warp specialization and wgmma.

    out = emit_hopper_ptx(kernel, options=None, decisions=None)   # (ptx, metadata) or None

Two routes: the general lowering (lower.py: any block program the scheduling passes annotated,
op by op, following the mbarrier pass's protocol) and the two templates behind exact matchers
(the GEMM of match.py / gemm.py: under ``auto`` only for what the general lowering refuses; the
online-softmax attention of attention_match.py / attention.py: ahead of it until it matches its
speed). For a kernel neither takes it returns None, so the caller
falls back to the register-tile backend; the reason is appended to ``decisions``
(``{"decision": "backend", "value": "mma.sync", "why": ..., "refusal": lower.Refusal}``) when a
list is given.

``options``: ``lowering`` (``auto``: a template in ``AHEAD_OF_GENERAL`` where one matches, else
the general lowering of lower.py, else a template for what it refuses; ``general``;
``template``), ``arch`` (only ``sm_90a`` has wgmma), ``hopper`` (False: never take this path),
``unaligned_rows`` (default True here; the compiler passes its option, default False: the GEMM
then assumes rows of whole 16-byte units and leaves their fallback out).
Metadata is the register-tile backend's (name, entry, arch, backend, params, dims, grid, block,
smem_bytes, num_warps, decisions) plus parameter entries of kind ``tensormap`` (which tensor,
box and swizzle the launcher encodes), ``registers`` (the setmaxnreg split) and ``protocol``
(the synchronization protocol the kernel follows, as text).
"""
from __future__ import annotations

from ...ir.core import Kernel
from .gemm import GemmKernel, gemm_protocol
from .match import GemmMatch, NoMatch, match_gemm
from .plan import Plan, make_plan

# The attention matcher, kernel and plan are imported when a kernel is not a GEMM (lazily: they are
# about half of this package's import, which a GEMM's cold compile would otherwise pay). The
# matcher's module is attention_match.py, not match_attention.py: a submodule named like the
# function would, once imported, rebind the package attribute `match_attention` to the module.
_LAZY = {"attention_protocol": ".attention", "AttentionKernel": ".attention",
         "make_attention_plan": ".attention_plan", "match_attention": ".attention_match",
         "AttentionMatch": ".attention_match"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(_LAZY[name], __name__), name)

ARCHS = ("sm_90a",)


def emit_hopper_ptx(kernel: Kernel, options: dict | None = None,
                    decisions: list | None = None) -> tuple[str, dict] | None:
    options = dict(options or {})
    lowering = options.get("lowering", "auto")
    template_why = general_why = None
    if lowering == "auto":  # a template still measured faster than the general lowering goes first
        out = _ahead_of_general(kernel, options)
        if out is not None:
            return out
    if lowering in ("auto", "general"):
        from .lower import lower_kernel, refusal
        refused = refusal(kernel, options)
        if refused is None:
            return lower_kernel(kernel, options)
        general_why = refused
    if lowering in ("auto", "template"):
        out = _template(kernel, options)
        if not isinstance(out, str):
            if general_why is not None and decisions is not None:
                decisions.append({"decision": "backend", "value": "wgmma template",
                                  "why": f"the general lowering cannot take {general_why.text()}; "
                                         "the template of this kernel's pattern can"})
            return out
        template_why = out
    if decisions is not None:
        parts = []
        if general_why is not None:
            parts.append(f"the general lowering cannot take {general_why.text()}")
        if template_why is not None:
            parts.append(f"no template matches ({template_why})")
        decisions.append({"decision": "backend", "value": "mma.sync",
                          "why": f"the Hopper wgmma path does not apply: {'; '.join(parts)}",
                          "refusal": general_why})
    return None


AHEAD_OF_GENERAL = ("attention",)
"""Templates that ``lowering=auto`` still prefers to the general lowering, because the general
lowering is measured slower on their benchmark rows: the attention forward (0.67-0.93x of its
template, H200, 2026-11-27, benchmarks/results/2026-11-27-nvidia-h200-s10-attn-3*.json; issue 18).
The GEMM template is not here: the general lowering is within 2% of it on every GEMM row
(docs/hopper-codegen.md), so under auto it serves only what the general lowering refuses (rows
TMA cannot address went to the general lowering's copying producer on 2026-11-27, stream-K goes
through the general lowering since session 11; multicast remains)."""


def _ahead_of_general(kernel: Kernel, options: dict):
    """The PTX and metadata of a template in AHEAD_OF_GENERAL that matches ``kernel``, else None.
    A kernel of the GEMM pattern is no attention kernel: it never imports the attention modules."""
    if options.get("arch", "sm_90a") not in ARCHS or options.get("hopper", True) is False:
        return None
    if not isinstance(match_gemm(kernel), str):  # the GEMM pattern (no plan needed to know it)
        return None
    attention = plan_attention(kernel)
    if isinstance(attention, str):
        return None
    from .attention import AttentionKernel
    return AttentionKernel(*attention).emit()


def _template(kernel: Kernel, options: dict):
    """The GEMM or attention template's PTX and metadata, or why neither matches."""
    reason = _refusal(kernel, options)
    if isinstance(reason, str) and " is not the GEMM pattern: " in reason:
        attention = plan_attention(kernel)
        if not isinstance(attention, str):
            from .attention import AttentionKernel
            return AttentionKernel(*attention).emit()
        reason = f"{reason}; nor the attention pattern: {attention}"
    if isinstance(reason, str):
        return reason
    g, plan = reason
    return GemmKernel(g, plan, unaligned_rows=bool(options.get("unaligned_rows", True))).emit()


def plan_gemm(kernel: Kernel, options: dict | None = None) -> tuple[GemmMatch, Plan] | str:
    """The matched GEMM and its plan, or why the Hopper path does not apply."""
    return _refusal(kernel, dict(options or {}))


def plan_attention(kernel: Kernel):
    """The matched attention kernel and its plan, or why it is not one this path compiles."""
    from .attention_match import match_attention
    from .attention_plan import make_attention_plan
    m = match_attention(kernel)
    if isinstance(m, str):
        return m
    try:
        return m, make_attention_plan(m)
    except NoMatch as e:
        return str(e)


def _refusal(kernel: Kernel, options: dict):
    arch = options.get("arch", "sm_90a")
    if arch not in ARCHS:
        return f"the target is {arch}; wgmma and setmaxnreg need sm_90a"
    if options.get("hopper", True) is False:
        return "turned off by the 'hopper' option"
    g = match_gemm(kernel)
    if isinstance(g, str):
        return f"kernel '{kernel.name}' is not the GEMM pattern: {g}"
    try:
        return g, make_plan(g)
    except NoMatch as e:
        return f"kernel '{kernel.name}': {e}"


__all__ = ["emit_hopper_ptx", "plan_gemm", "gemm_protocol", "match_gemm", "plan_attention",
           "attention_protocol", "match_attention"]
