"""The attention forward the GPU tests check tkjit's kernels against: float64 torch, grouped-query
heads, optionally causal; and one launch of an attention example with its outputs NaN-poisoned."""
from __future__ import annotations

import torch


def exact(q, k, v, scale: float, causal: bool):
    """O and the natural-log log-sum-exp L of softmax(scale · Q·Kᵀ)·V in float64 (K and V shared
    by groups of query heads; causal: each row sees keys up to its own position)."""
    rep = q.shape[1] // k.shape[1]
    kr, vr = (t.double().repeat_interleave(rep, dim=1) for t in (k, v))
    s = scale * q.double() @ kr.transpose(-1, -2)
    if causal:
        n = q.shape[2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ vr, torch.logsumexp(s, -1)


def run(kernel, name: str, q, k, v, scale: float):
    """One launch of examples/<name>.tk (``attention`` writes O and L, the others O) on outputs
    poisoned with NaN, synchronized; returns (O, L) (L stays NaN for the kernels without it)."""
    o = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:3], float("nan"), device=q.device)
    if name == "attention":
        kernel(q, k, v, o, lse, scale)
    else:
        kernel(q, k, v, o, scale)
    torch.cuda.synchronize()
    return o, lse
