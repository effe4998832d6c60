"""Run attention_mask.tk — causal attention with the mask applied on every trip — and check it against torch.

    python examples/attention_mask.py [B H HKV N]

On a GPU the kernel runs there; without one it runs on tkjit's CPU interpreter, at smaller sizes.
The inputs, the reference and the report are attention_nol.py's (``run_and_check``).
"""
import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("tkjit_example_attention_nol",
                                               Path(__file__).resolve().parent / "attention_nol.py")
nol = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nol)


def check(device: str, sizes=None, d: int = 128) -> tuple[str, float]:
    """Run the (always causal) kernel once on fresh random inputs; return (shape, relative error
    of O against float32 torch)."""
    return nol.run_and_check("attention_mask", device, sizes, causal=True, d=d, constants={"D": d})


if __name__ == "__main__":
    sys.exit(nol.main(sys.argv[1:], "attention_mask", check))
