"""Run the attention backward (examples/attention_bwd.py: the forward, then Di, dK/dV and dQ) and
report what attention_bwd_prep.tk computes: Di, against float64.

    python examples/attention_bwd_prep.py [B H HKV N] [--causal]
"""
import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("tkjit_example_attention_bwd",
                                               Path(__file__).resolve().parent / "attention_bwd.py")
backward = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(backward)
OUTPUTS = ("Di",)


def check(device: str, sizes=None, causal: bool = False, d: int = 128) -> tuple[str, float]:
    """(shape, the largest relative error of this kernel's outputs)."""
    return backward.check(device, sizes, causal, d, outputs=OUTPUTS)


if __name__ == "__main__":
    sys.exit(backward.main(sys.argv[1:], "attention_bwd_prep", OUTPUTS))
