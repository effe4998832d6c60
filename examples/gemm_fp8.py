"""Run gemm_fp8.tk — C = scale_a·scale_b·A·Bᵀ with A, B in fp8 e4m3 — and check it against torch.

    python examples/gemm_fp8.py [M N K]

On a GPU the kernel runs there; without one it runs on tkjit's CPU interpreter, at smaller sizes.
"""
import sys
from pathlib import Path

import torch

import tkjit

HERE = Path(__file__).resolve().parent

def _run(device: str, m: int, n: int, k: int) -> float:
    a = (torch.randn(m, k, device=device) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device=device) * 2).to(torch.float8_e4m3fn)
    c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=device)
    scale_a, scale_b = 0.5, 0.25

    gemm = tkjit.load(HERE / "gemm_fp8.tk")
    gemm(a, b, c, scale_a, scale_b)

    ref = scale_a * scale_b * (a.float() @ b.float().T)
    return ((c.float() - ref).norm() / ref.norm()).item()


def check(device: str, sizes=None) -> tuple[str, float]:
    """Run the kernel once on fresh random inputs; return (shape, relative error vs float32 torch).

    No GPU backend emits fp8 products yet (issue 17): on a GPU the compile is tried, and when it is
    refused the kernel runs on the CPU interpreter instead, which the shape column says."""
    m, n, k = sizes or ((4096, 4096, 4096) if device == "cuda" else (200, 300, 256))
    if device == "cuda":
        try:
            return f"{m}x{n}x{k}", _run(device, m, n, k)
        except tkjit.TkError as e:
            print(f"gemm_fp8: the GPU backends cannot run it yet ({e.message.splitlines()[0]}); "
                  "running it on the CPU interpreter", file=sys.stderr)
            m, n, k = 200, 300, 256
            return f"{m}x{n}x{k} (CPU interpreter: no GPU backend emits fp8 yet)", _run("cpu", m, n, k)
    return f"{m}x{n}x{k}", _run(device, m, n, k)


def main(argv: list[str]) -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shape, err = check(device, [int(a) for a in argv] or None)
    print(f"gemm_fp8 {shape} on {device}: relative error {err:.2e}")
    return 0 if err < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
