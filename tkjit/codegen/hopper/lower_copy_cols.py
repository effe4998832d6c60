"""``copy_cols`` in the general lowering: a column chunk of a row block the producer loaded with
TMA (stream-cols' shared-memory cache) into a register tile of the contiguous column order.

TMA leaves a tile of R rows as panels of ``span`` bytes a row (the swizzle's width, layout pass):
panel p at ``p * R * span``, row r of it at ``r * span``, and its 16-byte unit u at
``16 * (u XOR key(r))`` with ``key(r) = (r * span >> 7) & (span / 16 - 1)`` (the swizzle XORs
address bits 4.. with bits 7..; the tile is 1024-byte aligned). A lane of the contiguous order
holds 8 columns of a row for each 32-column group (``WarpGrid.contiguous_cols``): one 16-byte
unit, which the swizzle keeps whole -- one ``ld.shared.v4`` per row and group, through the
register-tile backend's reader (``emit_copy_cols.read_row_groups``). The key of rows g + 8k is
the same for every k, so a group's address serves every row of the thread.
"""
from __future__ import annotations

from ...errors import NotAvailableError
from ...ir.ops import Load
from ...passes.hopper import is_shared, swizzle_bytes
from ..emit_copy_cols import read_row_groups
from .lower_producer import load_stage_stride


def copy_cols_refusal(op):
    """None when ``emit_copy_cols`` takes ``op``; else a Refusal (the kernel-level condition, the
    contiguous column order, is ``lower_layout.copy_cols_order_refusal``'s)."""
    from .lower import Refusal
    src, t = op.operands[0], op.result.type
    if not (is_shared(src) and isinstance(src.owner, Load)):
        return Refusal(op, "copy_cols of a shared tile the producer does not load")
    st = src.type
    if src.owner.attrs.get("fill") == "cp.async":  # the register-tile backend's layout and reader
        from ..smem import Geometry
        geo = Geometry.of_tile(st)
        if st.dtype.nbytes != 2 or (t.cols * 2) % (16 * (geo.mask + 1)):
            return Refusal(op, f"copy_cols of {t.cols}-column chunks of {st} the consumers fill: the "
                               "register-tile backend's reader takes 16-bit tiles in whole swizzle groups")
        return None
    span = swizzle_bytes(st)
    if st.dtype.nbytes != 2 or not span:
        return Refusal(op, f"copy_cols of {st}: the general lowering reads 16-bit swizzled row blocks")
    if (t.cols * 2) % span:
        return Refusal(op, f"copy_cols of {t.cols}-column chunks: not whole {span // 2}-column panels of "
                           "the TMA-loaded row block")
    return None


def emit_copy_cols(ctx, op) -> list[str]:
    from .lower_copy_fill import emit_filled_copy_cols, is_filled
    if is_filled(ctx, op):  # a block the consumers filled with cp.async (lower_copy_fill.py)
        return emit_filled_copy_cols(ctx, op)
    if not ctx.grid.contiguous_cols:
        raise NotAvailableError("copy_cols: the general lowering reads row-block chunks in the "
                                "contiguous column order only", op.span)
    role = ctx.role
    out: list[str] = []
    load = role.shared[id(op.operands[0])]
    st, t = load.result.type, op.result.type
    span = swizzle_bytes(st)
    panel_bytes = st.rows * span
    units = span // 16                        # 16-byte units a panel row
    layout = ctx.tile_layout(t)
    ring = role.rings[role.ring_of_load[load]]
    stride = load_stage_stride(role.k.schedule.ring_loop.get(ring.ring.name), load)  # (two slots: their stride)
    base = ctx.new("b32")                     # the row block's bytes in this stage
    out += [f"mad.lo.u32 {base}, {ring.s}, {stride}, {role.k.smem};",
            f"add.u32 {base}, {base}, {load.attrs['smem']};"]
    chunk = ctx.get(op.operands[1]).reg
    at = ctx.new("b32")                       # chunk c starts c * (its panels) panels in
    out.append(f"mad.lo.u32 {base}, {chunk}, {t.cols * 2 // span * panel_bytes}, {base};")
    row0 = ctx.row_base(layout.rows)
    key, first = ctx.new("b32"), ctx.new("b32")
    out += [f"mul.lo.u32 {key}, {row0}, {span};", f"shr.u32 {key}, {key}, 7;",
            f"and.b32 {key}, {key}, {units - 1};",
            f"shr.u32 {first}, {ctx.col_base(layout.cols)}, 3;",  # the thread's 16-byte unit of the chunk
            f"mad.lo.u32 {at}, {row0}, {span}, {base};"]

    def group(m: int) -> str:
        unit, panel, addr = ctx.new("b32"), ctx.new("b32"), ctx.new("b32")
        out.append(f"add.u32 {unit}, {first}, {4 * m};")
        out.append(f"shr.u32 {panel}, {unit}, {units.bit_length() - 1};")
        out.append(f"and.b32 {unit}, {unit}, {units - 1};")
        out.append(f"xor.b32 {unit}, {unit}, {key};")
        out.append(f"mad.lo.u32 {addr}, {panel}, {panel_bytes}, {at};")
        out.append(f"mad.lo.u32 {addr}, {unit}, 16, {addr};")
        return addr
    ctx.bind(op.result, read_row_groups(ctx, t, st.dtype, layout, group, lambda dr: dr * span, out))
    return out


__all__ = ["emit_copy_cols", "copy_cols_refusal"]
