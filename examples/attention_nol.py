"""Run attention_nol.tk — attention forward without the L output, optionally causal — and check it against torch.

    python examples/attention_nol.py [B H HKV N]

On a GPU the kernel runs there; without one it runs on tkjit's CPU interpreter, at smaller sizes.
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import tkjit

HERE = Path(__file__).resolve().parent

D = 128  # the kernel's constant D


def run_and_check(name: str, device: str, sizes=None, *, causal: bool, d: int, constants: dict,
                  dtype=torch.bfloat16) -> tuple[str, float]:
    """Run examples/<name>.tk (an attention forward writing O only: q, k, v, o, scale) once on
    fresh random inputs of ``dtype``; return (shape, relative error of O against float32 torch).
    The drivers of attention_exp, attention_f16 and attention_mask call this too."""
    bsz, h, hkv, n = sizes if sizes and len(sizes) == 4 else ((4, 16, 4, 4096) if device == "cuda" else (1, 2, 1, 300))
    q = torch.randn(bsz, h, n, d, dtype=dtype, device=device)
    k = torch.randn(bsz, hkv, n, d, dtype=dtype, device=device)
    v = torch.randn(bsz, hkv, n, d, dtype=dtype, device=device)
    o = torch.full((bsz, h, n, d), float("nan"), dtype=dtype, device=device)
    scale = d ** -0.5
    kr, vr = (t.float().repeat_interleave(h // hkv, dim=1) for t in (k, v))

    kernel = tkjit.load(HERE / f"{name}.tk", constants=constants)
    kernel(q, k, v, o, scale)

    ref = F.scaled_dot_product_attention(q.float(), kr, vr, is_causal=causal, scale=scale)
    err = ((o.float() - ref).norm() / ref.norm()).item()
    return f"{bsz}x{h}(kv {hkv})x{n}x{d}{' causal' if causal else ' full'}", err


def check(device: str, sizes=None, causal: bool = False) -> tuple[str, float]:
    """Run the kernel once on fresh random inputs; return (shape, relative error of O against
    float32 torch)."""
    return run_and_check("attention_nol", device, sizes, causal=causal, d=D, constants={"CAUSAL": causal})


def main(argv: list[str], name: str = "attention_nol", check=check, flags: bool = False) -> int:
    """``flags``: the driver takes ``--causal`` (the others' kernels fix it)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sizes = [int(a) for a in argv if a != "--causal"] or None
    shape, err = check(device, sizes, causal=True) if flags and "--causal" in argv else check(device, sizes)
    print(f"{name} {shape} on {device}: relative error {err:.2e}")
    return 0 if err < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
