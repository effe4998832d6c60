"""Run attention_f16.tk — attention on f16 inputs — and check it against torch.

    python examples/attention_f16.py [B H HKV N] [--causal]

On a GPU the kernel runs there; without one it runs on tkjit's CPU interpreter, at smaller sizes.
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import tkjit

HERE = Path(__file__).resolve().parent


def check(device: str, sizes=None, causal: bool = False, d: int = 128) -> tuple[str, float]:
    """Run the kernel once on fresh random inputs; return (shape, relative error of O against
    float32 torch)."""
    bsz, h, hkv, n = sizes if sizes and len(sizes) == 4 else ((4, 16, 4, 4096) if device == "cuda" else (1, 2, 1, 300))
    q = torch.randn(bsz, h, n, d, dtype=torch.float16, device=device)
    k = torch.randn(bsz, hkv, n, d, dtype=torch.float16, device=device)
    v = torch.randn(bsz, hkv, n, d, dtype=torch.float16, device=device)
    o = torch.full((bsz, h, n, d), float("nan"), dtype=torch.float16, device=device)
    scale = d ** -0.5
    kr, vr = (t.float().repeat_interleave(h // hkv, dim=1) for t in (k, v))

    kernel = tkjit.load(HERE / "attention_f16.tk", constants={"CAUSAL": causal, "D": d})
    kernel(q, k, v, o, scale)

    ref = F.scaled_dot_product_attention(q.float(), kr, vr, is_causal=causal, scale=scale)
    err = ((o.float() - ref).norm() / ref.norm()).item()
    return f"{bsz}x{h}(kv {hkv})x{n}x{d}{' causal' if causal else ' full'}", err


def main(argv: list[str]) -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    causal = "--causal" in argv
    shape, err = check(device, [int(a) for a in argv if a != "--causal"] or None, causal=causal)
    print(f"attention_f16 {shape} on {device}: relative error {err:.2e}")
    return 0 if err < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
