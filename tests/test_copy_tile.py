"""copy.copy_tile (the copying producer of the general lowering and of the GEMM template) on the
PTX simulator: 128 threads copy a tile of a row-major tensor, ragged at its edges, into shared
memory; what lands must be what the TMA boxes of the same tile would write (zeros outside the
tensor, panels of ``span`` bytes per row, 16-byte chunks swizzled by the row's address)."""
from __future__ import annotations

import numpy as np
import pytest
from ptxsim import Memory, launch

from tkjit.codegen.hopper import copy
from tkjit.codegen.hopper.builder import Builder
from tkjit.codegen.hopper.wgmma import Operand


def tma_layout(tensor: np.ndarray, op: Operand, row0: int, col0: int) -> np.ndarray:
    """The elements TMA boxes of one swizzle panel x op.rows would write, by shared address."""
    out = np.zeros(op.rows * op.cols, dtype=tensor.dtype)
    mask = copy.SWIZZLE_MASKS[op.span]
    for r in range(op.rows):
        for c in range(op.cols):
            gr, gc = row0 + r, col0 + c
            v = tensor[gr, gc] if gr < tensor.shape[0] and gc < tensor.shape[1] else 0
            panel, inner = divmod(c, op.panel_cols)
            a = panel * op.panel_bytes + r * op.span + inner * op.elem_bytes
            a ^= ((a >> 7) & mask) << 4
            out[a // op.elem_bytes] = v
    return out


def copy_kernel(op: Operand) -> str:
    b = Builder()
    tid, src, out, rows, cols, row0, col0, dst = (b.reg() for _ in range(8))
    src, out = b.reg("b64"), b.reg("b64")
    b(f"mov.u32 {tid}, %tid.x;", f"ld.param.u64 {src}, [p_src];", f"ld.param.u64 {out}, [p_out];",
      f"ld.param.s32 {rows}, [p_rows];", f"ld.param.s32 {cols}, [p_cols];",
      f"ld.param.s32 {row0}, [p_row0];", f"ld.param.s32 {col0}, [p_col0];", f"mov.b32 {dst}, 0;")
    copy.copy_tile(b, op, tid, src, rows, cols, row0, col0, dst)
    b("bar.sync 0;")
    kind, reg_kind = copy.ELEMENT[op.elem_bytes]
    i, v, off, at, more = b.reg(), b.reg(reg_kind), b.reg("b64"), b.reg("b64"), b.pred()
    top = b.label("dump")
    b(f"mov.u32 {i}, {tid};")
    b.place(top)
    b(f"mul.lo.u32 {dst}, {i}, {op.elem_bytes};", f"ld.shared.{kind} {v}, [{dst}];",
      f"mul.wide.s32 {off}, {i}, {op.elem_bytes};",
      f"add.s64 {at}, {out}, {off};", f"st.global.{kind} [{at}], {v};", f"add.u32 {i}, {i}, 128;",
      f"setp.lt.u32 {more}, {i}, {op.rows * op.cols};", f"@{more} bra {top};")
    params = ",\n".join(f"  .param {t} p_{n}" for t, n in (
        (".u64", "src"), (".u64", "out"), (".s32", "rows"), (".s32", "cols"), (".s32", "row0"), (".s32", "col0")))
    return "\n".join([".version 8.0", ".target sm_90a", ".address_size 64",
                      f".visible .entry copy_test(\n{params}\n)", "{", *b.body(), "  ret;", "}"]) + "\n"


@pytest.mark.parametrize("rows, cols, span, shape, origin, elem", [
    (128, 64, 128, (1000, 700), (896, 640), 2),    # A of K = 700: the last K tile, rows past M too
    (64, 256, 128, (700, 1500), (640, 1280), 2),   # B MN-major: four panels, ragged both ways
    (64, 32, 64, (100, 66), (64, 32), 2),          # a 64-byte swizzle, 2 valid columns
    (64, 64, 128, (50, 40), (0, 0), 2),            # a tensor smaller than the tile
    (128, 128, 128, (300, 200), (256, 128), 1),    # fp8: 1-byte elements, a 128-byte row per panel
    (64, 32, 128, (70, 45), (64, 32), 4),          # f32: 4-byte elements
])
def test_copy_tile_writes_what_tma_boxes_would(rows, cols, span, shape, origin, elem):
    rng = np.random.default_rng(7)
    dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32}[elem]
    tensor = rng.integers(1, 250 if elem == 1 else 60000, size=shape).astype(dtype)
    op = Operand("K", rows, cols, span, elem)
    mem = Memory(1 << 22)
    src = mem.alloc(tensor.view(np.uint8).ravel())
    out = mem.alloc(np.full(rows * cols * elem, 0xEE, dtype=np.uint8))
    meta = {"dims": [], "grid": [1, 1, 1], "block": [copy.PRODUCER_THREADS, 1, 1],
            "smem_bytes": rows * cols * elem}
    launch(copy_kernel(op), meta, [src, out, shape[0], shape[1], *origin], {}, mem=mem)
    got = mem.read_back(out, np.zeros(rows * cols * elem, dtype=np.uint8)).view(dtype)
    assert np.array_equal(got, tma_layout(tensor, op, *origin))
