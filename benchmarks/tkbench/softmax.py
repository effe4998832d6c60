"""Row softmax, ``examples/softmax.tk`` (C = 1024), against ``torch.softmax`` in eager PyTorch.
Memory-bound: GB/s over X read and Y written once, and as a fraction of the copy bandwidth."""
from __future__ import annotations

from .compare import run_simple
from .rows import Row

NAME = "softmax"
C = 1024          # the kernel's constant
ROWS = (8192, 65536)


def cases(mode) -> list[dict]:
    return [{"R": 32}] if mode.dry_run else [{"R": r} for r in ROWS]


def run(p: dict, ctx, kernels) -> list[Row]:
    import torch
    r, bf16, dev = p["R"], torch.bfloat16, ctx.device
    nbytes = 2 * 2 * r * C
    row = Row(NAME, "softmax vs torch eager", f"R={r} C={C}", ref_name="torch.softmax (eager)", params=p, bytes=nbytes)

    def make_set():
        x = (torch.randn(r, C, device=dev) * 3 - 4).to(bf16)
        return x, torch.empty(r, C, dtype=bf16, device=dev)

    def tkjit(kernel, x, y):
        kernel(x, y)

    def reference(x, y):
        return torch.softmax(x, dim=1)

    def exact(x):
        return torch.softmax(x.double(), dim=1)

    return [run_simple(row, ctx, kernels, "softmax", None, make_set=make_set, tkjit=tkjit,
                       reference=reference, exact=exact, set_bytes=nbytes)]
