"""The copy bandwidth the memory-bound rows are measured against: one large device-to-device
copy (``dst.copy_(src)``), counting the bytes read plus the bytes written."""
from __future__ import annotations

from .rows import MEASURED, Row, first_line
from .timing import measure

NAME = "copy"
GIB = 1 << 30


def cases(mode) -> list[dict]:
    return [{"bytes": (4 << 20) if mode.dry_run else GIB}]


def run(p: dict, ctx, kernels) -> list[Row]:
    import torch
    size = p["bytes"]
    row = Row(NAME, "d2d copy (Tensor.copy_)", f"{size / GIB:g} GiB" if size >= GIB else f"{size >> 20} MiB",
              ref_name="Tensor.copy_", params=p, status=MEASURED, bytes=2.0 * size)
    try:
        src = torch.randint(0, 256, (size,), dtype=torch.uint8, device=ctx.device)
        dst = torch.empty_like(src)
        timing = measure(lambda: dst.copy_(src), ctx)
        if not torch.equal(dst, src):
            raise RuntimeError("the copy's destination differs from its source")
        row.ref_ms, row.ref_timing = timing.median_ms, timing.to_json()
    except Exception as exc:  # noqa: BLE001
        row.ref_error = first_line(exc)
    return [row.finish()]
