"""Register tiles to and from global memory in the general lowering's consumers: per-thread
fragment pairs at immediate offsets where a tile lies inside its tensor, single predicated
elements at its edges; a store smem-plan staged goes through ``lower_epilogue``; an f32 tile loaded
from a 16-bit tensor and read only elementwise stays packed. ``consumer_table`` is the consumers'
op -> emitter table: the register-tile backend's, with these for loads and stores (and no
mma.sync: products are wgmma steps of the protocol)."""
from __future__ import annotations

from ...errors import NotAvailableError
from ...ir.ops import MMA_OPS, Copy, Cvt, Load, Store
from ...passes.liveness import held_packed
from ...passes.sync_protocol import HoldStore
from ...ir.types import BF16, E4M3, F16, F32, TileType
from ..emit_control import fresh
from ..emit_elementwise import emit_cvt
from ..emit_memory import emit_copy, emit_load as rt_emit_load, emit_store as rt_emit_store
from ..table import EmitterTable
from ..values import RegTile


def _fragment_rows(ctx, layout):
    """(row register, offset) per (band, half) and (column register, offset) per chunk."""
    rb, cb = ctx.row_base(layout.rows), ctx.col_base(layout.cols)
    rows = {(u, h): layout.rows.unit_offset(u, 16) + 8 * h for u in range(layout.bands) for h in (0, 1)}
    cols = {j: 8 * j for j in range(layout.chunks)}
    return rb, rows, cb, cols


def emit_store(ctx, op) -> list[str]:
    from .lower_epilogue import emit_staged
    rep = ctx.get(op.operands[1])
    if not isinstance(rep, RegTile) or (ctx.grid.contiguous_cols and op not in ctx.role.epilogue_step):
        return rt_emit_store(ctx, op)  # (the contiguous order: 16 bytes a lane, direct.py)
    step = ctx.role.epilogue_step.pop(op, None)  # the protocol's StagedStore / HoldStore of a staged store
    if step is not None:
        if rep.layout.rows.replicated:
            raise NotAvailableError(f"{op.NAME}: a staged store of a tile whose rows are replicated "
                                    "across warps", op.span)
        if isinstance(step, HoldStore):
            return ctx.role.deferred.hold(ctx, rep)
        return emit_staged(ctx.role, ctx, op, rep, ctx.role.stagings[op], step)
    if getattr(ctx.role, "split_part", None) is not None:
        return _split_store(ctx, op, rep)
    return _fragments(ctx, op, op.operands[0], op.variadic(), rep, store=True)


def _split_store(ctx, op, rep: RegTile) -> list[str]:
    """Split-K: CTA r of the cluster stores part r of the tile (the run of (band, chunk) pairs
    whose registers held its sum after the reduction). The rank is a run-time value and
    registers cannot be indexed, so each part's stores are emitted once, chosen by the rank."""
    split, rank, chunks = ctx.role.split_part
    layout = rep.layout
    if [(u, j) for u in range(layout.bands) for j in range(layout.chunks)] != chunks:
        raise NotAvailableError(f"{op.NAME}: a split-K store of a tile laid out unlike the accumulator",
                                op.span)
    n = len(chunks) // split
    out: list[str] = []
    done = ctx.label("parts_stored")
    for p in range(split):
        other, skip = ctx.new("pred"), ctx.label(f"part_{p}_other")
        out += [f"setp.ne.u32 {other}, {rank}, {p};", f"@{other} bra.uni {skip};"]
        out += _fragments(ctx, op, op.operands[0], op.variadic(), rep, store=True,
                          only=set(chunks[p * n:(p + 1) * n]))
        out += [f"bra.uni {done};", f"{skip}:"]
    out.append(f"{done}:")
    return out


def emit_load(ctx, op) -> list[str]:
    t = op.result.type
    if not (isinstance(t, TileType) and t.space == "rt") or ctx.grid.contiguous_cols:
        return rt_emit_load(ctx, op)  # (the contiguous order: 16 bytes a lane, direct.py)
    gd = op.operands[0].type.dtype
    if t.dtype == gd and gd in (BF16, F16):
        # a 16-bit tile of a tensor of its dtype: the pairs land packed, as the tile holds them
        rep = fresh(ctx, t)
        out = _fragments(ctx, op, op.operands[0], op.variadic(), rep, store=False)
        ctx.bind(op.result, rep)
        return out
    if held_packed(op, ctx.role.users.get(id(op.result), [])):
        # the values are the tensor's 16-bit ones: keep them packed (half the registers) and let
        # each elementwise use unpack its elements (exact: a bf16/f16 value is an f32 one)
        rep = fresh(ctx, TileType("rt", gd, t.rows, t.cols))
        out = _fragments(ctx, op, op.operands[0], op.variadic(), rep, store=False)
        ctx.bind(op.result, rep)
        return out
    rep = fresh(ctx, TileType("rt", F32, t.rows, t.cols))
    out = _fragments(ctx, op, op.operands[0], op.variadic(), rep, store=False)
    if t.dtype != F32:
        from ..emit_elementwise import make_value
        elems = {key: rep.regs[key[0]][key[1]][key[2]] for key in rep.layout.elements()}
        ctx.bind(op.result, make_value(ctx, t, elems, out))
    else:
        ctx.bind(op.result, rep)
    return out


PACK = {BF16: "cvt.rn.bf16x2.f32", F16: "cvt.rn.f16x2.f32"}


def _fragments(ctx, op, param, coords, tile: RegTile, store: bool, only: set | None = None) -> list[str]:
    """Store ``tile`` to (or load it from) ``param``'s tile at ``coords``, fragment by fragment:
    one address per thread row; pairs of neighbouring columns at immediate offsets when the whole
    tile lies inside the tensor (and its rows keep pairs aligned), else single elements under
    row and column predicates (nothing outside the tensor is written; loads read zeros there).
    ``only``: the (band, chunk) pairs to store (split-K's part); None: all."""
    from ..globalmem import GlobalView
    out: list[str] = []
    g = param.type
    gd = g.dtype
    if gd not in (BF16, F16, F32) and not (store and gd == E4M3):
        raise NotAvailableError(f"{op.NAME}: {'loads from' if not store else 'stores into'} {gd} tensors are not "
                                f"lowered yet{FP8_STORES if store else ''}", op.span)
    t = tile.type
    layout = tile.layout
    view = GlobalView(ctx, param, coords, t.rows, t.cols, out)
    es = gd.nbytes
    half = "bf16" if gd == BF16 else "f16"
    rb, rows, cb, cols = _fragment_rows(ctx, layout)
    guard = None
    if store and (layout.rows.replicated or layout.cols.replicated):
        guard = ctx.writer(layout.rows, layout.cols, None)
    inside, e, odd = ctx.new("pred"), ctx.new("b32"), ctx.new("b32")
    # inside: the whole tile in [0, rows) x [0, cols) (a tile at a negative coordinate is not:
    # unchecked launches never touch memory outside the tensor, docs/reliability.md)
    out += [f"add.s32 {e}, {view.row0}, {t.rows};", f"setp.le.s32 {inside}, {e}, {view.d_rows};",
            f"setp.ge.and.s32 {inside}, {view.row0}, 0, {inside};",
            f"setp.ge.and.s32 {inside}, {view.col0}, 0, {inside};",
            f"add.s32 {e}, {view.col0}, {t.cols};", f"setp.le.and.s32 {inside}, {e}, {view.d_cols}, {inside};",
            f"and.b32 {odd}, {view.stride_bits or view.d_cols}, 1;", f"setp.eq.and.s32 {inside}, {odd}, 0, {inside};"]
    if view.lead_ok is not None:
        out.append(f"and.pred {inside}, {inside}, {view.lead_ok};")
    if guard is not None:
        out.append(f"and.pred {inside}, {inside}, {guard};")
    low = ctx.new("b64")  # pairs need the tensor's base aligned to a pair
    out += [f"and.b64 {low}, {view.ptr}, {2 * es - 1};", f"setp.eq.and.u64 {inside}, {low}, 0, {inside};"]
    addrs, rows_left = {}, {}
    if only is not None:
        rows = {key: off for key, off in rows.items() if any(u == key[0] for u, _ in only)}
    for key, roff in rows.items():
        r = ctx.new("b32")
        out.append(f"add.s32 {r}, {rb}, {roff};")
        addrs[key] = view.element_address(r, cb, out)
        rows_left[key] = r
    edge, done = ctx.label("edge"), ctx.label("fragments_done")
    out.append(f"@!{inside} bra {edge};")
    for (u, h), addr in addrs.items():
        for j, coff in cols.items():
            if only is not None and (u, j) not in only:
                continue
            imm = f"+{coff * es}" if coff else ""
            if store and gd == E4M3:  # the pair rounded into two bytes, lower column in the lower one
                out.append(f"st.global.b16 [{addr}{imm}], {_fp8_pair(ctx, tile, u, j, h, out)};")
            elif store:
                out.append(f"st.global.{'v2.f32' if gd == F32 else 'b32'} [{addr}{imm}], "
                           f"{_pair(ctx, tile, u, j, h, gd, out)};")
            elif tile.packed:
                out.append(f"ld.global.b32 {tile.regs[u][j][h]}, [{addr}{imm}];")
            else:
                a, c = tile.regs[u][j][2 * h], tile.regs[u][j][2 * h + 1]
                if gd == F32:
                    out.append(f"ld.global.v2.f32 {{{a}, {c}}}, [{addr}{imm}];")
                else:
                    p, x, y = ctx.new("b32"), ctx.new("b16"), ctx.new("b16")
                    out += [f"ld.global.b32 {p}, [{addr}{imm}];", f"mov.b32 {{{x}, {y}}}, {p};",
                            f"cvt.f32.{half} {a}, {x};", f"cvt.f32.{half} {c}, {y};"]
    out.append(f"bra.uni {done};")
    out.append(f"{edge}:")
    col_base = ctx.new("b32")  # element (r, c) is in the tensor when r and c, as unsigned, are below its dims
    out.append(f"add.s32 {col_base}, {view.col0}, {cb};")
    for (u, h), addr in addrs.items():
        row_ok = ctx.new("pred")
        r = rows_left[(u, h)]
        gr = ctx.new("b32")
        out += [f"add.s32 {gr}, {r}, {view.row0};", f"setp.lt.u32 {row_ok}, {gr}, {view.d_rows};"]
        if view.lead_ok is not None:
            out.append(f"and.pred {row_ok}, {row_ok}, {view.lead_ok};")
        if guard is not None:
            out.append(f"and.pred {row_ok}, {row_ok}, {guard};")
        for j, coff in cols.items():
            if only is not None and (u, j) not in only:
                continue
            if store and gd == E4M3:  # each byte of the rounded pair on its own
                x, y = ctx.new("b16"), ctx.new("b16")
                both = _fp8_pair(ctx, tile, u, j, h, out)
                out += [f"and.b16 {x}, {both}, 255;", f"shr.u16 {y}, {both}, 8;"]
                values = [x, y]
            elif store:
                pair = _pair(ctx, tile, u, j, h, gd, out)
                if gd == F32:
                    values = pair.strip("{}").split(", ")
                else:
                    x, y = ctx.new("b16"), ctx.new("b16")
                    out.append(f"mov.b32 {{{x}, {y}}}, {pair};")
                    values = [x, y]
            halves = []
            for e_ in (0, 1):
                ok, gc = ctx.new("pred"), ctx.new("b32")
                out += [f"add.s32 {gc}, {col_base}, {coff + e_};", f"setp.lt.u32 {ok}, {gc}, {view.d_cols};",
                        f"and.pred {ok}, {ok}, {row_ok};"]
                at = f"[{addr}+{(coff + e_) * es}]"
                if store:
                    kind = "f32" if gd == F32 else "b8" if gd == E4M3 else "b16"
                    out.append(f"@{ok} st.global.{kind} {at}, {values[e_]};")
                    continue
                if tile.packed:
                    hb = ctx.new("b16")
                    out += [f"mov.b16 {hb}, 0;", f"@{ok} ld.global.b16 {hb}, {at};"]
                    halves.append(hb)
                    if e_ == 1:
                        out.append(f"mov.b32 {tile.regs[u][j][h]}, {{{halves[0]}, {halves[1]}}};")
                    continue
                dst = tile.regs[u][j][2 * h + e_]
                if gd == F32:
                    out += [f"mov.f32 {dst}, 0f00000000;", f"@{ok} ld.global.f32 {dst}, {at};"]
                else:
                    hb = ctx.new("b16")
                    out += [f"mov.b16 {hb}, 0;", f"@{ok} ld.global.b16 {hb}, {at};", f"cvt.f32.{half} {dst}, {hb};"]
    out.append(f"{done}:")
    return out


FP8_STORES = ("; e4m3 tensors take stores (cvt.rn.satfinite: beyond ±448 saturates, as the interpreter "
              "rounds); an e5m2 store would saturate on the GPU where torch and the interpreter overflow to "
              "±inf, so store bf16 and convert with torch")
"""Why e4m3 stores are lowered and e5m2 ones are not (the refusal's note)."""


def _fp8_pair(ctx, tile: RegTile, u: int, j: int, h: int, out: list[str]) -> str:
    """One 16-bit register with the pair (band u, chunk j, half h) rounded to e4m3, the lower
    column in the lower byte (``Ctx.pack_e4m3``)."""
    lo, hi = (ctx.tile_f32(tile, u, j, 2 * h + c, out) for c in (0, 1))
    return ctx.pack_e4m3(lo, hi, out)


def _pair(ctx, tile: RegTile, u: int, j: int, h: int, gd, out: list[str]) -> str:
    """The operand of one pair store into a ``gd`` tensor: ``{lo, hi}`` f32, or one packed register."""
    if gd == F32:
        a, c = (ctx.tile_f32(tile, u, j, i, out) for i in (2 * h, 2 * h + 1))
        return f"{{{a}, {c}}}"
    if tile.packed and tile.type.dtype == gd:
        return tile.regs[u][j][h]
    a, c = (ctx.tile_f32(tile, u, j, i, out) for i in (2 * h, 2 * h + 1))
    p = ctx.new("b32")
    out.append(f"{PACK[gd]} {p}, {c}, {a};")
    return p


def emit_widen(ctx, op) -> list[str]:
    """``cvt<f32>`` of a 16-bit register tile that every reader reads elementwise
    (``liveness.held_packed``): the packed tile stands for the f32 one (each use unpacks its
    elements, exactly); any other cvt is the register-tile backend's."""
    if held_packed(op, ctx.role.users.get(id(op.result), [])) and isinstance(ctx.get(op.operands[0]), RegTile):
        ctx.bind(op.result, ctx.get(op.operands[0]))
        return []
    return emit_cvt(ctx, op)


def emit_copy_tile(ctx, op) -> list[str]:
    """A shared tile read into registers (``lower_tile_read``); any other copy is the
    register-tile backend's."""
    from .lower_tile_read import emit_tile_read, is_tile_read
    return emit_tile_read(ctx, op) if is_tile_read(op) else emit_copy(ctx, op)


def consumer_table() -> EmitterTable:
    from .lower_producer import scalar_table
    table = scalar_table(EmitterTable())
    table.entries[(Store, "memory")] = emit_store
    table.entries[(Load, "memory")] = emit_load
    table.entries[(Cvt, "register")] = emit_widen
    table.entries[(Copy, "memory")] = emit_copy_tile
    from ...ir.ops import CopyCols
    from .lower_copy_cols import emit_copy_cols
    for key in [k for k in table.entries if k[0] is CopyCols]:
        table.entries[key] = emit_copy_cols  # a chunk of a TMA-loaded row block
    for cls in MMA_OPS:
        table.entries.pop((cls, "register"), None)
    return table



__all__ = ["emit_store", "emit_load", "emit_widen", "emit_copy_tile", "consumer_table", "PACK"]
