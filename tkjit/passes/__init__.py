"""The passes over tile IR, and the one place that registers them (by importing their modules).

Add a pass: write ``tkjit/passes/<name>.py`` with a ``@register_pass`` frozen dataclass, import
it below, and put it into DEFAULT_PIPELINE where it belongs.
"""
from .decisions import Decision, DecisionLog, subject_of
from .manager import (IRSnapshots, Pass, PassContext, PassManager, Pipeline, describe_options, get_pass,
                      register_pass, registered_passes, unregister_pass)

from . import canonicalize  # noqa: E402,F401  (registers the pass)
from . import grid, layout, mbarrier, pipeline, reg_budget, smem_plan, warp_spec  # noqa: E402,F401

DEFAULT_PIPELINE = "canonicalize"
"""What ``tkjit.compile`` runs. To come, in order: layout, warp-spec, pipeline, mbarrier,
smem-plan, reg-budget, grid, lower."""

__all__ = ["DEFAULT_PIPELINE", "Decision", "DecisionLog", "IRSnapshots", "Pass", "PassContext",
           "PassManager", "Pipeline", "describe_options", "get_pass", "register_pass",
           "registered_passes", "subject_of", "unregister_pass"]
