"""A shared tile read into registers by the general lowering's consumers (``copy`` st -> rt).

    rs: st<bf16>[BM, BN] = R.tile(g, m, n)     # loaded once per tile: the producer's TMA copy
    for k in ... { ... acc = mma_ABt(a, b, acc) }
    r: rt<f32>[BM, BN] = rs                    # IR: %r = copy %rs (st -> rt)
    C.tile(g, m, n) = cvt<bf16>(silu(acc) + r)

An operand an epilogue reads -- a residual, a tile to blend in -- loaded as a shared tile arrives
by TMA while the K loop runs (the producer issues it with the tile's other one-shot loads, ahead
of the consumers), so the consumers read it from shared memory after the loop instead of waiting
for global memory there. The read is the tile write's mirror (``lower_shared_store``): each
consumer thread loads each of its 16-bit pairs (row ``row_base + band offset + 8*half``, columns
``col_base + 8*chunk``, +1) with one ``ld.shared.b32`` (an f32 tile's pair with one
``ld.shared.v2.f32``, an fp8 tile's with one ``ld.shared.b16`` widened to f32: ``fp8_pair``) from the byte the TMA box put it at (the
swizzle the layout pass chose, panel after panel, 16-byte chunks XOR-swizzled with bits 7.. of
the offset), into the packed registers a 16-bit tile is held in. An f32 result read only
elementwise stays packed (``liveness.held_packed``); otherwise its elements are unpacked (exact).
The protocol's one-shot ``Wait`` on the tile's full barrier comes before the first op that reads
it (interleave.py anchors it at the load), and its release at the tile's end, so the read needs
no step of its own.

A tile a loop streams through its ring (``x: st<bf16>[BM, BK] = X.tile(m, k)`` in the K loop,
``xr: rt<f32>[BM, BK] = x``) is read the same way from the trip's current stage, in the layout
pass's swizzle: the read is the trip's ``Read`` step (``sync_protocol.place_read``), after the
stage's full ``Wait`` and before its release (both the checker and the roles executor see it).
"""
from __future__ import annotations

from ...errors import NotAvailableError
from ...ir.ops import Copy, For, Load
from ...ir.types import BF16, E4M3, E5M2, F16, F32, FP8, TileType
from ...passes.hopper import is_shared, swizzle_bytes
from ...passes.liveness import held_packed
from .copy import SWIZZLE_MASKS
from .lower_shared_store import pair_addresses


def is_tile_read(op) -> bool:
    """A shared tile copied into a register tile."""
    return isinstance(op, Copy) and is_shared(op.operands[0]) and not is_shared(op.result)


def tile_read_refusal(op: Copy):
    """None when ``emit_tile_read`` can lower this copy of a shared tile into registers."""
    from .lower import Refusal
    src, dst = op.operands[0].type, op.result.type
    if not isinstance(op.operands[0].owner, Load):
        return Refusal(op, "a shared tile read into registers must be one the producer loads "
                           "(a tile loaded in the block body)")
    if isinstance(getattr(op.operands[0].owner.parent, "parent", None), For) and \
            op.parent is not op.operands[0].owner.parent:
        # a ring tile's read is a step of its trip (Read), which stands for an op of the trip
        return Refusal(op, "a tile a loop streams through its ring is read into registers in that "
                           "loop's body itself (not in an 'if' or a loop inside it): the read is a "
                           "step of the trip's protocol")
    if src.dtype not in (BF16, F16, F32, *FP8):
        return Refusal(op, f"a {src.dtype} shared tile read into registers")
    if src.dtype in FP8 and not (isinstance(dst, TileType) and dst.space == "rt" and dst.dtype == F32):
        return Refusal(op, f"a {src.dtype} shared tile is read into an rt<f32> tile (converted from its pairs)")
    if not (isinstance(dst, TileType) and dst.space == "rt") or dst.dtype not in (src.dtype, F32):
        return Refusal(op, f"a {src.dtype} shared tile is read into an rt<{src.dtype}> or rt<f32> tile")
    if swizzle_bytes(src) not in SWIZZLE_MASKS:
        return Refusal(op, "a shared tile without a swizzle (rows not a multiple of 32 bytes)")
    if src.rows % 8:
        return Refusal(op, f"{src.rows} rows: the swizzle pattern repeats every 8 rows")
    return None


def emit_tile_read(ctx, op: Copy) -> list[str]:
    """The consumer's loads of ``op``'s shared tile into a packed 16-bit register tile."""
    from ..emit_control import fresh
    from ..emit_elementwise import _elements, make_value
    role = ctx.role
    src: TileType = op.operands[0].type
    t: TileType = op.result.type
    load = role.shared.get(id(op.operands[0]))
    if load is None:
        raise NotAvailableError(f"{op.NAME}: the shared tile is read before its bytes are known to "
                                "have landed (no one-shot wait placed it)", op.span)
    rep = fresh(ctx, t if src.dtype in FP8 else t.with_dtype(src.dtype))
    span = swizzle_bytes(src)
    base = role.stage_address(load)
    name = op.operands[0].hint or "tile"
    out: list[str] = [(f"// read %{name} ({src.rows} x {src.cols}, {span}B swizzle) into registers, "
                       "from where its TMA box put each pair")]
    for (u, j, h), a in pair_addresses(ctx, rep.layout, src, base, out):
        if src.dtype == F32:  # the pair's two elements, 8 bytes inside one 16-byte chunk
            out.append(f"ld.shared.v2.f32 {{{rep.regs[u][j][2 * h]}, {rep.regs[u][j][2 * h + 1]}}}, [{a}];")
        elif src.dtype in FP8:  # two bytes, widened exactly: f8x2 -> f16x2 -> f32, f32
            out += fp8_pair(ctx, src.dtype.name, a, rep.regs[u][j][2 * h], rep.regs[u][j][2 * h + 1])
        else:
            out.append(f"ld.shared.b32 {rep.regs[u][j][h]}, [{a}];")
    packed = t.dtype == src.dtype or src.dtype in FP8 or held_packed(op, role.users.get(id(op.result), []))
    if packed:
        ctx.bind(op.result, rep)
    else:
        ctx.bind(op.result, make_value(ctx, t, _elements(ctx, rep, out), out))
    ring = role.ring_of_load.get(load)
    if ring is not None and isinstance(getattr(load.parent, "parent", None), For):
        where = f" at {op.span.location()}" if op.span else ""
        load_op, pairs = {F32: ("ld.shared.v2.f32", "f32"), E4M3: ("ld.shared.b16", "e4m3"),
                          E5M2: ("ld.shared.b16", "e5m2")}.get(src.dtype, ("ld.shared.b32", "16-bit"))
        decision = {"decision": "tile read",
                    "value": f"%{name}{where}: {load_op} from ring {ring}'s stage",
                    "why": f"the trip's Read step, after the stage's full wait and before its release: "
                           f"each consumer thread loads its {pairs} pairs of the "
                           f"{src.rows} x {src.cols} tile from where the TMA box put them ({span}B swizzle), "
                           + ("widened to f32 (cvt f8x2 -> f16x2, exact)" if src.dtype in FP8 else
                              "kept packed (read only elementwise)" if packed and t.dtype != src.dtype else
                              "as they are" if t.dtype == src.dtype else "unpacked to f32")}
        if decision not in role.k.decisions:
            role.k.decisions.append(decision)
    return out


def fp8_pair(ctx, dtype: str, address: str, lo: str, hi: str) -> list[str]:
    """Two neighbouring fp8 elements at ``address`` into the f32 registers ``lo``, ``hi``: one
    ``ld.shared.b16``, ``cvt.rn.f16x2.{e4m3x2,e5m2x2}`` (exact: every fp8 value is an f16 one; the
    lower byte, the lower column, lands in the lower half), then each half to f32."""
    h, p, x, y = ctx.new("b16"), ctx.new("b32"), ctx.new("b16"), ctx.new("b16")
    return [f"ld.shared.b16 {h}, [{address}];", f"cvt.rn.f16x2.{dtype}x2 {p}, {h};", f"mov.b32 {{{x}, {y}}}, {p};",
            f"cvt.f32.f16 {lo}, {x};", f"cvt.f32.f16 {hi}, {y};"]


__all__ = ["emit_tile_read", "fp8_pair", "is_tile_read", "tile_read_refusal"]
