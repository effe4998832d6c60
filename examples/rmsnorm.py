"""Run rmsnorm.tk — RMSNorm over the last dimension, f32 math — and check it against torch.

    python examples/rmsnorm.py [ROWS]

On a GPU the kernel runs there; without one it runs on tkjit's CPU interpreter, at smaller sizes.
"""
import sys
from pathlib import Path

import torch

import tkjit

HERE = Path(__file__).resolve().parent

D = 1024  # the kernel's constant D


def check(device: str, sizes=None) -> tuple[str, float]:
    """Run the kernel once on fresh random inputs; return (shape, relative error vs float32 torch)."""
    rows = sizes[0] if sizes else (16384 if device == "cuda" else 100)
    x = (torch.randn(rows, D, device=device) * 2 + 0.5).bfloat16()
    w = torch.randn(D, dtype=torch.bfloat16, device=device)
    y = torch.full((rows, D), float("nan"), dtype=torch.bfloat16, device=device)
    eps = 1e-6

    rmsnorm = tkjit.load(HERE / "rmsnorm.tk")
    rmsnorm(x, w, y, eps)

    xf = x.float()
    ref = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()
    return f"{rows}x{D}", ((y.float() - ref).norm() / ref.norm()).item()


def main(argv: list[str]) -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shape, err = check(device, [int(a) for a in argv] or None)
    print(f"rmsnorm {shape} on {device}: relative error {err:.2e}")
    return 0 if err < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
