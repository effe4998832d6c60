"""Run rotary.tk — rotary position embedding, rotate-half convention — and check it against the
Hugging Face formulation (q·cos + rotate_half(q)·sin with the tables repeated over both halves).

    python examples/rotary.py [B H N]

On a GPU the kernel runs there; without one it runs on tkjit's CPU interpreter, at smaller sizes.
"""
import sys
from pathlib import Path

import torch

import tkjit

HERE = Path(__file__).resolve().parent
D = 128  # the kernel's constant D


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def check(device: str, sizes=None) -> tuple[str, float]:
    """Run the kernel once on fresh random inputs; return (shape, relative error vs float32 torch)."""
    bsz, h, n = sizes or ((4, 32, 4096) if device == "cuda" else (1, 3, 200))
    x = torch.randn(bsz, h, n, D, dtype=torch.bfloat16, device=device)
    inv_freq = 10000.0 ** (-torch.arange(0, D, 2, device=device).float() / D)
    freqs = torch.arange(n, device=device).float()[:, None] * inv_freq[None, :]   # [N, D/2]
    cos, sin = freqs.cos().bfloat16(), freqs.sin().bfloat16()
    y = torch.full_like(x, float("nan"))

    rotary = tkjit.load(HERE / "rotary.tk")
    rotary(x, cos, sin, y)

    cos2, sin2 = torch.cat((cos, cos), dim=-1).float(), torch.cat((sin, sin), dim=-1).float()
    ref = x.float() * cos2 + rotate_half(x.float()) * sin2
    return f"{bsz}x{h}x{n}x{D}", ((y.float() - ref).norm() / ref.norm()).item()


def main(argv: list[str]) -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shape, err = check(device, [int(a) for a in argv] or None)
    print(f"rotary {shape} on {device}: relative error {err:.2e}")
    return 0 if err < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
