"""Every workload family, by the name ``--only`` takes, in the order they run. Each module has
``cases(mode) -> [params]`` and ``run(params, ctx, kernels) -> [Row]``."""
from __future__ import annotations

from . import attention, copybw, gemm, generality, jit, layernorm, rotary, selftest, softmax

FAMILIES = {module.NAME: module for module in (gemm, attention, copybw, layernorm, softmax, rotary, generality,
                                                jit, selftest)}
NEEDS_COPY = ("layernorm", "softmax", "rotary", "generality")
"""The memory-bound families are reported as a fraction of the copy bandwidth: they bring it along."""


def select(only: list[str] | None) -> list[str]:
    """The families to run, in order; ``copy`` joins any memory-bound one."""
    if not only:
        return list(FAMILIES)
    chosen = set(only)
    if chosen & set(NEEDS_COPY):
        chosen.add("copy")
    return [name for name in FAMILIES if name in chosen]


def plan(names: list[str], mode) -> list[dict]:
    """The cases to run: ``{"id", "family", "params"}``, numbered in order."""
    cases = []
    for name in names:
        for params in FAMILIES[name].cases(mode):
            cases.append({"id": len(cases), "family": name, "params": params})
    return cases


def describe(case: dict) -> tuple[str, str]:
    """(what, shape) of a case that left no row of its own (it hung, crashed, or was not run)."""
    module = FAMILIES[case["family"]]
    shape_of = getattr(module, "shape_of", None)
    params = case["params"]
    shape = shape_of(params) if shape_of else " ".join(f"{key}={value}" for key, value in params.items())
    return case["family"], shape
