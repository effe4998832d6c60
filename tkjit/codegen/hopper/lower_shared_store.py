"""A register tile stored to shared memory for a later wgmma, in the general lowering's consumers.

    s: st<bf16>[D, D] = cvt<bf16>(state)      # IR: %s = copy %3 (rt -> st), inside a ring loop
    o = mma_AB(q, s, o)                       # a wgmma reads %s (as A or B) through a descriptor

wgmma reads B (and an SS A) only from shared memory, so a product of a register tile needs the
consumers to write it there: no TMA fills such a tile. The mbarrier pass makes the write a
protocol step (``sync_protocol.tile_write``: the consumers meet, write, fence, meet again) and
the sync checker explores it; this module prints the write (``emit_tile_write``) and says what it
cannot take (``tile_write_refusal``).

The write: every consumer thread stores each of its packed 16-bit pairs (``regs[band][chunk][half]``:
row ``row_base + band offset + 8*half``, columns ``col_base + 8*chunk``, +1) with one
``st.shared.b32`` at the byte a TMA box would have put that pair: the tile lies in panels of
``span`` bytes per row (the swizzle the layout pass chose), panel after panel, and the 16-byte
chunks of a row are XOR-swizzled with bits 7.. of the offset (PTX §5.5.7; ``copy.SWIZZLE_MASKS``).
So one layout serves every reader: a K-major or MN-major wgmma descriptor reads it as it reads a
loaded tile. Then ``fence.proxy.async.shared::cta`` makes the generic-proxy stores visible to
the async proxy that wgmma reads through; the named barrier after it is the protocol's next step.
"""
from __future__ import annotations

from ...errors import NotAvailableError
from ...ir.core import Op
from ...ir.ops import MMA_OPS, Copy
from ...ir.types import TileType
from ...passes.hopper import swizzle_bytes
from ...passes.mbarrier import is_tile_write
from ..values import RegTile
from .copy import SWIZZLE_MASKS
from .lower_fragments import _fragment_rows

FENCE = "fence.proxy.async.shared::cta;"


def tile_write_refusal(op: Copy, in_ring_loop: bool, users: dict[int, list[Op]]):
    """None when ``emit_tile_write`` can lower this copy of a register tile into a shared tile."""
    from .lower import Refusal
    if not is_tile_write(op):
        return Refusal(op, "copies from shared memory into registers are not lowered here")
    if not in_ring_loop:
        return Refusal(op, "a register tile is stored to shared memory only inside a loop that "
                           "streams operands (its write is a step of that loop's protocol)")
    t: TileType = op.result.type
    if t.dtype.bits != 16:
        return Refusal(op, f"a {t.dtype} shared tile written from registers: wgmma reads 16-bit "
                           "operands here; convert first (cvt<bf16>(...))")
    if "smem" not in op.attrs:
        return Refusal(op, "smem-plan placed no bytes for this shared tile")
    span = swizzle_bytes(t)
    if span not in SWIZZLE_MASKS:
        return Refusal(op, "a shared tile without a swizzle (rows not a multiple of 32 bytes)")
    if t.rows % 8:
        return Refusal(op, f"{t.rows} rows: the swizzle pattern repeats every 8 rows")
    readers = users.get(id(op.result), [])
    if not readers or not all(isinstance(u, MMA_OPS) and op.result in u.operands[:2] for u in readers):
        return Refusal(op, "a shared tile written from registers may only be read by matrix "
                           "products (wgmma operands) in the same loop")
    return None


def pair_addresses(ctx, layout, t: TileType, base: str, out: list[str]):
    """For each packed 16-bit pair a consumer thread holds of a tile laid out as ``layout``
    (``regs[band][chunk][half]``: row ``row_base + band offset + 8*half``, columns
    ``col_base + 8*chunk``, +1), ``((band, chunk, half), address register)``: the shared byte a
    TMA box of the shared tile ``t`` at ``base`` puts that pair at (panels of the swizzle span,
    16-byte chunks XOR-swizzled with bits 7.. of the offset). The address arithmetic is appended
    to ``out`` before each pair is yielded, so the caller's access follows its address."""
    span = swizzle_bytes(t)
    elem = t.dtype.nbytes
    panel_cols, panel_bytes = span // elem, t.rows * span
    rb, rows, cb, cols = _fragment_rows(ctx, layout)
    col_part = {}
    for j, coff in cols.items():  # panel * panel_bytes + the pair's byte inside its panel row
        c, panel, inner = ctx.new("b32"), ctx.new("b32"), ctx.new("b32")
        out += [f"add.u32 {c}, {cb}, {coff};", f"shr.u32 {panel}, {c}, {panel_cols.bit_length() - 1};",
                f"and.b32 {inner}, {c}, {panel_cols - 1};", f"mul.lo.u32 {inner}, {inner}, {elem};",
                f"mad.lo.u32 {c}, {panel}, {panel_bytes}, {inner};"]
        col_part[j] = c
    bits = SWIZZLE_MASKS[span] << 4  # ((a >> 7) & mask) << 4 == (a >> 3) & (mask << 4)
    for (u, h), roff in rows.items():
        row = ctx.new("b32")
        out += [f"add.u32 {row}, {rb}, {roff};", f"mul.lo.u32 {row}, {row}, {span};"]
        for j in cols:
            a, x = ctx.new("b32"), ctx.new("b32")
            out += [f"add.u32 {a}, {row}, {col_part[j]};", f"shr.u32 {x}, {a}, 3;",
                    f"and.b32 {x}, {x}, {bits};", f"xor.b32 {a}, {a}, {x};", f"add.u32 {a}, {a}, {base};"]
            yield (u, j, h), a


def emit_tile_write(role, op: Copy) -> list[str]:
    """The consumers' stores of ``op``'s register tile into its shared tile, then the fence."""
    ctx = role.ctx
    rep = ctx.get(op.operands[0])
    if not isinstance(rep, RegTile) or not rep.packed:
        raise NotAvailableError(f"{op.NAME}: the register tile must be a packed 16-bit tile "
                                "(cvt<bf16>(...)) to be written for a wgmma", op.span)
    t: TileType = op.result.type
    layout = rep.layout
    span = swizzle_bytes(t)
    elem = t.dtype.nbytes
    out: list[str] = [f"// write %{op.result.hint or 'tile'} ({t.rows} x {t.cols}, {span}B swizzle) "
                      "from registers, as a TMA box lays it out"]
    base = ctx.new("b32")
    out.append(f"add.u32 {base}, {role.k.smem}, {op.attrs['smem']};")
    guard = None
    if layout.rows.replicated or layout.cols.replicated:
        guard = ctx.writer(layout.rows, layout.cols, None)
    pairs = 0
    for (u, j, h), a in pair_addresses(ctx, layout, t, base, out):
        out.append(f"{'@' + guard + ' ' if guard else ''}st.shared.b32 [{a}], {rep.regs[u][j][h]};")
        pairs += 1
    out.append(FENCE)
    where = f" at {op.span.location()}" if op.span else ""
    decision = {"decision": "tile write", "value": f"%{op.result.hint or 'tile'}{where}: st.shared.b32",
                "why": f"{pairs} packed pairs per consumer thread, each at the byte a "
                       f"{span}-byte TMA box would put it ({span}B swizzle, {t.cols * elem // span} "
                       "panel(s)), then fence.proxy.async.shared::cta; the protocol's meetings around it"}
    if decision not in role.k.decisions:
        role.k.decisions.append(decision)
    return out


__all__ = ["FENCE", "emit_tile_write", "pair_addresses", "tile_write_refusal"]
