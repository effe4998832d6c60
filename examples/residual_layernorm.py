"""Run residual_layernorm.tk — H = X + Res and Y = LayerNorm(H), two outputs — and check both against torch.

    python examples/residual_layernorm.py [ROWS]

On a GPU the kernel runs there; without one it runs on tkjit's CPU interpreter, at smaller sizes.
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import tkjit

HERE = Path(__file__).resolve().parent

D = 1024  # the kernel's constant D


def check(device: str, sizes=None) -> tuple[str, float]:
    """Run the kernel once on fresh random inputs; return (shape, the larger relative error of H
    and Y against float32 torch)."""
    rows = sizes[0] if sizes else (16384 if device == "cuda" else 100)
    x = (torch.randn(rows, D, device=device) * 2 + 0.5).bfloat16()
    res = torch.randn(rows, D, dtype=torch.bfloat16, device=device)
    w = torch.randn(D, dtype=torch.bfloat16, device=device)
    bias = torch.randn(D, dtype=torch.bfloat16, device=device)
    h = torch.full((rows, D), float("nan"), dtype=torch.bfloat16, device=device)
    y = torch.full((rows, D), float("nan"), dtype=torch.bfloat16, device=device)
    eps = 1e-5

    kernel = tkjit.load(HERE / "residual_layernorm.tk")
    kernel(x, res, w, bias, h, y, eps)

    ref_h = x.float() + res.float()
    ref_y = F.layer_norm(ref_h, (D,), w.float(), bias.float(), eps=eps)
    return f"{rows}x{D}", max(((h.float() - ref_h).norm() / ref_h.norm()).item(), ((y.float() - ref_y).norm() / ref_y.norm()).item())


def main(argv: list[str]) -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shape, err = check(device, [int(a) for a in argv] or None)
    print(f"residual_layernorm {shape} on {device}: relative error {err:.2e}")
    return 0 if err < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
