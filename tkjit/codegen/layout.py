"""How block-level register tiles are spread over the warps of a thread block.

A thread block has W warps arranged as a WR x WC warp grid (warp w is row w // WC, column
w % WC). Every register tile uses the mma.sync accumulator fragment layout: 16-row *bands* and
8-column *chunks*; lane 4g+t of a warp holds rows g and g+8 of each of its bands and columns
2t, 2t+1 of each of its chunks (four f32 per band x chunk, or two packed bf16x2 registers).

A tile [R, C] has R/16 bands and C/8 chunks. The bands are split over gcd(R/16, WR) *row
groups* (contiguous runs of bands), the chunks over gcd(C/8, WC) *column groups*; warp rows
(columns) beyond the number of groups hold replicas. The layout depends only on the tile's
shape and the kernel's warp grid, so tiles of one shape always agree, a ``cv<R>`` matches the
rows of every [R, C] tile and an ``rv<C>`` the columns of every [R, C] tile: elementwise maps,
broadcasts, mma results and quad-shuffle row reductions never move data.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import gcd

from ..ir.core import Kernel
from ..ir.ops import Mma, Reduce, Broadcast
from ..ir.types import TileType, VectorType

BAND = 16   # rows per band
CHUNK = 8   # columns per chunk


@dataclass(frozen=True)
class AxisSplit:
    """One axis of a tile over the warp grid: ``groups`` distinct warp groups, ``per_warp`` units each."""

    units: int      # bands (rows) or chunks (columns) in the tile
    groups: int     # distinct groups of warps along the axis
    per_warp: int   # units held by each warp
    warp_span: int  # WR or WC: warp rows/columns of the grid (>= groups; the rest replicate)
    interleave: int = 0
    """0: a warp's units are a contiguous run. k > 0 (rows only): warps come in sets of k (a
    warpgroup's four warps), and a warp's units are k apart: warp w of set s holds bands
    k*(per_warp*s + u) + w, u = 0, 1, ... -- the wgmma accumulator of a consumer warpgroup owning
    ``per_warp`` 64-row slabs."""

    @property
    def replicated(self) -> bool:
        return self.groups < self.warp_span

    def unit_offset(self, u: int, size: int) -> int:
        """Rows (columns) from the thread's first unit to its ``u``-th (units of ``size``)."""
        return size * u * (self.interleave or 1)


@dataclass(frozen=True)
class TileLayout:
    rows: AxisSplit   # units are 16-row bands
    cols: AxisSplit   # units are 8-column chunks

    @property
    def bands(self) -> int:
        return self.rows.per_warp

    @property
    def chunks(self) -> int:
        return self.cols.per_warp

    def elements(self):
        """(band, chunk, i) for the thread's elements; i = 2*half + column-in-pair."""
        for b in range(self.bands):
            for j in range(self.chunks):
                for i in range(4):
                    yield b, j, i


@dataclass(frozen=True)
class WarpGrid:
    warps: int
    wr: int
    wc: int
    slab_warps: int = 0
    """4 for the consumer warpgroups of the Hopper lowering (rows interleave by 64-row slabs,
    AxisSplit.interleave); 0 for the register-tile backend's grids."""
    contiguous_cols: bool = False
    """Which columns a thread's registers hold (``contiguous_columns`` decides). False: the mma
    fragment's, columns 2t, 2t+1 of each 8-column chunk. True: a permutation of them, for kernels
    that never need the fragment itself (no products, no shared tiles): chunks 4m .. 4m+3 of a
    warp's column group hold columns 32m + 8t .. 32m + 8t + 7, 16 contiguous bytes of bf16 per
    row, so tiles load and store straight between global memory and registers, 16 bytes a lane."""

    def col_offset(self, chunk: int, k: int) -> int:
        """Column of (chunk, column-in-pair) k past the thread's column base (``Ctx.col_base``)."""
        if self.contiguous_cols:
            return 32 * (chunk // 4) + 2 * (chunk % 4) + k
        return 8 * chunk + k

    @property
    def threads(self) -> int:
        return 32 * self.warps

    def row_split(self, rows: int) -> AxisSplit:
        units = rows // BAND
        groups = gcd(units, self.wr)
        per_warp = units // groups
        if self.slab_warps and per_warp > 1 and groups == self.wr and groups % self.slab_warps == 0:
            return AxisSplit(units, groups, per_warp, self.wr, self.slab_warps)
        return AxisSplit(units, groups, per_warp, self.wr)

    def col_split(self, cols: int) -> AxisSplit:
        units = cols // CHUNK
        groups = gcd(units, self.wc)
        return AxisSplit(units, groups, units // groups, self.wc)

    def tile(self, rows: int, cols: int) -> TileLayout:
        return TileLayout(self.row_split(rows), self.col_split(cols))


def _pow2_divisors(n: int) -> list[int]:
    out, d = [], 1
    while d <= n:
        if n % d == 0:
            out.append(d)
        d *= 2
    return out


def _largest_dividing(warps: int, units: int) -> int:
    return max(d for d in _pow2_divisors(warps) if units % d == 0)


def choose_warp_grid(kernel: Kernel, options: dict) -> tuple[WarpGrid, list[dict]]:
    """Pick W and the WR x WC warp grid from the kernel's register tiles; say why."""
    tiles: list[TileType] = []
    row_centric: list[int] = []
    accumulators: list[TileType] = []
    for op in kernel.walk():
        values = list(op.results) + [a for r in op.regions for a in r.args]
        for v in values:
            if isinstance(v.type, TileType) and v.type.space == "rt":
                tiles.append(v.type)
            elif isinstance(v.type, VectorType) and v.type.kind == "cv":
                row_centric.append(v.type.length)
        if isinstance(op, (Reduce, Broadcast)) and op.AXIS == "row":
            row_centric.append(op.operands[0].type.rows)
        if isinstance(op, Mma):
            accumulators.append(op.result.type)
            a = op.operands[0].type
            if a.space == "rt":
                row_centric.append(op.result.type.rows)
    decisions = []
    largest = max((t.rows * t.cols for t in tiles), default=0)
    pinned = options.get("num_warps") or kernel.attrs.get("num_warps")
    warps = int(pinned or (8 if largest > 4 * 32 * 64 else 4))
    if warps not in (1, 2, 4, 8, 16):
        from ..errors import TkError
        raise TkError(f"codegen option num_warps must be a power of two up to 16, got {warps}")
    why = (f"pinned by the num_warps option" if options.get("num_warps") else
           f"pinned by the kernel attribute num_warps (stream-cols{{warps}})" if pinned else
           f"the largest register tile has {largest} elements: "
           + ("more than 64 per thread with 4 warps, so 8 warps" if warps == 8 else
              "at most 64 f32 registers per thread with 4 warps"))
    decisions.append({"decision": "warps", "value": warps, "why": why})
    if options.get("warp_rows"):
        wr = int(options["warp_rows"])
        why = "pinned by the warp_rows option"
    elif row_centric:
        wr = min(_largest_dividing(warps, r // BAND) for r in row_centric)
        if wr == warps:
            why = ("row reductions, row broadcasts or a register A operand: each warp keeps whole rows, "
                   "so they need no cross-warp traffic")
        else:
            why = (f"row reductions, row broadcasts or a register A operand on {min(row_centric)}-row "
                   f"tiles: {wr} warp row(s) of whole bands, the columns split over {warps // wr} warps "
                   "(row reductions combine them through shared memory)")
    elif accumulators:
        acc = max(accumulators, key=lambda t: t.rows * t.cols)
        best = None
        for d in _pow2_divisors(warps):
            fits = (acc.rows // BAND) % d == 0 and (acc.cols // CHUNK) % (warps // d) == 0
            cost = acc.rows // d + acc.cols // (warps // d)
            key = (not fits, cost, -d)
            if best is None or key < best[0]:
                best = (key, d)
        wr = best[1]
        why = (f"a {acc.rows}x{acc.cols} accumulator: {wr}x{warps // wr} warps give "
               f"{acc.rows // wr}x{acc.cols // (warps // wr)} warp tiles, the fewest shared-memory "
               "operand loads per mma")
    else:
        rows = max((t.rows for t in tiles), default=BAND)
        wr = _largest_dividing(warps, rows // BAND)
        why = f"elementwise only: {wr} warp rows split the {rows}-row tiles by bands"
    if warps % wr:
        from ..errors import TkError
        raise TkError(f"codegen option warp_rows={wr} does not divide num_warps={warps}")
    grid = WarpGrid(warps, wr, warps // wr)
    decisions.append({"decision": "warp_grid", "value": [grid.wr, grid.wc], "why": why})
    return grid, decisions


def contiguous_columns(kernel: Kernel, grid: WarpGrid) -> tuple[bool, str]:
    """Whether ``kernel`` takes the contiguous column order (``WarpGrid.contiguous_cols``), and why.

    Only a kernel the passes marked (kernel attribute ``column_order = "contiguous"``: the
    stream-cols options ``direct`` and ``loads=registers``) takes it: it is not measured faster in
    general (docs/codegen.md).
    It needs a kernel that never puts a register tile into the fragment layout's own uses
    (matrix products, copies to or from shared tiles, the causal mask and index tiles, which
    compute with a column's position), every register tile split into whole 32-column groups per
    warp (4 chunks), and every register tile it loads or stores in a tensor whose rows are a
    constant multiple of 16 bytes, so that each lane's 16 bytes are all inside a row or all out
    (row vectors too are split into whole 32-column groups)."""
    from ..ir.ops import CausalMask, Copy, Iota, Load, Store
    if kernel.attrs.get("column_order") != "contiguous":
        return False, ("the default; stream-cols{direct=true} (or loads=registers) asks for the contiguous "
                       "order, which moves register tiles straight between global memory and registers")
    moved = [op for op in kernel.walk() if isinstance(op, Load) and isinstance(op.result.type, TileType)
             or isinstance(op, Store) and isinstance(op.operands[1].type, TileType)]
    if not moved:
        return False, "no register tile is loaded or stored: the order makes no difference"
    from ..ir.ops import CopyCols
    users: dict[int, list] = {}
    for op in kernel.walk():
        for v in op.operands:
            users.setdefault(id(v), []).append(op)
    for op in kernel.walk():
        if isinstance(op, (Mma, Copy, CausalMask, Iota)):
            return False, f"'{op.NAME}' needs the mma fragment's column order"
        for v in list(op.results) + [a for r in op.regions for a in r.args]:
            t = v.type
            if isinstance(t, TileType) and t.space == "st":
                # a row block loaded into shared memory whose chunks only copy_cols reads (16 bytes a lane)
                if not (isinstance(op, Load) and t.dtype.bits == 16
                        and all(isinstance(u, CopyCols) for u in users.get(id(v), []))):
                    return False, "shared tiles are read and written in the mma fragment's column order"
            cols = t.cols if isinstance(t, TileType) else t.length if isinstance(t, VectorType) and t.kind == "rv" else 0
            if cols and grid.col_split(cols).per_warp % 4:
                return False, f"{t} gives a warp {grid.col_split(cols).per_warp} chunks of 8 columns, not whole 32-column groups"
        if isinstance(op, (Load, Store)):
            tile = op.result.type if isinstance(op, Load) else op.operands[1].type
            if isinstance(tile, TileType):
                g = op.operands[0].type
                last = g.dims[-1]
                fp8_store = isinstance(op, Store) and g.dtype.name == "e4m3"  # (8 bytes a lane: direct.store_direct)
                if (g.dtype.name not in ("bf16", "f16", "f32") and not fp8_store) or \
                        tile.dtype.name not in ("bf16", "f16", "f32"):
                    return False, (f"{op.NAME} of {tile} from {g}: only bf16, f16 and f32 move 16 bytes at a time "
                                   "(and stores into e4m3 8)")
                if not isinstance(last, int) or (last * g.dtype.nbytes) % 16:
                    return False, f"{g}: rows that are not a constant multiple of 16 bytes"
    return True, ("no product, shared tile or position-dependent op needs the mma fragment's column order: "
                  "each lane holds 8 contiguous columns of a row, so register tiles load and store straight "
                  "between global memory and registers, 16 bytes per lane (ld/st.global.v4), with no "
                  "shared-memory staging or barrier")
