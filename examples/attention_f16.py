"""Run attention_f16.tk — attention on f16 inputs — and check it against torch.

    python examples/attention_f16.py [B H HKV N] [--causal]

On a GPU the kernel runs there; without one it runs on tkjit's CPU interpreter, at smaller sizes.
The inputs, the reference and the report are attention_nol.py's (``run_and_check``).
"""
import importlib.util
import sys
from pathlib import Path

import torch

_spec = importlib.util.spec_from_file_location("tkjit_example_attention_nol",
                                               Path(__file__).resolve().parent / "attention_nol.py")
nol = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nol)


def check(device: str, sizes=None, causal: bool = False, d: int = 128) -> tuple[str, float]:
    """Run the kernel once on fresh random f16 inputs; return (shape, relative error of O against
    float32 torch)."""
    return nol.run_and_check("attention_f16", device, sizes, causal=causal, d=d,
                             constants={"CAUSAL": causal, "D": d}, dtype=torch.float16)


if __name__ == "__main__":
    sys.exit(nol.main(sys.argv[1:], "attention_f16", check, flags=True))
