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


def main(argv: list[str]) -> int:
    gpu = torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    rows = int(argv[0]) if argv else (16384 if gpu else 100)
    x = (torch.randn(rows, C, device=device) * 3 - 4).bfloat16()
    y = torch.full((rows, C), float("nan"), dtype=torch.bfloat16, device=device)

    softmax = tkjit.load(HERE / "softmax.tk")
    softmax(x, y)

    ref = torch.softmax(x.float(), dim=1)
    err = ((y.float() - ref).norm() / ref.norm()).item()
    print(f"softmax {rows}x{C} on {device}: relative error {err:.2e}")
    return 0 if err < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
