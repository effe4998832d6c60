"""Run the attention backward — attention_bwd_prep.tk, attention_bwd_dkdv.tk, attention_bwd_dq.tk
after the forward examples/attention.tk (which gives O and the log-sum-exp L) — and check dQ, dK
and dV against torch's autograd in float64 (attention_bwd_prep.py, attention_bwd_dkdv.py and
attention_bwd_dq.py report their own kernel's outputs of the same run).

    python examples/attention_bwd.py [B H HKV N] [--causal]

On a GPU the kernels run there; without one they run on tkjit's CPU interpreter, at smaller sizes.
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import tkjit

HERE = Path(__file__).resolve().parent


def kernels(d: int, causal: bool) -> dict:
    """The forward and the three backward kernels at head dim d."""
    c = {"D": d, "CAUSAL": causal}
    return {"fwd": tkjit.load(HERE / "attention.tk", constants=c),
            "prep": tkjit.load(HERE / "attention_bwd_prep.tk", constants={"D": d}),
            "dkdv": tkjit.load(HERE / "attention_bwd_dkdv.tk", constants=c),
            "dq": tkjit.load(HERE / "attention_bwd_dq.tk", constants=c)}


def backward(ks: dict, q, k, v, o, lse, do, scale):
    """[dQ, dK, dV, Di] from the forward's O and L (outputs NaN-poisoned, so unwritten ones show)."""
    nan = float("nan")
    di = torch.full(lse.shape, nan, dtype=torch.float32, device=q.device)
    dq, dk, dv = (torch.full_like(t, nan) for t in (q, k, v))
    ks["prep"](o, do, di)
    ks["dkdv"](q, k, v, do, lse, di, dk, dv, scale)
    ks["dq"](q, k, v, do, lse, di, dq, scale)
    return [dq, dk, dv, di]


def errors(device: str, sizes=None, causal: bool = False, d: int = 128) -> tuple[str, dict]:
    """Forward and backward once on fresh random inputs; return (shape, relative errors of Di
    against float64 rowsum(dO∘O) of the forward's O, and of dQ, dK, dV against float64 autograd)."""
    bsz, h, hkv, n = sizes if sizes and len(sizes) == 4 else ((4, 16, 4, 4096) if device == "cuda" else (1, 4, 2, 150))
    bf = dict(dtype=torch.bfloat16, device=device)
    q, do = (torch.randn(bsz, h, n, d, **bf) for _ in range(2))
    k, v = (torch.randn(bsz, hkv, n, d, **bf) for _ in range(2))
    o = torch.full((bsz, h, n, d), float("nan"), **bf)
    lse = torch.full((bsz, h, n), float("nan"), dtype=torch.float32, device=device)
    scale = d ** -0.5
    ks = kernels(d, causal)
    ks["fwd"](q, k, v, o, lse, scale)
    grads = backward(ks, q, k, v, o, lse, do, scale)
    di = grads.pop()

    def rel(x, ref):
        return ((x.double() - ref).norm() / ref.norm()).item()
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    kr, vr = (t.repeat_interleave(h // hkv, dim=1) for t in leaves[1:])
    ref = F.scaled_dot_product_attention(leaves[0], kr, vr, is_causal=causal, scale=scale)
    ref.backward(do.double())
    errs = {name: rel(g, x.grad) for name, g, x in zip(("dQ", "dK", "dV"), grads, leaves)}
    errs["Di"] = rel(di, (do.double() * o.double()).sum(-1))
    return f"{bsz}x{h}(kv {hkv})x{n}x{d}{' causal' if causal else ' full'}", errs


def check(device: str, sizes=None, causal: bool = False, d: int = 128,
          outputs=("Di", "dQ", "dK", "dV")) -> tuple[str, float]:
    """(shape, the largest relative error of ``outputs``: every kernel's by default, one
    kernel's for its own driver, attention_bwd_{prep,dkdv,dq}.py)."""
    shape, errs = errors(device, sizes, causal, d)
    return shape, max(errs[name] for name in outputs)


def main(argv: list[str], title: str = "attention backward", outputs=("Di", "dQ", "dK", "dV")) -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    causal = "--causal" in argv
    shape, err = check(device, [int(a) for a in argv if a != "--causal"] or None, causal=causal, outputs=outputs)
    print(f"{title} {shape} on {device}: largest relative error of {', '.join(outputs)} {err:.2e}")
    return 0 if err < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
