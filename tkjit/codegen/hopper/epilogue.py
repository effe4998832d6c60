"""The GEMM epilogue: accumulator registers → C in global memory, clipped at the tensor's edges.

Thread t = 32w + l of a consumer warpgroup holds, for register i of a 64 x N accumulator,
row 16w + l/4 + 8((i>>1)&1) and column 8(i>>2) + 2(l%4) + (i&1) (the wgmma D fragment). So
registers (i, i+1) are two neighbouring columns of one row: one 4-byte bf16x2 store (8 bytes
for f32). A tile that lies wholly inside C (and an even N, so pairs are aligned) takes
unpredicated stores at immediate offsets; an edge tile stores element by element under
row/column predicates, so nothing outside C is written.
"""
from __future__ import annotations

from dataclasses import dataclass

from .builder import Builder

PACK = {"bf16": "cvt.rn.bf16x2.f32", "f16": "cvt.rn.f16x2.f32"}
ELEM_BYTES = {"bf16": 2, "f16": 2, "f32": 4}


@dataclass(frozen=True)
class Fragment:
    """One consumer accumulator: 64 rows from ``row`` and ``n`` columns from ``col`` (registers
    holding the thread's first row and first column), ``regs`` its n/2 f32 registers."""

    regs: tuple[str, ...]
    row: str
    col: str
    n: int


def store_fragment(b: Builder, frag: Fragment, c_ptr: str, dim_m: str, dim_n: str, c_dtype: str,
                   inside: str) -> None:
    """Store one fragment; ``inside`` is the predicate 'this whole tile lies in C, N even'."""
    esz = ELEM_BYTES[c_dtype]
    rows = (frag.row, b.reg())
    b(f"add.s32 {rows[1]}, {frag.row}, 8;")
    addrs = []
    for r in rows:
        off, addr = b.reg("b64"), b.reg("b64")
        b(f"mul.wide.s32 {off}, {r}, {dim_n};", f"cvt.s64.s32 {addr}, {frag.col};",
          f"add.s64 {off}, {off}, {addr};", f"shl.b64 {off}, {off}, {esz.bit_length() - 1};",
          f"add.s64 {addr}, {c_ptr}, {off};")
        addrs.append(addr)
    edge, done = b.label("edge"), b.label("stored")
    b(f"@!{inside} bra {edge};")
    for j in range(frag.n // 8):
        for h in (0, 1):
            lo, hi = frag.regs[4 * j + 2 * h], frag.regs[4 * j + 2 * h + 1]
            offset = j * 8 * esz
            if c_dtype == "f32":
                b(f"st.global.v2.f32 [{addrs[h]}+{offset}], {{{lo}, {hi}}};")
            else:
                packed = b.reg()
                b(f"{PACK[c_dtype]} {packed}, {hi}, {lo};", f"st.global.b32 [{addrs[h]}+{offset}], {packed};")
    b(f"bra.uni {done};")
    b.place(edge)
    _store_clipped(b, frag, addrs, rows, dim_m, dim_n, c_dtype)
    b.place(done)


def _store_clipped(b: Builder, frag: Fragment, addrs, rows, dim_m: str, dim_n: str, c_dtype: str) -> None:
    esz = ELEM_BYTES[c_dtype]
    row_ok = []
    for r in rows:
        p = b.pred()
        b(f"setp.lt.s32 {p}, {r}, {dim_m};")
        row_ok.append(p)
    cols_left = b.reg()
    b(f"sub.s32 {cols_left}, {dim_n}, {frag.col};")
    for j in range(frag.n // 8):
        col_ok = []
        for e in (0, 1):
            p = b.pred()
            b(f"setp.gt.s32 {p}, {cols_left}, {8 * j + e};")
            col_ok.append(p)
        for h in (0, 1):
            lo, hi = frag.regs[4 * j + 2 * h], frag.regs[4 * j + 2 * h + 1]
            values = (lo, hi)
            if c_dtype != "f32":
                packed, half_lo, half_hi = b.reg(), b.reg("b16"), b.reg("b16")
                b(f"{PACK[c_dtype]} {packed}, {hi}, {lo};", f"mov.b32 {{{half_lo}, {half_hi}}}, {packed};")
                values = (half_lo, half_hi)
            for e in (0, 1):
                ok = b.pred()
                b(f"and.pred {ok}, {row_ok[h]}, {col_ok[e]};")
                kind = "f32" if c_dtype == "f32" else "b16"
                b(f"@{ok} st.global.{kind} [{addrs[h]}+{(j * 8 + e) * esz}], {values[e]};")
