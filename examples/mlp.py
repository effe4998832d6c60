"""Run mlp.tk — Y = gelu_tanh(X·W1)·W2 with the hidden activations kept on chip — and check it against torch.

    python examples/mlp.py [M F]

On a GPU the kernel runs there; without one it runs on tkjit's CPU interpreter, at smaller sizes.
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import tkjit

HERE = Path(__file__).resolve().parent

D = 128  # the kernel's constant D (model width)


def check(device: str, sizes=None) -> tuple[str, float]:
    """Run the kernel once on fresh random inputs; return (shape, relative error vs float32 torch
    computing the same MLP unfused, its hidden activations rounded to bf16)."""
    m, f = sizes or ((16384, 512) if device == "cuda" else (200, 256))
    x = torch.randn(m, D, dtype=torch.bfloat16, device=device)
    w1 = (torch.randn(D, f, device=device) * D ** -0.5).bfloat16()
    w2 = (torch.randn(f, D, device=device) * f ** -0.5).bfloat16()
    y = torch.full((m, D), float("nan"), dtype=torch.bfloat16, device=device)

    mlp = tkjit.load(HERE / "mlp.tk")
    mlp(x, w1, w2, y)

    h = F.gelu(x.float() @ w1.float(), approximate="tanh").bfloat16()
    ref = h.float() @ w2.float()
    return f"{m}x{D}x{f}", ((y.float() - ref).norm() / ref.norm()).item()


def main(argv: list[str]) -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shape, err = check(device, [int(a) for a in argv] or None)
    print(f"mlp {shape} on {device}: relative error {err:.2e}")
    return 0 if err < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
