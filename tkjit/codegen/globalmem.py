"""Global memory ↔ shared memory: cooperative, coalesced copies of whole tiles with edge handling.

Every thread of the block copies 16-byte chunks ``i = tid + k * threads`` of the tile (row
``i / chunks_per_row``, chunk ``i % chunks_per_row``), so consecutive threads touch consecutive
16 bytes of a row. Loads use ``cp.async.cg.shared.global`` with the src-size operand set to 0
for chunks outside the tensor (they are zero-filled); stores use ``ld.shared.v4`` then a
predicated ``st.global.v4`` (clipped). A chunk is all in or all out when the tensor's last
dimension is a multiple of the chunk's element count (8 bf16, 4 f32, 16 fp8); when it is not
(known at compile time for a constant dimension, tested once at run time otherwise) the copy
takes a slow path that moves single elements with per-element predicates.

A tensor of a kernel compiled with the option ``strided`` has its strides in registers
(``ctx.strides``): the window's origin is the sum of coordinate x stride, a row is ``row stride``
elements from the next, and the chunked copy needs every stride to be a multiple of a chunk too
(else the per-element path runs).
"""
from __future__ import annotations

from ..ir.core import Value
from ..ir.types import GlobalType
from .cache_hints import cp_async
from .smem import Geometry

_LOG2 = {1: 0, 2: 1, 4: 2, 8: 3}
_ELEM_LOAD = {1: "u8", 2: "u16", 4: "b32"}


class GlobalView:
    """A tile-shaped window of a global tensor: base address, edge limits, lead-index check.

    ``rows``/``cols`` are the tile's extents; for a vector ``rows`` is None and the window is
    the last dimension alone."""

    def __init__(self, ctx, param: Value, coords: list, rows: int | None, cols: int,
                 out: list[str]):
        """``coords``: the tile coordinates, as IR values or as registers."""
        g: GlobalType = param.type
        self.ctx = ctx
        self.es = g.dtype.nbytes
        self.ptr = ctx.globals[id(param)]
        self.is_tile = rows is not None
        lead_n = len(g.dims) - (2 if self.is_tile else 1)
        lead_dims, lead_coords = g.dims[:lead_n], coords[:lead_n]
        self.d_cols = ctx.dim_operand(g.dims[-1])
        self.d_rows = ctx.dim_operand(g.dims[-2]) if self.is_tile else None
        self.const_cols = g.dims[-1] if isinstance(g.dims[-1], int) else None
        regs = [c if isinstance(c, str) else ctx.get(c).reg for c in coords]
        self.lead_ok = None
        for d, c in zip(lead_dims, regs[:lead_n]):
            p = ctx.new("pred")
            if self.lead_ok is None:
                out.append(f"setp.lt.u32 {p}, {c}, {ctx.dim_operand(d)};")
            else:
                out.append(f"setp.lt.and.u32 {p}, {c}, {ctx.dim_operand(d)}, {self.lead_ok};")
            self.lead_ok = p
        self.strides = ctx.strides.get(id(param))
        """The .s64 registers of dims 0..n-2's strides (option ``strided``), or None: row-major."""
        self.row_stride = self.strides[-1] if self.strides and self.is_tile else None
        self.stride_bits = self._stride_bits(out) if self.strides else None
        # the element offset of the window's (0, 0), in 64 bits
        lin = ctx.new("b64")
        if self.strides:
            out.append(f"mov.b64 {lin}, 0;")
            for st, c in zip(self.strides, regs[:lead_n]):
                self._add_scaled(lin, c, st, out)
        elif lead_n:
            out.append(f"cvt.s64.s32 {lin}, {regs[0]};")
            for d, c in zip(lead_dims[1:], regs[1:lead_n]):
                self._mad64(lin, d, c, out)
        else:
            out.append(f"mov.b64 {lin}, 0;")
        self.col0 = ctx.new("b32")
        out.append(f"mul.lo.s32 {self.col0}, {regs[-1]}, {cols};")
        if self.is_tile:
            self.row0 = ctx.new("b32")
            out.append(f"mul.lo.s32 {self.row0}, {regs[-2]}, {rows};")
            if self.strides:
                self._add_scaled(lin, self.row0, self.row_stride, out)
            else:
                self._mad64(lin, g.dims[-2], self.row0, out)
        if self.strides:
            c64 = ctx.new("b64")
            out += [f"cvt.s64.s32 {c64}, {self.col0};", f"add.s64 {lin}, {lin}, {c64};"]
        else:
            self._mad64(lin, g.dims[-1], self.col0, out)
        self.base = ctx.new("b64")
        out.append(f"shl.b64 {lin}, {lin}, {_LOG2[self.es]};")
        out.append(f"add.s64 {self.base}, {self.ptr}, {lin};")

    def _mad64(self, lin: str, dim, coord: str, out: list[str]) -> None:
        """lin = lin * dim + coord (64-bit)."""
        d64, c64 = self.ctx.new("b64"), self.ctx.new("b64")
        out.append(f"cvt.s64.s32 {d64}, {self.ctx.dim_operand(dim)};" if not isinstance(dim, int)
                   else f"mov.b64 {d64}, {dim};")
        out.append(f"cvt.s64.s32 {c64}, {coord};")
        out.append(f"mad.lo.s64 {lin}, {lin}, {d64}, {c64};")

    def _add_scaled(self, lin: str, coord: str, stride: str, out: list[str]) -> None:
        """lin += coord * stride (64-bit; a stride register of the option ``strided``)."""
        c64 = self.ctx.new("b64")
        out += [f"cvt.s64.s32 {c64}, {coord};", f"mad.lo.s64 {lin}, {c64}, {stride}, {lin};"]

    def _stride_bits(self, out: list[str]) -> str:
        """A register OR-ing the low words of the strides and the last dim: its low bits are 0 when
        every row (and every leading step) keeps an alignment that the last dim keeps."""
        bits = self.ctx.new("b32")
        out.append(f"mov.b32 {bits}, {self.d_cols};")
        for st in self.strides:
            low = self.ctx.new("b32")
            out += [f"cvt.u32.u64 {low}, {st};", f"or.b32 {bits}, {bits}, {low};"]
        return bits

    def element_address(self, row: str | None, col: str, out: list[str]) -> str:
        """base + (row * row stride + col) * es for window-relative row/col registers (the row
        stride is d_cols for a row-major tensor)."""
        ctx = self.ctx
        a, c = ctx.new("b64"), ctx.new("b64")
        if row is not None and self.row_stride is not None:
            out += [f"cvt.s64.s32 {a}, {row};", f"mul.lo.s64 {a}, {a}, {self.row_stride};"]
            out.append(f"cvt.s64.s32 {c}, {col};")
            out.append(f"add.s64 {a}, {a}, {c};")
        elif row is not None:
            out.append(f"mul.wide.s32 {a}, {row}, {self.d_cols};")
            out.append(f"cvt.s64.s32 {c}, {col};")
            out.append(f"add.s64 {a}, {a}, {c};")
        else:
            out.append(f"cvt.s64.s32 {a}, {col};")
        out.append(f"shl.b64 {a}, {a}, {_LOG2[self.es]};")
        out.append(f"add.s64 {a}, {a}, {self.base};")
        return a

    def valid(self, row: str | None, col: str, out: list[str], guard: str | None = None) -> str:
        """Predicate: window-relative (row, col) lies inside the tensor (and ``guard``)."""
        ctx = self.ctx
        p, gc = ctx.new("pred"), ctx.new("b32")
        out.append(f"add.s32 {gc}, {col}, {self.col0};")
        out.append(f"setp.lt.u32 {p}, {gc}, {self.d_cols};")
        if row is not None:
            gr = ctx.new("b32")
            out.append(f"add.s32 {gr}, {row}, {self.row0};")
            out.append(f"setp.lt.and.u32 {p}, {gr}, {self.d_rows}, {p};")
        if self.lead_ok is not None:
            out.append(f"and.pred {p}, {p}, {self.lead_ok};")
        if guard is not None:
            out.append(f"and.pred {p}, {p}, {guard};")
        return p


def _swizzled(ctx, geo: Geometry, offset: int, row: str, chunk: str, out: list[str],
              dyn: str | None = None) -> str:
    """Shared address of (row, 16-byte chunk) of a tile at ``offset``."""
    x, s = ctx.new("b32"), ctx.new("b32")
    out.append(f"shr.u32 {x}, {row}, {geo.shift};")
    out.append(f"and.b32 {x}, {x}, {geo.mask};")
    out.append(f"xor.b32 {x}, {x}, {chunk};")
    out.append(f"shl.b32 {x}, {x}, 4;")
    out.append(f"mad.lo.u32 {s}, {row}, {geo.row_bytes}, {x};")
    out.append(f"add.u32 {s}, {s}, {ctx.smem_base(dyn, out)};")
    if offset:
        out.append(f"add.u32 {s}, {s}, {offset};")
    return s


class _ChunkWalk:
    """The thread's chunks k = 0, 1, ... of a cooperative tile copy.

    When the thread count and the chunks per row divide one another (always, for power-of-two
    tiles), chunk k of thread ``tid`` is (r0 + ROW(k), ch0 + CH(k)) with per-thread r0, ch0 and
    compile-time ROW(k), CH(k) (CH(k) a multiple of 8). Then the shared address is one of at most
    8 per-thread bases plus an immediate, and the global address one base plus ROW(k) row
    strides: few registers and no divisions per chunk. Otherwise each chunk divides at run time."""

    def __init__(self, ctx, view: GlobalView, geo: Geometry, offset: int, out: list[str],
                 dyn: str | None = None):
        self.ctx, self.view, self.geo, self.offset, self.dyn = ctx, view, geo, offset, dyn
        self.threads = ctx.grid.threads
        self.cpr = geo.chunks_per_row
        self.total = geo.rows * self.cpr
        self.count = -(-self.total // self.threads)
        self.regular = self.threads % self.cpr == 0 or self.cpr % self.threads == 0
        self.bases: dict[int, str] = {}
        if not self.regular:
            return
        tid = ctx.tid("tid")
        if self.threads % self.cpr == 0:
            self.r0, self.ch0 = ctx.new("b32"), ctx.new("b32")
            out.append(f"div.u32 {self.r0}, {tid}, {self.cpr};")
            out.append(f"rem.u32 {self.ch0}, {tid}, {self.cpr};")
        else:
            self.r0, self.ch0 = "0", tid
        epc, es = geo.elems_per_chunk, geo.elem_bytes
        # global: address of chunk (r0, ch0) and the row stride, both 64-bit
        self.rowstride = ctx.new("b64")
        if view.row_stride is not None:
            out.append(f"mul.lo.s64 {self.rowstride}, {view.row_stride}, {es};")
        else:
            out.append(f"mul.wide.s32 {self.rowstride}, {view.d_cols}, {es};")
        col = ctx.new("b32")
        out.append(f"mul.lo.u32 {col}, {self.ch0}, {epc};")
        self.gaddr0 = view.element_address(self.r0 if view.is_tile else None, col, out)
        # validity: row (r0 + row0) and column (ch0 * epc + col0) registers
        self.gcol = ctx.new("b32")
        out.append(f"add.s32 {self.gcol}, {col}, {view.col0};")
        if view.is_tile:
            self.grow = ctx.new("b32")
            out.append(f"add.s32 {self.grow}, {self.r0}, {view.row0};")

    def _row_col(self, k: int) -> tuple[int, int]:
        i = k * self.threads
        if self.threads % self.cpr == 0:
            return i // self.cpr, 0
        return i // self.cpr, i % self.cpr

    def _smem_base(self, e: int, out: list[str]) -> str:
        """smem + offset + (r0 + e) * row_bytes + 16 * (ch0 ^ xor(r0 + e))."""
        if e not in self.bases:
            ctx, geo = self.ctx, self.geo
            row, x, b = ctx.new("b32"), ctx.new("b32"), ctx.new("b32")
            out.append(f"add.u32 {row}, {self.r0}, {e};")
            out.append(f"shr.u32 {x}, {row}, {geo.shift};")
            out.append(f"and.b32 {x}, {x}, {geo.mask};")
            out.append(f"xor.b32 {x}, {x}, {self.ch0};")
            out.append(f"shl.b32 {x}, {x}, 4;")
            out.append(f"mad.lo.u32 {b}, {row}, {geo.row_bytes}, {x};")
            out.append(f"add.u32 {b}, {b}, {ctx.smem_base(self.dyn, out)};")
            self.bases[e] = b
        return self.bases[e]

    def chunk(self, k: int, out: list[str]) -> tuple[str, str, str, str | None]:
        """(valid predicate, global address, shared address operand, guard or None) of chunk k."""
        ctx, view, geo = self.ctx, self.view, self.geo
        guard = None
        if (k + 1) * self.threads > self.total:
            guard = ctx.new("pred")
            out.append(f"setp.lt.u32 {guard}, {ctx.tid('tid')}, {self.total - k * self.threads};")
        if not self.regular:
            row, ch = self._divide(k, out)
            col = ctx.new("b32")
            out.append(f"mul.lo.u32 {col}, {ch}, {geo.elems_per_chunk};")
            ok = view.valid(row if view.is_tile else None, col, out)
            addr = view.element_address(row if view.is_tile else None, col, out)
            return ok, addr, f"[{_swizzled(ctx, geo, self.offset, row, ch, out, self.dyn)}]", guard
        drow, dch = self._row_col(k)
        ok, gc = ctx.new("pred"), ctx.new("b32")
        out.append(f"add.s32 {gc}, {self.gcol}, {dch * geo.elems_per_chunk};")
        out.append(f"setp.lt.u32 {ok}, {gc}, {view.d_cols};")
        if view.is_tile:
            gr = ctx.new("b32")
            out.append(f"add.s32 {gr}, {self.grow}, {drow};")
            out.append(f"setp.lt.and.u32 {ok}, {gr}, {view.d_rows}, {ok};")
        if view.lead_ok is not None:
            out.append(f"and.pred {ok}, {ok}, {view.lead_ok};")
        addr = ctx.new("b64")
        out.append(f"mad.lo.s64 {addr}, {self.rowstride}, {drow}, {self.gaddr0};")
        if dch:
            out.append(f"add.s64 {addr}, {addr}, {dch * 16};")
        base = self._smem_base(drow % 8, out)
        imm = self.offset + (drow - drow % 8) * geo.row_bytes + 16 * dch
        return ok, addr, f"[{base}+{imm}]" if imm else f"[{base}]", guard

    def _divide(self, k: int, out: list[str]) -> tuple[str, str]:
        ctx = self.ctx
        i, row, ch = ctx.new("b32"), ctx.new("b32"), ctx.new("b32")
        out.append(f"add.u32 {i}, {ctx.tid('tid')}, {k * self.threads};")
        out.append(f"div.u32 {row}, {i}, {self.cpr};")
        out.append(f"rem.u32 {ch}, {i}, {self.cpr};")
        return row, ch


def _aligned_cols(ctx, view: GlobalView, geo: Geometry, out: list[str]) -> str | bool:
    """True/False when known statically, else a predicate: the last dim is a multiple of a chunk
    (and, for a strided tensor, every stride: then each row of a window starts on a chunk)."""
    epc = geo.elems_per_chunk
    if view.const_cols is not None and view.stride_bits is None:
        return view.const_cols % epc == 0
    if view.const_cols is not None and view.const_cols % epc:
        return False
    r, p = ctx.new("b32"), ctx.new("pred")
    out.append(f"and.b32 {r}, {view.stride_bits or view.d_cols}, {epc - 1};")
    out.append(f"setp.eq.u32 {p}, {r}, 0;")
    return p


def _two_paths(ctx, aligned, fast, slow, out: list[str]) -> None:
    """The fast path, the slow path, or both behind a uniform branch (each in its own scope)."""
    if aligned is True:
        out += fast()
        return
    if aligned is False:
        out += slow()
        return
    l_slow, l_done = ctx.label("slow_copy"), ctx.label("copied")
    out.append(f"@!{aligned} bra.uni {l_slow};")
    with ctx.fresh_scope():
        out += fast()
    out.append(f"bra.uni {l_done};")
    out.append(f"{l_slow}:")
    with ctx.fresh_scope():
        out += slow()
    out.append(f"{l_done}:")


def _chunk_loop(ctx, geo: Geometry, body, out: list[str]) -> None:
    """A runtime loop over the thread's chunks: body(row, chunk) -> lines."""
    threads = ctx.grid.threads
    total = geo.rows * geo.chunks_per_row
    i, p = ctx.new("b32"), ctx.new("pred")
    head, done = ctx.label("chunk"), ctx.label("chunks_done")
    out.append(f"mov.u32 {i}, {ctx.tid('tid')};")
    out.append(f"{head}:")
    out.append(f"setp.ge.u32 {p}, {i}, {total};")
    out.append(f"@{p} bra.uni {done};")
    row, ch = ctx.new("b32"), ctx.new("b32")
    out.append(f"div.u32 {row}, {i}, {geo.chunks_per_row};")
    out.append(f"rem.u32 {ch}, {i}, {geo.chunks_per_row};")
    out += body(row, ch)
    out.append(f"add.u32 {i}, {i}, {threads};")
    out.append(f"bra.uni {head};")
    out.append(f"{done}:")


def copy_in(ctx, view: GlobalView, geo: Geometry, offset: int, out: list[str], dyn: str | None = None,
            wait: bool = True) -> None:
    """Global window → shared tile (zero-filling everything outside the tensor)."""
    epc, es = geo.elems_per_chunk, geo.elem_bytes

    def fast():
        lines: list[str] = []
        cp, hint = cp_async(ctx)
        walk = _ChunkWalk(ctx, view, geo, offset, lines, dyn)
        for k in range(walk.count):
            ok, addr, saddr, guard = walk.chunk(k, lines)
            safe, n = ctx.new("b64"), ctx.new("b32")
            lines.append(f"selp.b64 {safe}, {addr}, {view.ptr}, {ok};")
            lines.append(f"selp.u32 {n}, 16, 0, {ok};")
            pred = f"@{guard} " if guard else ""
            lines.append(f"{pred}{cp} {saddr}, [{safe}], 16, {n}{hint};")
        if wait:
            lines.append("cp.async.wait_all;")
        return lines

    def slow():
        lines: list[str] = []

        def body(row, ch):
            b: list[str] = []
            words = []
            per_word = 4 // es
            for w in range(4):
                word = ctx.new("b32")
                b.append(f"mov.b32 {word}, 0;")
                for e in range(per_word):
                    col = ctx.new("b32")
                    b.append(f"mad.lo.u32 {col}, {ch}, {epc}, {w * per_word + e};")
                    ok = view.valid(row if view.is_tile else None, col, b)
                    addr = view.element_address(row if view.is_tile else None, col, b)
                    x = ctx.new("b32")
                    b.append(f"mov.b32 {x}, 0;")
                    b.append(f"@{ok} ld.global.{_ELEM_LOAD[es]} {x}, [{addr}];")
                    if e:
                        b.append(f"shl.b32 {x}, {x}, {8 * es * e};")
                    b.append(f"or.b32 {word}, {word}, {x};")
                words.append(word)
            s = _swizzled(ctx, geo, offset, row, ch, b, dyn)
            b.append(f"st.shared.v4.b32 [{s}], {{{', '.join(words)}}};")
            return b
        _chunk_loop(ctx, geo, body, lines)
        return lines

    _two_paths(ctx, _aligned_cols(ctx, view, geo, out), fast, slow, out)


def copy_out(ctx, view: GlobalView, geo: Geometry, offset: int, out: list[str],
             dyn: str | None = None) -> None:
    """Shared tile → global window, skipping everything outside the tensor."""
    epc, es = geo.elems_per_chunk, geo.elem_bytes

    def fast():
        lines: list[str] = []
        walk = _ChunkWalk(ctx, view, geo, offset, lines, dyn)
        for k in range(walk.count):
            ok, addr, saddr, guard = walk.chunk(k, lines)
            if guard:
                lines.append(f"and.pred {ok}, {ok}, {guard};")
            words = [ctx.new("b32") for _ in range(4)]
            pred = f"@{guard} " if guard else ""
            lines.append(f"{pred}ld.shared.v4.b32 {{{', '.join(words)}}}, {saddr};")
            lines.append(f"@{ok} st.global.v4.b32 [{addr}], {{{', '.join(words)}}};")
        return lines

    def slow():
        lines: list[str] = []

        def body(row, ch):
            b: list[str] = []
            s = _swizzled(ctx, geo, offset, row, ch, b, dyn)
            words = [ctx.new("b32") for _ in range(4)]
            b.append(f"ld.shared.v4.b32 {{{', '.join(words)}}}, [{s}];")
            per_word = 4 // es
            for w in range(4):
                for e in range(per_word):
                    col = ctx.new("b32")
                    b.append(f"mad.lo.u32 {col}, {ch}, {epc}, {w * per_word + e};")
                    ok = view.valid(row if view.is_tile else None, col, b)
                    addr = view.element_address(row if view.is_tile else None, col, b)
                    if es == 4:
                        b.append(f"@{ok} st.global.b32 [{addr}], {words[w]};")
                        continue
                    x = ctx.new("b32")
                    b.append(f"shr.u32 {x}, {words[w]}, {8 * es * e};")
                    b.append(f"@{ok} st.global.{'u16' if es == 2 else 'u8'} [{addr}], {x};")
            return b
        _chunk_loop(ctx, geo, body, lines)
        return lines

    _two_paths(ctx, _aligned_cols(ctx, view, geo, out), fast, slow, out)
