"""Run the attention backward (examples/attention_bwd.py: the forward, then Di, dK/dV and dQ) and
report what attention_bwd_dq.tk computes: dQ, against float64.

    python examples/attention_bwd_dq.py [B H HKV N] [--causal]
"""
import importlib.util
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("tkjit_example_attention_bwd", HERE / "attention_bwd.py")
backward = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(backward)
OUTPUTS = ("dQ",)


def check(device: str, sizes=None, causal: bool = False, d: int = 128) -> tuple[str, float]:
    """(shape, the largest relative error of this kernel's outputs)."""
    shape, errs = backward.errors(device, sizes, causal, d)
    return shape, max(errs[name] for name in OUTPUTS)


def main(argv: list[str]) -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    causal = "--causal" in argv
    shape, err = check(device, [int(a) for a in argv if a != "--causal"] or None, causal=causal)
    print(f"attention_bwd_dq {shape} on {device}: relative error of {', '.join(OUTPUTS)} {err:.2e}")
    return 0 if err < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
