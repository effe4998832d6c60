"""PTX emission for sm_90a: verified tile IR → PTX text + launch metadata.

    ptx, meta = emit_ptx(kernel, options=None)

This is the register-tile backend: register tiles live in the warp-level ``mma.sync``
fragment layout (layout.py), shared tiles in row-XOR-swizzled shared memory (smem.py), and
matrix products run on ``mma.sync.m16n8k16``. The Hopper wgmma/TMA path is a separate backend.

``options`` (all optional): ``num_warps`` (pin W), ``warp_rows`` (pin WR of the WR x WC warp grid).
``meta`` holds: name, entry, arch, backend, params (``{"kind": "global"|"scalar", "name",
"dtype", "dims"}``), dims (named runtime dims in parameter order), grid (JSON expressions),
block ([threads, 1, 1]), smem_bytes (dynamic shared memory), num_warps, warp_grid, decisions.
See docs/codegen.md for the design.
"""
from __future__ import annotations

from ..ir.core import Kernel
from .hopper import emit_hopper_ptx  # the Hopper backend (hopper/): the compiler tries it first


def emit_ptx(kernel: Kernel, options: dict | None = None) -> tuple[str, dict]:
    """The PTX module for ``kernel`` and its launch metadata (see the module docstring)."""
    from .kernel import emit_kernel  # the register-tile backend: imported where a kernel takes it
    from .table import DEFAULT_TABLE
    return emit_kernel(kernel, options, DEFAULT_TABLE)


def __getattr__(name: str):
    """``EmitterTable`` and ``DEFAULT_TABLE`` (table.py), imported on first use: a kernel the Hopper
    backend takes never loads the register-tile backend (a cold compile's imports)."""
    if name in ("EmitterTable", "DEFAULT_TABLE"):
        from . import table
        return getattr(table, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["emit_ptx", "emit_hopper_ptx", "EmitterTable", "DEFAULT_TABLE"]
