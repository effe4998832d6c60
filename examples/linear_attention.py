"""Run linear_attention.tk -- chunked causal linear attention with a D x D state carried in
registers -- and check it against float64 torch.

    python examples/linear_attention.py [B H N]

On a GPU the kernel runs there; without one it runs on tkjit's CPU interpreter, at smaller sizes.
"""
import sys
from pathlib import Path

import torch

import tkjit

HERE = Path(__file__).resolve().parent

D, C = 64, 64  # the kernel's constants


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk: int = C) -> torch.Tensor:
    """Causal linear attention O[i] = sum over j <= i of (q_i . k_j) v_j, in float64, computed
    chunk by chunk as the kernel does (a state S = sum of K_c^T V_c of earlier chunks) but without
    rounding anything."""
    q, k, v = (t.double() for t in (q, k, v))
    n = q.shape[-2]
    state = torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=torch.float64, device=q.device)
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=torch.float64, device=q.device)
    for c0 in range(0, n, chunk):
        qc, kc, vc = (t[..., c0:c0 + chunk, :] for t in (q, k, v))
        out[..., c0:c0 + chunk, :] = qc @ state + (qc @ kc.transpose(-1, -2)).tril() @ vc
        state = state + kc.transpose(-1, -2) @ vc
    return out


def check(device: str, sizes=None) -> tuple[str, float]:
    """Run the kernel once on fresh random inputs; return (shape, relative error of O against
    float64 torch)."""
    bsz, h, n = sizes if sizes and len(sizes) == 3 else ((4, 16, 4096) if device == "cuda" else (1, 2, 300))
    q, k, v = (torch.randn(bsz, h, n, D, dtype=torch.bfloat16, device=device) / D ** 0.5 for _ in range(3))
    o = torch.full((bsz, h, n, D), float("nan"), dtype=torch.bfloat16, device=device)
    kernel = tkjit.load(HERE / "linear_attention.tk")
    kernel(q, k, v, o)
    ref = reference(q, k, v)
    err = ((o.double() - ref).norm() / ref.norm()).item()
    return f"{bsz}x{h}x{n}x{D}", err


def main(argv: list[str]) -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shape, err = check(device, [int(a) for a in argv] or None)
    print(f"linear_attention {shape} on {device}: relative error {err:.2e}")
    return 0 if err < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
