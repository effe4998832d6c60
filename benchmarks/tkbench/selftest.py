"""Dry run only: a kernel that does not compile (gemm.tk with mma_AB's operands swapped), to show
that such a kernel becomes a row carrying the diagnostic's first line, and the run goes on."""
from __future__ import annotations

from .context import EXAMPLES
from .rows import ERROR, Row

NAME = "selftest"


def cases(mode) -> list[dict]:
    return [{"kind": "compile-error"}] if mode.dry_run else []


def run(p: dict, ctx, kernels) -> list[Row]:
    import tkjit
    row = Row(NAME, "self-test: broken gemm", "A, B swapped in mma_AB", ref_name="(none)", params=p)
    source = (EXAMPLES / "gemm.tk").read_text()
    broken = source.replace("mma_AB(a, b, acc)", "mma_AB(b, a, acc)")
    if broken == source:
        raise RuntimeError("examples/gemm.tk no longer holds 'mma_AB(a, b, acc)': update the self-test")
    try:
        tkjit.compile(broken, filename="gemm_swapped.tk")
    except Exception as exc:  # noqa: BLE001
        row.fail(exc)
    if row.status != ERROR:
        raise RuntimeError("gemm.tk with mma_AB's operands swapped compiled: the self-test expects an error")
    return [row.finish()]
