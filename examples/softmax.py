"""Run softmax.tk — row softmax in f32 — and check it against torch.

    python examples/softmax.py [ROWS]

On a GPU the kernel runs there; without one it runs on tkjit's CPU interpreter, at smaller sizes.
"""
import sys
from pathlib import Path

import torch

import tkjit

HERE = Path(__file__).resolve().parent
C = 1024  # the kernel's constant C


def check(device: str, sizes=None) -> tuple[str, float]:
    """Run the kernel once on fresh random inputs; return (shape, relative error vs float32 torch)."""
    rows = sizes[0] if sizes else (16384 if device == "cuda" else 100)
    x = (torch.randn(rows, C, device=device) * 3 - 4).bfloat16()
    y = torch.full((rows, C), float("nan"), dtype=torch.bfloat16, device=device)

    softmax = tkjit.load(HERE / "softmax.tk")
    softmax(x, y)

    ref = torch.softmax(x.float(), dim=1)
    return f"{rows}x{C}", ((y.float() - ref).norm() / ref.norm()).item()


def main(argv: list[str]) -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shape, err = check(device, [int(a) for a in argv] or None)
    print(f"softmax {shape} on {device}: relative error {err:.2e}")
    return 0 if err < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
