"""LayerNorm over the last dimension, ``examples/layernorm.tk`` (D = 1024), against
``F.layer_norm`` in eager PyTorch. Memory-bound: reported as GB/s over the fewest bytes (X read
and Y written once, W and Bias read once) and as a fraction of the measured copy bandwidth."""
from __future__ import annotations

from .compare import run_simple
from .rows import Row

NAME = "layernorm"
D = 1024          # the kernel's constant
EPS = 1e-5
ROWS = (8192, 65536)


def cases(mode) -> list[dict]:
    return [{"R": 32}] if mode.dry_run else [{"R": r} for r in ROWS]


def run(p: dict, ctx, kernels) -> list[Row]:
    import torch
    import torch.nn.functional as F
    r, bf16, dev = p["R"], torch.bfloat16, ctx.device
    nbytes = 2 * (2 * r * D + 2 * D)
    row = Row(NAME, "layernorm vs torch eager", f"R={r} D={D}", ref_name="F.layer_norm (eager)", params=p, bytes=nbytes)

    def make_set():
        x = (torch.randn(r, D, device=dev) * 2 + 0.5).to(bf16)
        return (x, torch.randn(D, dtype=bf16, device=dev), torch.randn(D, dtype=bf16, device=dev),
                torch.empty(r, D, dtype=bf16, device=dev))

    def tkjit(kernel, x, w, b, y):
        kernel(x, w, b, y, EPS)

    def reference(x, w, b, y):
        return F.layer_norm(x, (D,), w, b, eps=EPS)

    def exact(x, w, b):
        return F.layer_norm(x.double(), (D,), w.double(), b.double(), eps=EPS)

    return [run_simple(row, ctx, kernels, "layernorm", None, make_set=make_set, tkjit=tkjit,
                       reference=reference, exact=exact, set_bytes=nbytes)]
