"""The passes over tile IR, and the one place that registers them (by importing their modules).

Add a pass: write ``tkjit/passes/<name>.py`` with a ``@register_pass`` frozen dataclass, import
it below, and put it into DEFAULT_PIPELINE where it belongs.
"""
from .decisions import Decision, DecisionLog, subject_of
from .manager import (IRSnapshots, Pass, PassContext, PassManager, Pipeline, describe_options, get_pass,
                      register_pass, registered_passes, unregister_pass)

from . import canonicalize, checks  # noqa: E402,F401  (registers the passes)
from . import async_schedule, branch_tail, epilogue, fuse_elementwise, grid, layout, mask_branch, mbarrier, own_trips, pipeline, reg_budget, row_sums, scale_fold, smem_plan, stream_cols, tile_split, warp_spec  # noqa: E402,F401

from .hopper import HOPPER_PIPELINE  # noqa: E402

PORTABLE_PIPELINE = "canonicalize,stream-cols"
"""The target-independent passes: what a target without scheduling passes runs (stream-cols
changes only kernels whose register tiles are too large for the register file)."""

ASYNC_PASS = "async-schedule"
"""The last pass of the default sm_90a pipeline: the schedule the Hopper passes decided, rewritten
as IR (roles, rings, protocol steps; async_schedule.py). The emitter reads the kernel it rewrote."""

DEFAULT_PIPELINE = f"{PORTABLE_PIPELINE},{HOPPER_PIPELINE},{ASYNC_PASS}"
"""What ``tkjit.compile`` runs for sm_90a: canonicalize, then the Hopper scheduling passes (they
annotate; the interpreter runs the IR from before the first of them, the Hopper emitter follows
their annotations and the register-tile backend ignores them), then async-schedule (the schedule
printed as IR; ``CompileResult.async_ir``)."""

PIPELINES = {"sm_90a": DEFAULT_PIPELINE}


CHECKED_PASS = "checks"
"""Checked mode's pass (checks.py): in the default pipeline right after canonicalize, only then."""


def default_pipeline(arch: str, checked: bool = False) -> str:
    """The pipeline ``tkjit.compile`` runs for ``arch`` when none is given (with ``checked``,
    checked mode's ``checks`` after canonicalize)."""
    pipeline = PIPELINES.get(arch, PORTABLE_PIPELINE)
    if checked:
        first, _, rest = pipeline.partition(",")
        pipeline = ",".join(p for p in (first, CHECKED_PASS, rest) if p)
    return pipeline


__all__ = ["ASYNC_PASS", "CHECKED_PASS", "DEFAULT_PIPELINE", "PORTABLE_PIPELINE", "default_pipeline", "Decision", "DecisionLog", "IRSnapshots", "Pass", "PassContext",
           "PassManager", "Pipeline", "describe_options", "get_pass", "register_pass",
           "registered_passes", "subject_of", "unregister_pass"]
