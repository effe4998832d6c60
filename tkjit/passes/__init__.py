"""The passes over tile IR, and the one place that registers them (by importing their modules).

Add a pass: write ``tkjit/passes/<name>.py`` with a ``@register_pass`` frozen dataclass, import
it below, and put it into DEFAULT_PIPELINE where it belongs.
"""
from .decisions import Decision, DecisionLog, subject_of
from .manager import (IRSnapshots, Pass, PassContext, PassManager, Pipeline, describe_options, get_pass,
                      register_pass, registered_passes, unregister_pass)

from . import canonicalize  # noqa: E402,F401  (registers the pass)
from . import grid, layout, mbarrier, pipeline, reg_budget, smem_plan, stream_cols, warp_spec  # noqa: E402,F401

from .hopper import HOPPER_PIPELINE  # noqa: E402

PORTABLE_PIPELINE = "canonicalize,stream-cols"
"""The target-independent passes: what a target without scheduling passes runs (stream-cols
changes only kernels whose register tiles are too large for the register file)."""

DEFAULT_PIPELINE = f"{PORTABLE_PIPELINE},{HOPPER_PIPELINE}"
"""What ``tkjit.compile`` runs for sm_90a: canonicalize, then the Hopper scheduling passes (they
annotate; the interpreter runs the IR from before the first of them, the Hopper emitter follows
their annotations and the register-tile backend ignores them)."""

PIPELINES = {"sm_90a": DEFAULT_PIPELINE}


def default_pipeline(arch: str) -> str:
    """The pipeline ``tkjit.compile`` runs for ``arch`` when none is given."""
    return PIPELINES.get(arch, PORTABLE_PIPELINE)


__all__ = ["DEFAULT_PIPELINE", "PORTABLE_PIPELINE", "default_pipeline", "Decision", "DecisionLog", "IRSnapshots", "Pass", "PassContext",
           "PassManager", "Pipeline", "describe_options", "get_pass", "register_pass",
           "registered_passes", "subject_of", "unregister_pass"]
