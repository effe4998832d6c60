"""Run bmm.tk — batched C[b] = A[b]·B[b], bf16 in, f32 accumulation, bf16 out — and check it against torch.

    python examples/bmm.py [BATCH M N K]

On a GPU the kernel runs there; without one it runs on tkjit's CPU interpreter, at smaller sizes.
"""
import sys
from pathlib import Path

import torch

import tkjit

HERE = Path(__file__).resolve().parent

def check(device: str, sizes=None) -> tuple[str, float]:
    """Run the kernel once on fresh random inputs; return (shape, relative error vs float32 torch)."""
    bt, m, n, k = sizes or ((8, 2048, 2048, 2048) if device == "cuda" else (3, 200, 300, 100))
    a = torch.randn(bt, m, k, dtype=torch.bfloat16, device=device)
    b = torch.randn(bt, k, n, dtype=torch.bfloat16, device=device)
    c = torch.full((bt, m, n), float("nan"), dtype=torch.bfloat16, device=device)

    bmm = tkjit.load(HERE / "bmm.tk")
    bmm(a, b, c)

    ref = torch.bmm(a.float(), b.float())
    return f"{bt}x{m}x{n}x{k}", ((c.float() - ref).norm() / ref.norm()).item()


def main(argv: list[str]) -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shape, err = check(device, [int(a) for a in argv] or None)
    print(f"bmm {shape} on {device}: relative error {err:.2e}")
    return 0 if err < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
