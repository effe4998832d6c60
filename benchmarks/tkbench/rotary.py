"""Rotary position embedding (rotate-half), ``examples/rotary.tk`` (D = 128), against the
Hugging Face formulation in eager PyTorch, ``x·cos + rotate_half(x)·sin`` with its cached
[N, D] tables. Memory-bound: GB/s over X read, Y written and the two [N, D/2] tables read once,
and as a fraction of the copy bandwidth."""
from __future__ import annotations

from .compare import run_simple
from .rows import Row

NAME = "rotary"
D = 128           # the kernel's constant
SHAPES = ((4, 32, 4096), (1, 32, 2048))


def cases(mode) -> list[dict]:
    shapes = ((1, 2, 64),) if mode.dry_run else SHAPES
    return [{"B": b, "H": h, "N": n} for b, h, n in shapes]


def rotate_half(x):
    import torch
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def run(p: dict, ctx, kernels) -> list[Row]:
    import torch
    bsz, h, n = p["B"], p["H"], p["N"]
    bf16, dev = torch.bfloat16, ctx.device
    nbytes = 2 * (2 * bsz * h * n * D + 2 * n * (D // 2))
    row = Row(NAME, "rotary vs torch eager", f"B={bsz} H={h} N={n} D={D}", ref_name="HF rotate_half (eager)", params=p,
              bytes=nbytes)
    inv_freq = 10000.0 ** (-torch.arange(0, D, 2, device=dev).float() / D)
    freqs = torch.arange(n, device=dev).float()[:, None] * inv_freq[None, :]
    cos, sin = freqs.cos().to(bf16), freqs.sin().to(bf16)
    cos2, sin2 = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)   # HF's cached tables

    def make_set():
        return torch.randn(bsz, h, n, D, dtype=bf16, device=dev), torch.empty(bsz, h, n, D, dtype=bf16, device=dev)

    def tkjit(kernel, x, y):
        kernel(x, cos, sin, y)

    def reference(x, y):
        return x * cos2 + rotate_half(x) * sin2

    def exact(x):
        x64 = x.double()
        return x64 * cos2.double() + rotate_half(x64) * sin2.double()

    return [run_simple(row, ctx, kernels, "rotary", None, make_set=make_set, tkjit=tkjit,
                       reference=reference, exact=exact, set_bytes=nbytes)]
