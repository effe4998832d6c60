"""Run attention.tk — forward attention with grouped-query heads, optionally causal — and check
the output O and the log-sum-exp L against torch.

    python examples/attention.py [B H HKV N] [--causal] [--d 64]

On a GPU the kernel runs there; without one it runs on tkjit's CPU interpreter, at smaller sizes.
"""
import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import tkjit

HERE = Path(__file__).resolve().parent


def reference(q, k, v, scale, causal):
    """O and the natural-log log-sum-exp of the scaled scores, in f32."""
    group = q.shape[1] // k.shape[1]
    k, v = k.float().repeat_interleave(group, dim=1), v.float().repeat_interleave(group, dim=1)
    scores = scale * q.float() @ k.transpose(-1, -2)
    if causal:
        n = q.shape[2]
        mask = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    o = F.scaled_dot_product_attention(q.float(), k, v, is_causal=causal, scale=scale)
    return o, torch.logsumexp(scores, dim=-1)


def check(device: str, sizes=None, causal: bool = False, d: int = 128) -> tuple[str, float]:
    """Run the kernel once on fresh random inputs; return (shape, the larger relative error of O
    and L against a float64 reference)."""
    default = (4, 16, 4, 4096) if device == "cuda" else (1, 4, 2, 300)
    bsz, h, hkv, n = sizes if sizes and len(sizes) == 4 else default
    q = torch.randn(bsz, h, n, d, dtype=torch.bfloat16, device=device)
    k = torch.randn(bsz, hkv, n, d, dtype=torch.bfloat16, device=device)
    v = torch.randn(bsz, hkv, n, d, dtype=torch.bfloat16, device=device)
    o = torch.full((bsz, h, n, d), float("nan"), dtype=torch.bfloat16, device=device)
    lse = torch.full((bsz, h, n), float("nan"), dtype=torch.float32, device=device)
    scale = d ** -0.5

    attention = tkjit.load(HERE / "attention.tk", constants={"D": d, "CAUSAL": causal})
    attention(q, k, v, o, lse, scale)

    ref_o, ref_lse = reference(q, k, v, scale, causal)
    err_o = ((o.float() - ref_o).norm() / ref_o.norm()).item()
    err_l = ((lse - ref_lse).norm() / ref_lse.norm()).item()
    kind = "causal" if causal else "full"
    return f"{bsz}x{h}(kv {hkv})x{n}x{d} {kind}", max(err_o, err_l)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, metavar="B H HKV N")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--d", type=int, default=128, help="head dimension (the constant D)")
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shape, err = check(device, args.sizes, args.causal, args.d)
    print(f"attention {shape} on {device}: relative error {err:.2e} (O and L)")
    return 0 if err < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
