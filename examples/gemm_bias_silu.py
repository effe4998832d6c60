"""Run gemm_bias_silu.tk — C = silu(A·B + bias), bf16 in, f32 accumulation, bf16 out — and check it against torch.

    python examples/gemm_bias_silu.py [M N K]

On a GPU the kernel runs there; without one it runs on tkjit's CPU interpreter, at smaller sizes.
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import tkjit

HERE = Path(__file__).resolve().parent

def check(device: str, sizes=None) -> tuple[str, float]:
    """Run the kernel once on fresh random inputs; return (shape, relative error vs float32 torch)."""
    m, n, k = sizes or ((4096, 4096, 4096) if device == "cuda" else (300, 520, 200))
    a = torch.randn(m, k, dtype=torch.bfloat16, device=device)
    b = torch.randn(k, n, dtype=torch.bfloat16, device=device)
    bias = torch.randn(n, dtype=torch.bfloat16, device=device)
    c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=device)

    kernel = tkjit.load(HERE / "gemm_bias_silu.tk")
    kernel(a, b, bias, c)

    ref = F.silu(a.float() @ b.float() + bias.float())
    return f"{m}x{n}x{k}", ((c.float() - ref).norm() / ref.norm()).item()


def main(argv: list[str]) -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shape, err = check(device, [int(a) for a in argv] or None)
    print(f"gemm_bias_silu {shape} on {device}: relative error {err:.2e}")
    return 0 if err < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
