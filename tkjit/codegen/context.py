"""The emission context: values → registers, per-thread index registers, shared-memory
synchronization, padding predicates and the helpers every emitter uses.

Per-thread values that never change (lane, warp row/column, a layout's row and column base) are
computed once in the kernel *prologue* the first time an emitter asks for them, so they are
defined on every path. Shared-memory address bases are cached per op only (``fresh_scope``): kept
for the whole kernel they would hold registers through every loop.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

from ..errors import NotAvailableError
from ..ir.core import Block, Kernel, Op, Value
from ..ir.types import BF16, BOOL, F16, F32, I32, DType, describe
from .layout import AxisSplit, TileLayout, WarpGrid
from .padding import UNKNOWN, Axis, Limit, PaddingInfo
from .ptx import Namer, f32_imm
from .smem import Geometry, Region, SmemPlan
from .values import RegTile

SMEM_SYMBOL = "tk_smem"



_THREAD_INDEX = {
    # name: (instruction, derived from, operand; None = the warp grid's column count)
    "lane": ("and.b32", "tid", 31),
    "warp": ("shr.u32", "tid", 5),
    "g": ("shr.u32", "lane", 2),
    "t": ("and.b32", "lane", 3),
    "wrow": ("div.u32", "warp", None),
    "wcol": ("rem.u32", "warp", None),
}
"""How each thread index derives from %tid.x (lane, warp, quad row g and column t, warp-grid row and column)."""


class SharedSync:
    """Inserts ``bar.sync`` where a shared-memory access could race with an earlier one.

    It remembers the regions written and read since the last barrier: a write needs a barrier
    when it overlaps either, a read when it overlaps a write. All control flow in a kernel is
    uniform over the block (conditions are scalars), so a barrier on any path is safe."""

    EVERYTHING = Region(0, 1 << 30)
    BARRIER = "bar.sync 0;"
    """The barrier every thread that touches shared scratch meets at: the CTA's (the general
    lowering's consumers meet at theirs only: hopper/lower_layout.py)."""

    def __init__(self) -> None:
        self.written: list[Region] = []
        self.read: list[Region] = []
        self.log: list[tuple[str, Region | None]] | None = None
        """While a hoisted loop body is emitted (emit_control.emit_for): its accesses in order, as
        ("w"|"r", region), and ("bar", None) where this tracker put a barrier."""

    def write(self, region: Region) -> list[str]:
        out = self._barrier_if(any(region.overlaps(r) for r in self.written + self.read))
        self.written.append(region)
        self._note("w", region)
        return out

    def read_(self, region: Region) -> list[str]:
        out = self._barrier_if(any(region.overlaps(r) for r in self.written))
        self.read.append(region)
        self._note("r", region)
        return out

    def _barrier_if(self, needed: bool) -> list[str]:
        if not needed:
            return []
        self.written, self.read = [], []
        self._note("bar", None)
        return [self.BARRIER]

    def _note(self, kind: str, region: Region | None) -> None:
        if self.log is not None:
            self.log.append((kind, region))

    @staticmethod
    def races(state: tuple[list[Region], list[Region]], accesses: list[tuple[str, Region | None]]) -> bool:
        """Whether ``accesses`` (("w"|"r", region)) could race with the pending ``state`` (written,
        read) if no barrier came between: a write against either, a read against a write."""
        written, read = state
        for kind, region in accesses:
            if any(region.overlaps(r) for r in written) or (kind == "w" and any(region.overlaps(r) for r in read)):
                return True
        return False

    def assume_anything(self) -> None:
        """At a loop head (and after a loop) any earlier access may be pending."""
        self.written, self.read = [self.EVERYTHING], [self.EVERYTHING]

    def state(self) -> tuple[list[Region], list[Region]]:
        return list(self.written), list(self.read)

    def restore(self, state) -> None:
        self.written, self.read = list(state[0]), list(state[1])

    def join(self, *states) -> None:
        self.written = [r for s in states for r in s[0]]
        self.read = [r for s in states for r in s[1]]


@dataclass(frozen=True)
class Pattern:
    """Per-thread addresses into shared tiles of one geometry.

    Thread row ``row`` (+ a multiple of 8 given per access), 16-byte chunk
    ``wchunk + lchunk + dc`` (``dc`` per access), byte ``byte`` inside the chunk. ``wchunk`` is a
    warp-dependent register known to be a multiple of ``walign``; ``lchunk`` is at most ``lmax``."""

    geometry: Geometry
    row: str
    wchunk: str | None
    walign: int
    lchunk: str | None
    lmax: int
    byte: str | None


class AxisMask:
    """``mask[key]`` emits ``setp`` for one element position and returns the predicate; making
    them at the point of use keeps few predicates live (there are only 7 hardware ones)."""

    def __init__(self, ctx: "Ctx", rel: str, which: str, out: list[str], split: AxisSplit | None = None):
        self.ctx, self.rel, self.which, self.out, self.split = ctx, rel, which, out, split

    def __getitem__(self, key: tuple[int, int]) -> str:
        unit, k = key
        if self.which == "rows":
            offset = (self.split.unit_offset(unit, 16) if self.split else 16 * unit) + 8 * k
        else:
            offset = self.ctx.grid.col_offset(unit, k)
        p = self.ctx.new("pred")
        self.out.append(f"setp.gt.s32 {p}, {self.rel}, {offset};")
        return p


class Ctx:
    def __init__(self, kernel: Kernel, grid: WarpGrid, plan: SmemPlan, pads: PaddingInfo,
                 options: dict, emitters):
        self.kernel, self.grid, self.plan, self.pads, self.options = kernel, grid, plan, pads, options
        self.emitters = emitters
        self.namer = Namer()
        self.values: dict[int, object] = {}
        self.prologue: list[str] = []
        self._cache: dict = {}
        self._op_cache: dict = {}
        self._labels = 0
        self.sync = SharedSync()
        self.globals: dict[int, str] = {}   # id(param) -> .u64 global address register
        self.check_buffer: str | None = None  # checked mode's error buffer (emit_check.py)
        self.dims: dict[str, str] = {}      # named dim -> .s32 register
        self.strides: dict[int, list[str]] = {}  # id(param) -> .s64 stride registers (option strided)
        self.decisions: list[dict] = []
        self.pipelines: dict = {}           # id(for) -> LoopPipeline
        self.prefetched: dict[int, object] = {}  # id(load) -> its SharedTile this trip
        self.in_flight_regions: dict[int, Region] = {}
        """id() of a deferred load's shared tile -> its region (copies_landed)."""
        self.copies_in_flight: set[int] = set()
        """id() of the shared tiles whose loads (``wait = "deferred"``) issued copies not yet
        awaited: ``await_copies`` waits for them before an op reads one or holds a region."""
        self.edge_branched: list | None = None
        """None, or (the general lowering's option) the reductions that mask padding only on
        tiles reaching past their tensor's edge, behind a uniform branch (emit_reduce)."""
        self.edge_known: dict = {}
        """(padding limit, extent) -> whether the enclosing edge-versioned region is the copy
        for a whole tile (True) or the edge copy (False): emit_reduce.edge_versioned."""
        self.edge_regions = False
        """(The general lowering's option) an if branch whose reductions mask padding at one
        limit is emitted twice under one edge branch instead of one branch a reduction."""
        self.edge_regions_done: list = []
        """The first reduction of each region so versioned (for the decision log)."""
        self.tree_reductions = False
        """(The general lowering's option) a thread combines its elements of a row or column
        pairwise (depth log2 n) instead of in one chain (depth n): emit_reduce."""
        self.reduced: list = []
        """The reductions emitted pairwise (for the general lowering's decision log)."""

    # -- values --------------------------------------------------------------------------
    def bind(self, v: Value, rep) -> None:
        self.values[id(v)] = rep

    def get(self, v: Value):
        try:
            return self.values[id(v)]
        except KeyError:
            raise NotAvailableError(f"internal: %{v.hint} ({describe(v.type)}) used before it was "
                                    "emitted") from None

    def new(self, kind: str) -> str:
        return self.namer.new(kind)

    def label(self, hint: str) -> str:
        self._labels += 1
        return f"$L_{hint}_{self._labels}"

    def decide(self, decision: str, value, why: str) -> None:
        entry = {"decision": decision, "value": value, "why": why}
        if entry not in self.decisions:
            self.decisions.append(entry)

    # -- emission of regions ---------------------------------------------------------------
    def emit_block(self, block: Block) -> list[str]:
        out: list[str] = []
        for op in block.ops:
            out += self.await_copies(op)
            out += self.emit_op(op)
        if self.copies_in_flight:  # nothing leaves a block with its copies unawaited
            self.copies_landed()
            out.append("cp.async.wait_all;")
        return out

    def copies_landed(self) -> None:
        """A ``cp.async.wait_all`` was emitted: the deferred loads' copies have landed. Under
        ``loop_barriers = "hoisted"`` their tiles count as written here (the hazard tracker saw
        their writes at the issue, and a barrier for something else since then would have
        cleared them: without the option every loop head assumes anything is pending)."""
        if getattr(self.kernel, "attrs", {}).get("loop_barriers") == "hoisted":
            for region in self.in_flight_regions.values():
                self.sync.written.append(region)
                self.sync._note("w", region)
        self.copies_in_flight.clear()
        self.in_flight_regions.clear()

    def await_copies(self, op: Op) -> list[str]:
        """``cp.async.wait_all`` before ``op`` where it reads a shared tile whose copies a deferred
        load left in flight, or holds a region (whose ops may read one, or wait for copies of
        their own); the deferred loads' copies are then all landed."""
        if not self.copies_in_flight or not (op.regions or any(id(v) in self.copies_in_flight
                                                                for v in op.operands)):
            return []
        self.copies_landed()
        return ["cp.async.wait_all;  // the deferred loads' copies"]

    def emit_op(self, op: Op) -> list[str]:
        emitter = self.emitters.lookup(op)
        try:
            with self.fresh_scope():
                lines = emitter(self, op)
        except NotAvailableError as e:
            if e.span is None and op.span is not None:  # a refusal deep in a helper: at the op
                e.span = op.span
            raise
        if op.span is not None and lines:
            return [f"// {op.NAME} at {op.span.location()}"] + lines
        return lines

    @contextmanager
    def fresh_scope(self):
        """Registers cached for reuse (addresses, smem bases) stay inside this scope: code emitted
        under a branch must not hand its registers to code after the branch."""
        saved, self._op_cache = self._op_cache, {}
        try:
            yield
        finally:
            self._op_cache = saved

    # -- prologue-cached per-thread registers --------------------------------------------
    def cached(self, key, build) -> str:
        """A prologue register: ``build(out)`` appends its computation and returns its name."""
        if key not in self._cache:
            lines: list[str] = []
            self._cache[key] = build(lines)
            self.prologue += lines
        return self._cache[key]

    def tid(self, name: str) -> str:
        """``tid``, ``lane``, ``warp``, ``g`` (lane/4), ``t`` (lane%4), ``wrow``, ``wcol``."""
        def build(out):
            r = self.new("b32")
            if name == "tid":
                out.append(f"mov.u32 {r}, %tid.x;")
            else:
                instr, source, operand = _THREAD_INDEX[name]
                operand = self.grid.wc if operand is None else operand
                out.append(f"{instr} {r}, {self.tid(source)}, {operand};")
            return r
        return self.cached(("tid", name), build)

    def imm_expr(self, key, text: str) -> str:
        """A prologue register holding ``text`` formatted with ``{r}`` as the destination."""
        def build(out):
            r = self.new("b32")
            out.append(text.format(r=r))
            return r
        return self.cached(key, build)

    def group(self, split: AxisSplit, axis: str) -> str:
        """The thread's row group (axis 'row') or column group ('col') for a split."""
        warp_idx = self.tid("wrow" if axis == "row" else "wcol")
        if split.groups == split.warp_span:
            return warp_idx
        return self.imm_expr(("group", axis, split.groups), f"rem.u32 {{r}}, {warp_idx}, {split.groups};")

    def row_base(self, split: AxisSplit) -> str:
        """Row of the thread's element (band 0, half 0): group*bands*16 + g; interleaved (a
        warpgroup's slabs), 16*(group % k) + 16*k*bands*(group / k) + g."""
        q = self.group(split, "row")
        k = split.interleave
        if k and split.per_warp > 1:
            def build(out):
                r, s = self.new("b32"), self.new("b32")
                out += [f"and.b32 {r}, {q}, {k - 1};", f"mad.lo.u32 {r}, {r}, 16, {self.tid('g')};",
                        f"shr.u32 {s}, {q}, {k.bit_length() - 1};",
                        f"mad.lo.u32 {r}, {s}, {16 * k * split.per_warp}, {r};"]
                return r
            return self.cached(("row_base", split.groups, split.per_warp, k), build)
        return self.imm_expr(("row_base", split.groups, split.per_warp),
                             f"mad.lo.u32 {{r}}, {q}, {16 * split.per_warp}, {self.tid('g')};")

    def col_base(self, split: AxisSplit) -> str:
        """Column of the thread's element (chunk 0, even column): group*chunks*8 + 2t (8t in the
        contiguous column order; ``WarpGrid.col_offset`` gives the other elements' columns)."""
        p = self.group(split, "col")
        shift = 3 if self.grid.contiguous_cols else 1
        t2 = self.imm_expr(("t2", shift), f"shl.b32 {{r}}, {self.tid('t')}, {shift};")
        return self.imm_expr(("col_base", split.groups, split.per_warp),
                             f"mad.lo.u32 {{r}}, {p}, {8 * split.per_warp}, {t2};")

    def writer(self, rows: AxisSplit | None, cols: AxisSplit | None, lane: str | None) -> str:
        """A predicate true in one copy of replicated data: replica 0 of the warp grid along the
        given splits, and lane condition ``lane`` ('g0': g == 0, 't0': t == 0, None: any)."""
        key = ("writer", rows and rows.groups, cols and cols.groups, lane)

        def build(out):
            p = self.new("pred")
            conds = []
            if rows is not None and rows.replicated:
                conds.append((self.tid("wrow"), rows.groups))
            if cols is not None and cols.replicated:
                conds.append((self.tid("wcol"), cols.groups))
            if lane == "g0":
                conds.append((self.tid("g"), 1))
            elif lane == "t0":
                conds.append((self.tid("t"), 1))
            if not conds:
                out.append(f"setp.eq.u32 {p}, 0, 0;")
                return p
            first, *rest = conds
            out.append(f"setp.lt.u32 {p}, {first[0]}, {first[1]};")
            for reg, bound in rest:
                out.append(f"setp.lt.and.u32 {p}, {reg}, {bound}, {p};")
            return p
        return self.cached(key, build)

    def smem_base(self, dyn: str | None = None, out: list[str] | None = None) -> str:
        """The shared address of the dynamic shared memory, plus ``dyn`` (computed into ``out``)."""
        base = self.imm_expr(("smem",), f"mov.u32 {{r}}, {SMEM_SYMBOL};")
        if dyn is None:
            return base
        key = ("smem+", dyn)
        if key not in self._op_cache:
            r = self.new("b32")
            out.append(f"add.u32 {r}, {base}, {dyn};")
            self._op_cache[key] = r
        return self._op_cache[key]

    def const_f32(self, value: float) -> str:
        def build(out):
            r = self.new("f32")
            out.append(f"mov.f32 {r}, {f32_imm(value)};")
            return r
        return self.cached(("f32", f32_imm(value)), build)

    # -- shared-memory fragment addresses ------------------------------------------------
    def address(self, pat: Pattern, offset: int, dr: int, dc: int, out: list[str],
                dyn: str | None = None) -> str:
        """``[reg+imm]`` for the thread's row + dr (dr % 8 == 0), chunk + dc of a tile at ``offset``.

        The base registers are computed in the current op (into ``out``) and reused within it
        only: kept for the whole kernel they would hold registers through every loop."""
        g = pat.geometry
        m = g.mask + 1
        aligned = pat.walign % m == 0 and (dc % m) + pat.lmax < m
        key = dc % m if aligned else dc
        cache_key = ("addr", pat, key, aligned, dyn)
        if cache_key not in self._op_cache:
            self._op_cache[cache_key] = self._pattern_base(pat, key, aligned, out, dyn)
        base = self._op_cache[cache_key]
        imm = offset + dr * g.row_bytes + 16 * (dc - key)
        return f"[{base}+{imm}]" if imm else f"[{base}]"

    def _pattern_base(self, pat: Pattern, key: int, aligned: bool, out: list[str], dyn: str | None) -> str:
        g = pat.geometry
        x, c, e = self.new("b32"), self.new("b32"), self.new("b32")
        out.append(f"shr.u32 {x}, {pat.row}, {g.shift};")
        out.append(f"and.b32 {x}, {x}, {g.mask};")
        lane_part = pat.lchunk if pat.lchunk else "0"
        out.append(f"add.u32 {c}, {lane_part}, {key};")
        if not aligned and pat.wchunk:
            out.append(f"add.u32 {c}, {c}, {pat.wchunk};")
        out.append(f"xor.b32 {c}, {c}, {x};")
        if aligned and pat.wchunk:
            out.append(f"add.u32 {c}, {c}, {pat.wchunk};")
        out.append(f"shl.b32 {c}, {c}, 4;")
        out.append(f"mad.lo.u32 {e}, {pat.row}, {g.row_bytes}, {c};")
        if pat.byte:
            out.append(f"add.u32 {e}, {e}, {pat.byte};")
        out.append(f"add.u32 {e}, {e}, {self.smem_base(dyn, out)};")
        return e

    def fragment_pattern(self, layout: TileLayout, geometry: Geometry) -> Pattern:
        """Addresses of the thread's element pairs (row g/g+8 of each band, columns 2t, 2t+1)."""
        es = geometry.elem_bytes
        chunks_per_8cols = 8 * es // 16
        wchunk = None
        if layout.cols.groups > 1:
            wchunk = self.imm_expr(("wchunk", layout.cols.groups, layout.cols.per_warp, es),
                                   f"mul.lo.u32 {{r}}, {self.group(layout.cols, 'col')}, "
                                   f"{layout.cols.per_warp * chunks_per_8cols};")
        walign = layout.cols.per_warp * chunks_per_8cols if wchunk else 1 << 20
        t = self.tid("t")
        if es == 2:
            lchunk, lmax = None, 0
            byte = self.imm_expr(("byte4t",), f"shl.b32 {{r}}, {t}, 2;")
        elif es == 4:
            lchunk, lmax = self.imm_expr(("t_hi",), f"shr.u32 {{r}}, {t}, 1;"), 1
            byte = self.imm_expr(("byte8t",), f"and.b32 {{r}}, {t}, 1;\nshl.b32 {{r}}, {{r}}, 3;")
        else:
            raise NotAvailableError(f"register tiles of {es}-byte elements have no shared-memory layout")
        return Pattern(geometry, self.row_base(layout.rows), wchunk, walign, lchunk, lmax, byte)

    # -- padding predicates ------------------------------------------------------------------
    def limit_count(self, limit: Limit | str, what: str, op: Op, out: list[str]) -> str:
        """A register with the number of valid elements along an axis (may be <= 0 or > extent)."""
        if limit == UNKNOWN:
            raise NotAvailableError(f"{op.NAME}: cannot tell where the padding of {what} starts (tiles "
                                    "from different tensor positions were combined, or a loop or if "
                                    "gives it padding on one path and none on another); the "
                                    "register-tile backend cannot mask it", op.span)
        r = self.new("b32")
        dim = self.dim_operand(limit.dim)
        coord = self.get(limit.coord).reg
        out.append(f"mul.lo.s32 {r}, {coord}, {limit.extent};")
        out.append(f"sub.s32 {r}, {dim}, {r};")
        for d, v in limit.lead:
            p = self.new("pred")
            out.append(f"setp.lt.u32 {p}, {self.get(v).reg}, {self.dim_operand(d)};")
            out.append(f"selp.s32 {r}, {r}, 0, {p};")
        return r

    def dim_operand(self, d) -> str:
        return str(d) if isinstance(d, int) else self.dims[d]

    def axis_preds(self, axis: Axis, split: AxisSplit, which: str, what: str, op: Op,
                   out: list[str]) -> "AxisMask":
        """Predicates 'element is valid' for the thread's rows ((band, half) keys) or columns
        ((chunk, column-in-pair) keys), each emitted into ``out`` right where it is used."""
        count = self.limit_count(axis.limit, what, op, out)
        rel = self.new("b32")
        base = self.row_base(split) if which == "rows" else self.col_base(split)
        out.append(f"sub.s32 {rel}, {count}, {base};")
        return AxisMask(self, rel, which, out, split)

    # -- element access ------------------------------------------------------------------------
    def tile_f32(self, tile: RegTile, b: int, j: int, i: int, out: list[str]) -> str:
        """Element i of (band b, chunk j) as an f32 register (unpacking bf16/f16 pairs)."""
        if not tile.packed:
            return tile.regs[b][j][i]
        return self.unpack(tile.type.dtype, tile.regs[b][j][i >> 1], i & 1, out)

    def unpack(self, dtype: DType, packed: str, which: int, out: list[str]) -> str:
        h = self.new("b16")
        f = self.new("f32")
        out.append(f"mov.b32 {{{h}, _}}, {packed};" if which == 0 else f"mov.b32 {{_, {h}}}, {packed};")
        out.append(f"cvt.f32.{'bf16' if dtype == BF16 else 'f16'} {f}, {h};")
        return f

    def pack(self, dtype: DType, lo: str, hi: str, out: list[str]) -> str:
        """Two f32 registers rounded (to nearest even) into one bf16x2/f16x2 register."""
        r = self.new("b32")
        out.append(f"cvt.rn.{'bf16x2' if dtype == BF16 else 'f16x2'}.f32 {r}, {hi}, {lo};")
        return r

    def pack_e4m3(self, lo: str, hi: str, out: list[str]) -> str:
        """Two f32 registers rounded into one 16-bit register of two e4m3 bytes, ``lo`` in the lower
        byte (``cvt.rn.satfinite.e4m3x2.f32`` puts its first source in the upper one): round to
        nearest even, magnitudes past 448 saturated, as interpreter/numerics.py rounds."""
        r = self.new("b16")
        out.append(f"cvt.rn.satfinite.e4m3x2.f32 {r}, {hi}, {lo};")
        return r

    def round_f32(self, dtype: DType, value: str, out: list[str]) -> str:
        """An f32 register rounded to a 16-bit float dtype (and back to f32); f32 passes through."""
        if dtype == F32:
            return value
        if dtype not in (BF16, F16):
            raise NotAvailableError(f"{dtype} values in registers are not supported yet")
        name = "bf16" if dtype == BF16 else "f16"
        h, f = self.new("b16"), self.new("f32")
        out.append(f"cvt.rn.{name}.f32 {h}, {value};")
        out.append(f"cvt.f32.{name} {f}, {h};")
        return f

    def build_tile(self, t, layout: TileLayout, elems: dict, out: list[str]) -> RegTile:
        """A RegTile of type ``t`` from f32 element registers ``elems[(b, j, i)]``."""
        if t.dtype == F32:
            regs = [[[elems[(b, j, i)] for i in range(4)] for j in range(layout.chunks)]
                    for b in range(layout.bands)]
        elif t.dtype in (BF16, F16):
            regs = [[[self.pack(t.dtype, elems[(b, j, 2 * h)], elems[(b, j, 2 * h + 1)], out)
                      for h in range(2)] for j in range(layout.chunks)] for b in range(layout.bands)]
        else:
            raise NotAvailableError(f"register tiles of {t.dtype} are not supported by the register-tile "
                                    "backend yet")
        return RegTile(t, layout, regs)

    def tile_layout(self, t) -> TileLayout:
        return self.grid.tile(t.rows, t.cols)

    def vec_split(self, t) -> AxisSplit:
        return self.grid.row_split(t.length) if t.kind == "cv" else self.grid.col_split(t.length)

    def scalar_f32(self, v: Value, out: list[str]) -> str:
        """A scalar operand as an f32 register (i32 converted, bool as 0/1)."""
        s = self.get(v)
        if s.dtype == I32:
            f = self.new("f32")
            out.append(f"cvt.rn.f32.s32 {f}, {s.reg};")
            return f
        if s.dtype == BOOL:
            f = self.new("f32")
            out.append(f"selp.f32 {f}, 0f3F800000, 0f00000000, {s.reg};")
            return f
        return s.reg

