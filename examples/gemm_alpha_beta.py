"""Run gemm_alpha_beta.tk — C = alpha·A·B + beta·C in place, bf16 in and out — and check it against torch.

    python examples/gemm_alpha_beta.py [M N K]

On a GPU the kernel runs there; without one it runs on tkjit's CPU interpreter, at smaller sizes.
"""
import sys
from pathlib import Path

import torch

import tkjit

HERE = Path(__file__).resolve().parent

def check(device: str, sizes=None) -> tuple[str, float]:
    """Run the kernel once on fresh random inputs; return (shape, relative error vs float32 torch).
    C is an input too, so it is not poisoned; a NaN would still show in the error."""
    m, n, k = sizes or ((4096, 4096, 4096) if device == "cuda" else (300, 520, 200))
    a = torch.randn(m, k, dtype=torch.bfloat16, device=device)
    b = torch.randn(k, n, dtype=torch.bfloat16, device=device)
    c = torch.randn(m, n, dtype=torch.bfloat16, device=device) * 10
    alpha, beta = 0.5, -2.0
    ref = alpha * (a.float() @ b.float()) + beta * c.float()

    kernel = tkjit.load(HERE / "gemm_alpha_beta.tk")
    kernel(a, b, c, alpha, beta)

    return f"{m}x{n}x{k}", ((c.float() - ref).norm() / ref.norm()).item()


def main(argv: list[str]) -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shape, err = check(device, [int(a) for a in argv] or None)
    print(f"gemm_alpha_beta {shape} on {device}: relative error {err:.2e}")
    return 0 if err < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
