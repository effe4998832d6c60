"""The performance targets of shared/docs/design.md, attached to the rows they concern: the
target's text, and whether this run meets it (None when the row has no measurement)."""
from __future__ import annotations

from .rows import ERROR, FAILURES, UNSUPPORTED

NOT_MET = (*FAILURES, UNSUPPORTED, ERROR)
"""A wrong, failed or missing kernel meets no target, however fast."""


def _ratio_at_least(value: float):
    def check(row: dict):
        return None if row.get("ratio") is None else row["ratio"] >= value
    return check


def _copy_share_at_least(value: float):
    def check(row: dict):
        return None if row.get("frac_of_copy") is None else row["frac_of_copy"] >= value
    return check


def _tkjit_ms_at_most(value: float):
    def check(row: dict):
        return None if row.get("tkjit_ms") is None else row["tkjit_ms"] <= value
    return check


def _gemm(row: dict):
    p = row["params"]
    if p.get("group") == "square" and p["M"] == 4096:
        return "≥ 1.05× cuBLAS", _ratio_at_least(1.05)
    if p.get("group") == "square" and p["M"] == 8192:
        return "≥ 1.0× cuBLAS", _ratio_at_least(1.0)
    if p.get("group") == "k-sweep" and p["K"] <= 512:
        return "≥ 1.3× cuBLAS", _ratio_at_least(1.3)
    return None


def _attention(row: dict):
    p = row["params"]
    if "cuDNN" not in row["ref_name"]:
        return None
    if p["D"] == 128 and p["N"] >= 2048:
        return "≥ 1.05× cuDNN", _ratio_at_least(1.05)
    if p["D"] == 64:
        return "≥ 1.1× cuDNN", _ratio_at_least(1.1)
    return None


def _memory_bound(row: dict):
    return "≥ 90% of copy bandwidth", _copy_share_at_least(0.9)


def _jit(row: dict):
    if row["what"] == "launch vs raw cuLaunchKernel":
        return "≤ 1.3× raw launch", _ratio_at_least(1 / 1.3)
    if row["what"].startswith("cold compile"):
        return "≤ 0.25 s", _tkjit_ms_at_most(250.0)
    if row["what"].startswith("fresh-process load"):
        return "≤ 10 ms", _tkjit_ms_at_most(10.0)
    return None


def _generality(row: dict):
    """Issue 17's and 18's targets for the examples written as a new user would."""
    kernel, ref = (row.get("extra") or {}).get("kernel", ""), row["ref_name"]
    if kernel.startswith("gemm_bias_"):
        if ref.startswith("cuBLAS"):
            return "≥ 0.97× cuBLAS matmul", _ratio_at_least(0.97)
        return "≥ 1.0× torch.compile", _ratio_at_least(1.0)
    if kernel == "bmm":
        return "≥ 0.98× torch.bmm", _ratio_at_least(0.98)
    if kernel in ("gemm_atb", "gemm_alpha_beta"):
        return "≥ 0.95× cuBLAS", _ratio_at_least(0.95)
    if kernel in ("rmsnorm", "residual_layernorm"):
        return "≥ 85% of copy bandwidth", _copy_share_at_least(0.85)
    if kernel == "attention_bwd":   # a proof of generality: speed reported, not yet targeted
        return None
    if kernel.startswith("attention_") and ref.startswith("FlexAttention"):
        return "≥ 1.2× FlexAttention", _ratio_at_least(1.2)
    if kernel in ("attention_nol", "attention_exp", "attention_mask", "attention_f16") and "cuDNN" in ref \
            and row["params"].get("N", 0) >= 4096:
        return "≥ 1.0× cuDNN", _ratio_at_least(1.0)
    return None


BY_FAMILY = {"gemm": _gemm, "generality": _generality, "attention": _attention, "layernorm": _memory_bound, "rotary": _memory_bound,
             "jit": _jit}


def attach(row: dict) -> None:
    """Set the row's ``target`` and ``meets_target`` where the design names one."""
    find = BY_FAMILY.get(row["family"])
    found = find(row) if find is not None else None
    if found is None:
        return
    text, check = found
    row["target"] = text
    row["meets_target"] = False if row["status"] in NOT_MET else check(row)
