"""The ``tile-split`` pass: a block tile too wide for ping-pong consumers, whose epilogue is worth
hiding, runs as two tiles of half its width.

Ping-pong consumers (warp-spec) each hold a whole tile's accumulator, so that one consumer's
epilogue runs while the other's wgmmas keep the tensor cores busy. A 128 x 256 f32 accumulator
needs about 290-350 registers a thread there, over the 240 two consumers can get, so such a tile
runs cooperative, and at every tile the tensor cores wait for its epilogue. Where that epilogue
does more than convert and store (epilogue_cost.py: a bias, an activation, a residual tile read,
a second output), this pass rewrites the block loop to walk tiles of half the width: the grid
count of the split block index becomes ``cdiv(X, W / 2)`` and every tile and vector dimension that
index addresses takes W / 2 -- the kernel computes the same values, tile by tile, and warp-spec then
gives the half-width tiles ping-pong consumers.

Which dimensions the index addresses is found by dataflow, not by shape: a load or store whose
coordinate at a tile dimension is the index seeds it; elementwise ops, broadcasts, reductions,
products and loop-carried values tie dimensions together (union-find); a load or store that
addresses a tied dimension by another coordinate, a reduction across it, a product's K along it,
an index used in arithmetic or an op the pass does not know refuses the split (logged). ``@fill_sms``
kernels are left to the launch's own half-width variant (tkjit/fill_sms.py).

Measured (H200, 2026-11-27, benchmarks/probes/unseen_kernels.py, the kernel kept whole / split,
same run, …-s16-tile-split-1.json): a batched GEMM + bias + erf gelu written at 128 x 256 ran
7.3% faster split (the other consumer's wgmmas hide part of the epilogue: docs/hopper-codegen.md,
"Where 4096^3's time goes"). The plain GEMM (epilogue PLAIN) is not split, nor one under
MIN_CYCLES or with several stores (measured: they gain under 2% or lose). Option ``mode``: auto, off.

Second rule (``split_for = "fit"``): where no cooperative consumer split holds the whole tile (of
any multiple of 64 rows: ``warp_spec.fitting_split``), warp-spec would decline the kernel and it would run on the
mma.sync backend (about 0.4x); the same rewrite then halves it whatever its epilogue, so the
half-width tile keeps the wgmma lowering. A kernel that pins ``@consumers`` keeps its tile.

Third rule (``split_for = "widen"``, option ``widen``): a tile whose K loop reads a tile it
streams into registers each trip (RMSNorm's sums of the A tile beside the product, an f32, fp8 or
dequantized A converted for an RS product) runs at twice its width, up to 256 columns, where a
consumer split holds it: the trip's register work is set by the tile's rows and K step while the
product's work grows with its columns, so at 128 columns the consumers spent as long reading and
converting as the tensor cores computing (``WIDEN_MEASURED``). The same rewrite, by two.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import PassError
from ..ir.core import Kernel, Op, Value
from ..ir.ops import MMA_OPS, Blocks, Const, Copy, Cvt, For, Load, Store, Yield
from ..ir.ops.elementwise import Binary, CmpSelect, Fill, Select, Unary, Zeros
from ..ir.ops.reduce import Broadcast, Reduce
from ..ir.types import I32, ScalarType, TileType, VectorType
from .epilogue_cost import PLAIN, epilogue_cost
from .hopper import block_loop, pipelined_loops
from .manager import Pass, PassContext, register_pass
from .rewrite import clone_kernel, erase, use_counts
from .warp_spec import PINGPONG_MIN_COLS, WarpSpec, fitting_split, pingpong_fit

MODES = ("auto", "off")
SPLIT_ROWS = 128
"""The accumulator rows the split is for: two 64-row slabs, one consumer's whole tile."""
MIN_HALF = PINGPONG_MIN_COLS
"""The narrowest half the split makes (warp-spec's ping-pong is measured at 128 columns)."""
ROWS = "'s rows would be split (only columns are)"
"""Why an index that addresses the product's rows (not a candidate: not reported) is not split."""
MIN_CYCLES = 8.0
"""The epilogue cost (epilogue_cost.py, warp cycles per accumulator element) from which a split
pays. Measured (H200, 2026-11-27, benchmarks/probes/unseen_kernels.py, whole / split tile, same
run, benchmarks/results/2026-11-27-nvidia-h200-s16-tile-split-1.json): bmm + bias + erf gelu
(17.5) 0.932, i.e. the split 7.3% faster; relu(A·B + row bias) + residual (5.5) 0.995; the fp8
GEMM's scale (2.0) 0.984 at 8192^3 -- below this, within 2%, so those stay whole (their cooperative
consumers already defer the TMA store under the next tile's first wgmmas); the activation is what
ping-pong hides."""


class _Dims:
    """Union-find over (value, dimension) nodes with a mark per class: split or kept."""

    def __init__(self):
        self.parent: dict = {}
        self.mark: dict = {}

    def find(self, x):
        root = self.parent.setdefault(x, x)
        while root != self.parent[root]:
            root = self.parent[root]
        while x != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def tie(self, a, b) -> str:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return ""
        ma, mb = self.mark.get(ra), self.mark.get(rb)
        if ma is not None and mb is not None and ma[0] != mb[0]:
            return ma[1] if not ma[0] else mb[1]
        self.parent[rb] = ra
        if ma is None and mb is not None:
            self.mark[ra] = mb
        return ""

    def set(self, node, split: bool, why: str) -> str:
        r = self.find(node)
        m = self.mark.get(r)
        if m is not None and m[0] != split:
            return m[1] if not m[0] else why
        if m is None:
            self.mark[r] = (split, why)
        return ""

    def is_split(self, node) -> bool:
        m = self.mark.get(self.find(node))
        return bool(m and m[0])


def _rank(t) -> int:
    return 2 if isinstance(t, TileType) else 1 if isinstance(t, VectorType) else 0


def _where(op: Op) -> str:
    return f"{op.NAME} at line {op.span.line}" if getattr(op, "span", None) else op.NAME


def split_dims(kernel: Kernel, index: Value) -> tuple[_Dims | None, str]:
    """The tile and vector dimensions ``index`` (a block index) addresses, tied through the
    block body; (None, why) where the split cannot keep the kernel's meaning."""
    dims = _Dims()
    body = block_loop(kernel).regions[0]

    def coords(op: Op, value: Value, tensor) -> str:
        cs = op.variadic()
        lead = tensor.rank - _rank(value.type)
        for p, c in enumerate(cs):
            if c is index and p < lead:
                return f"{_where(op)} indexes a leading dimension with it"
        for d in range(_rank(value.type)):
            by = cs[lead + d]
            why = dims.set((value, d), by is index, f"{_where(op)} addresses that dimension by "
                                                    f"another coordinate")
            if why:
                return why
        return ""

    def tie_all(values) -> str:
        regs = [v for v in values if _rank(v.type)]
        for v in regs[1:]:
            for d in range(min(_rank(v.type), _rank(regs[0].type))):
                why = dims.tie((regs[0], d), (v, d))
                if why:
                    return why
        return ""

    def visit(block) -> str:
        for op in block.ops:
            why = one(op)
            if why:
                return why
        return ""

    def one(op: Op) -> str:
        if any(v is index for v in op.operands) and not isinstance(op, (Load, Store)):
            return f"{_where(op)} computes with the block index (only tile coordinates are split)"
        if isinstance(op, For):
            return loop(op)
        if op.regions:
            return f"{_where(op)} has a region the split does not follow"
        if isinstance(op, Load):
            return coords(op, op.result, op.operands[0].type)
        if isinstance(op, Store):
            return coords(op, op.operands[1], op.operands[0].type)
        if isinstance(op, MMA_OPS):
            a, b = op.operands[0], op.operands[1]
            r = op.result
            m_a, k_a = (1, 0) if op.TA else (0, 1)
            k_b, n_b = (1, 0) if op.TB else (0, 1)
            for why in (dims.tie((r, 0), (a, m_a)), dims.tie((r, 1), (b, n_b)),
                        dims.tie((a, k_a), (b, k_b)),
                        dims.set((a, k_a), False, f"{_where(op)}'s K would be split"),
                        dims.set((r, 0), False, f"{_where(op)}{ROWS}")):
                if why:
                    return why
            acc = op.operand("acc")
            return tie_all([r, acc]) if acc is not None else ""
        if isinstance(op, Reduce):
            x, r = op.operands[0], op.result
            along, keep = (1, 0) if op.AXIS == "row" else (0, 1)
            return dims.tie((r, 0), (x, keep)) or dims.set((x, along), False, f"{_where(op)} reduces across it")
        if isinstance(op, Broadcast):
            x, v, r = op.operands[0], op.operands[1], op.result
            return tie_all([x, r]) or dims.tie((v, 0), (x, 0 if op.AXIS == "row" else 1))
        if isinstance(op, (Binary, Unary, Cvt, Copy, Select, CmpSelect)):
            return tie_all([*op.operands, *op.results])
        if isinstance(op, (Zeros, Fill, Const, Yield)) or \
                not any(_rank(v.type) for v in (*op.operands, *op.results)):
            return ""
        return f"{_where(op)} is not an op the split knows how to halve"

    def loop(op: For) -> str:
        region = op.regions[0]
        inits, args = op.variadic(), region.args[1:]
        for i, res in enumerate(op.results):
            why = tie_all([inits[i], args[i], res])
            if why:
                return why
        why = visit(region)
        if why:
            return why
        term = region.terminator
        if isinstance(term, Yield):
            for i, y in enumerate(term.operands):
                why = tie_all([y, op.results[i]])
                if why:
                    return why
        return ""

    why = visit(body)
    return (None, why) if why else (dims, "")


def _count_of(blocks: Blocks, i: int, width: int):
    """The grid count of block index ``i`` as (X, the cdiv op) when it is cdiv(X, width)."""
    count = blocks.variadic()[i]
    op = count.owner if isinstance(count.owner, Op) else None
    if op is None or op.NAME != "cdiv":
        return None
    c = op.operands[1].owner
    if isinstance(c, Const) and c.attrs["value"] == width:
        return op
    return None


def _resize(kernel: Kernel, dims: _Dims, width: int, index_pos: int, new_width: int) -> None:
    """Every tile and vector dimension ``dims`` marks takes ``new_width / width`` of its size, and
    the block index's grid count becomes ``cdiv(X, new_width)``."""
    blocks = block_loop(kernel)

    def scaled(n: int) -> int:
        return n * new_width // width
    for op in blocks.walk():
        values = list(op.results) + [a for r in op.regions for a in r.args]
        for v in values:
            t = v.type
            if isinstance(t, TileType):
                rows = scaled(t.rows) if dims.is_split((v, 0)) else t.rows
                cols = scaled(t.cols) if dims.is_split((v, 1)) else t.cols
                v.type = TileType(t.space, t.dtype, rows, cols, t.attrs)
            elif isinstance(t, VectorType) and dims.is_split((v, 0)):
                v.type = VectorType(t.kind, t.dtype, scaled(t.length), t.attrs)
    cdiv = _count_of(blocks, index_pos, width)
    old = blocks.operands[index_pos]
    size = Const(attrs={"value": new_width}, result_types=[ScalarType(I32)], result_hints=[f"c{new_width}"])
    new = type(cdiv)([cdiv.operands[0], size.result], result_types=[ScalarType(I32)], span=cdiv.span)
    parent = blocks.parent
    at = parent.ops.index(blocks)
    for o in (size, new):
        o.parent = parent
    parent.ops[at:at] = [size, new]
    blocks.operands[index_pos] = new.result
    uses = use_counts(kernel)
    if uses.get(old, 0) == 0:
        erase(cdiv)
        width_const = cdiv.operands[1]
        if use_counts(kernel).get(width_const, 0) == 0:
            erase(width_const.owner)


def product_loop(kernel: Kernel) -> tuple[Blocks, For, Value] | None:
    """(the block loop, its one pipelined loop, that loop's one accumulator tile) where the kernel
    has one matrix product, in the one pipelined loop directly in the block body, carrying one
    register tile; else None (what every rule of this pass rewrites)."""
    if not any(isinstance(op, Blocks) for op in kernel.body.ops):
        return None
    blocks = block_loop(kernel)
    if sum(isinstance(op, MMA_OPS) for op in kernel.walk()) != 1:
        return None
    loops = pipelined_loops(kernel)
    if len(loops) != 1 or not any(op is loops[0] for op in blocks.regions[0].ops):
        return None
    accs = [v for v in loops[0].results if isinstance(v.type, TileType)]
    return (blocks, loops[0], accs[0]) if len(accs) == 1 else None


def resized(kernel: Kernel, pos: int, width: int, new_width: int) -> tuple[Kernel, str]:
    """A copy of ``kernel`` whose block index ``pos`` walks tiles of ``new_width`` (``_resize``
    over that index's dimensions), and the index's name for the log."""
    trial = clone_kernel(kernel)
    index = block_loop(trial).regions[0].args[pos]
    dims, _ = split_dims(trial, index)
    _resize(trial, dims, width, pos, new_width)
    return trial, index.hint or str(pos)


def split_plan(kernel: Kernel, ctx: PassContext | None = None) -> tuple[tuple[int, int, str] | None, str]:
    """(block index position, tile width, what for: "fit" where no consumer split holds the whole
    tile, "pingpong" where the half-width tile gets ping-pong consumers) to split, or (None, why
    not: '' where the kernel is not a candidate at all, so nothing is logged)."""
    found = product_loop(kernel)
    if found is None:
        return None, ""  # not a candidate
    blocks, loop, acc = found
    t = acc.type
    if t.rows % 64 or t.cols < 2 * MIN_HALF or t.cols % 128:
        return None, ""
    unfit = whole_unfit(kernel, acc, ctx)
    if unfit:
        head = (f"no consumer split holds the whole {t.rows}x{t.cols} tile ({unfit}), so warp-spec would "
                "decline it and the kernel would run on the mma.sync backend")
        if "fill_sms" in kernel.attrs:
            return None, f"{head}; @fill_sms launches its own half-width variant (tkjit/fill_sms.py)"
        if int(blocks.attrs.get("split", 1)) > 1 or int(blocks.attrs.get("cluster", 1)) > 1:
            return None, f"{head}; split-K or a cluster gives each tile CTAs of its own"
        plan, why = _index_plan(kernel, blocks, acc, head)
        return (plan + ("fit",) if plan else None), why
    if t.rows != SPLIT_ROWS:
        return None, ""
    cost = epilogue_cost(kernel, loop)
    if cost.cycles <= PLAIN:
        return None, ""
    stores = [op for op in blocks.walk() if isinstance(op, Store) and isinstance(op.operands[1].type, TileType)]
    need, room = pingpong_fit(kernel)
    if need <= room:
        return None, ""  # ping-pong runs at this width: warp-spec decides
    head = (f"{cost.text()}, and a whole {t.rows}x{t.cols} accumulator needs about {need} registers "
            f"per consumer thread, over the {room} ping-pong consumers can get")
    if cost.cycles < MIN_CYCLES:
        return None, (f"{head}; an epilogue under {MIN_CYCLES:g} cycles an element costs the cooperative "
                      "tile less than the split (tile_split.MIN_CYCLES, measured)")
    if len(stores) > 1:
        return None, (f"{head}; it stores {len(stores)} tiles: each would take a staging of its own beside "
                      "the half-width rings (a bias + gelu_tanh GEMM with two outputs measured 2.9% slower "
                      "split, H200, 2026-11-27, …-s16-tile-split-1.json)")
    if "fill_sms" in kernel.attrs:
        return None, f"{head}; @fill_sms launches its own half-width variant (tkjit/fill_sms.py)"
    if blocks.attrs.get("schedule") == "grid":
        return None, f"{head}; the kernel asks for schedule(grid): no ping-pong without a persistent loop"
    if int(blocks.attrs.get("split", 1)) > 1 or int(blocks.attrs.get("cluster", 1)) > 1:
        return None, f"{head}; split-K or a cluster gives each tile CTAs of its own"
    plan, why = _index_plan(kernel, blocks, acc, head)
    return (plan + ("pingpong",) if plan else None), why


WIDE = 256
"""The widest accumulator the third rule makes (wgmma's n is at most 256)."""
WIDEN_MEASURED = ("H200, 2026-11-28, benchmarks/probes/unseen_kernels.py, as written at 128 columns / at "
                  "256, same runs: RMSNorm fused into a linear layer 1.42x, the same with an RS product "
                  "1.34x, an f32 A 1.69x, an fp8 A 1.65x (benchmarks/results/"
                  "2026-11-28-nvidia-h200-s19-widen-probe-{1,2}.json)")
"""What the third rule (``widen``) was measured to do."""


def register_reads(loop: For) -> list[Op]:
    """The copies into registers of shared tiles that ``loop``'s own body loads (a tile the loop
    streams through its ring, read by the consumers each trip: mbarrier.is_ring_read)."""
    loaded = {op.result for op in loop.regions[0].ops if isinstance(op, Load)}
    return [op for op in loop.regions[0].ops if isinstance(op, Copy) and op.operands[0] in loaded
            and isinstance(op.result.type, TileType) and op.result.type.space == "rt"]


def widen_plan(kernel: Kernel, ctx: PassContext | None = None) -> tuple[tuple[int, int] | None, str]:
    """(block index position, tile width) to double, or (None, why not: '' where the kernel is
    not a candidate, so nothing is logged). A candidate: one product, in the one pipelined loop of
    the block body, whose trip reads a tile it streams into registers (a tile converted for an RS
    product, or summed beside an SS one); its accumulator at most ``WIDE / 2`` columns."""
    found = product_loop(kernel)
    if found is None:
        return None, ""
    blocks, loop, acc = found
    reads = register_reads(loop)
    if not reads:
        return None, ""
    t = acc.type
    if t.rows % 64 or t.cols * 2 > WIDE or t.cols % 64:
        return None, ""
    what = ", ".join(f"%{op.operands[0].hint or 'tile'}" for op in reads)
    head = (f"each trip reads {what} into registers: that work is set by the tile's rows and K step, "
            f"while the product's grows with its {t.cols} columns")
    pinned = kernel.attrs.get("consumers")
    if isinstance(pinned, int) and not isinstance(pinned, bool):
        return None, f"{head}; @consumers pins the consumers, so the tile is taken as written"
    if "fill_sms" in kernel.attrs:
        return None, f"{head}; @fill_sms chooses its tiles per launch (tkjit/fill_sms.py)"
    if int(blocks.attrs.get("split", 1)) > 1 or int(blocks.attrs.get("cluster", 1)) > 1:
        return None, f"{head}; split-K or a cluster gives each tile CTAs of its own"
    return _index_plan(kernel, blocks, acc, head)


def widened(kernel: Kernel, ctx: PassContext, where: str) -> Kernel | None:
    """The kernel at twice its tile's width where ``widen_plan`` finds an index and a consumer
    split holds the wider tile (logged either way), else None."""
    plan, why = widen_plan(kernel, ctx)
    if plan is None:
        if why:
            ctx.decide(where, "tile kept at its width", why)
        return None
    pos, width = plan
    trial, name = resized(kernel, pos, width, 2 * width)
    unfit = whole_unfit(trial, next(op.result for op in trial.walk() if isinstance(op, MMA_OPS)), ctx)
    if unfit:
        ctx.decide(where, "tile kept at its width", f"{why}; no consumer split holds the {2 * width}-column tile ({unfit})")
        return None
    ctx.decide(where, f"tiles of {2 * width} columns: %{name} walks cdiv(.., {2 * width})",
               f"{why}: at {2 * width} columns the same register work feeds twice the product, and the "
               f"consumers hold the wider tile; every tile and vector dimension %{name} addresses takes "
               f"{2 * width}: the same values, computed tile by tile (tile-split{{widen=off}} keeps "
               f"{width}; {WIDEN_MEASURED})", width=2 * width, index=name, split_for="widen")
    return trial


def whole_unfit(kernel: Kernel, acc: Value, ctx: PassContext | None = None) -> str:
    """Why no cooperative consumer split holds the whole tile ('' where one does: warp-spec's own
    ``fitting_split``, by which it declines the kernel otherwise), counted as warp-spec will count
    it: on a copy laid out by the layout pass (a vector in the wgmma fragment holds a thread's
    columns of every row slab: 64 registers for an rv<f32>[256], not 8)."""
    pinned = kernel.attrs.get("consumers")
    if isinstance(pinned, int) and not isinstance(pinned, bool):
        return ""  # @consumers pins the split, and warp-spec takes the pin as written (gemm_alpha_beta.tk)
    from ..options import CompileOptions
    from .decisions import DecisionLog
    from .layout import Layout
    try:
        laid = Layout().run(clone_kernel(kernel), PassContext(ctx.options if ctx else CompileOptions.resolve(),
                                                              DecisionLog()))
    except PassError:
        return ""  # the layout pass itself will say what is wrong
    n, tried, _, _ = fitting_split(laid, acc.type.rows // 64)
    return "" if n is not None else "; ".join(tried)


def _index_plan(kernel: Kernel, blocks: Blocks, acc: Value, head: str) -> tuple[tuple[int, int] | None, str]:
    """(the block index that addresses the accumulator's columns alone and its tile width, head), or
    (None, head and why no index does)."""
    t = acc.type
    reasons = []
    for pos, index in enumerate(blocks.regions[0].args):
        dims, why = split_dims(kernel, index)
        if dims is None:
            if not why.endswith(ROWS):
                reasons.append(f"%{index.hint or pos}: {why}")
            continue
        if not dims.is_split((acc, 1)):
            continue
        odd = next(((v, d) for v, d in dims.parent if dims.is_split((v, d)) and v.type.shape[d] != t.cols), None)
        if odd is not None:
            reasons.append(f"%{index.hint or pos}: it also addresses {odd[0].type} along a dimension of "
                           f"{odd[0].type.shape[odd[1]]}, not the tile's {t.cols}")
            continue
        if _count_of(blocks, pos, t.cols) is None:
            reasons.append(f"%{index.hint or pos}: its grid count is not cdiv(X, {t.cols})")
            continue
        return (pos, t.cols), head
    return None, f"{head}; no block index addresses the accumulator's columns alone ({'; '.join(reasons) or 'none does'})"


def asked_mode(ctx: PassContext) -> str:
    """The ``mode`` the compile's pipeline gives warp-spec ('auto' where it names none)."""
    if not ctx.options.pipeline:
        return "auto"
    from .manager import Pipeline
    return next((p.mode for p in Pipeline.parse(ctx.options.pipeline) if isinstance(p, WarpSpec)), "auto")


@register_pass
@dataclass(frozen=True)
class TileSplit(Pass):
    """The ``tile-split`` pass: a tile too wide for ping-pong consumers, with an epilogue worth
    hiding, runs as two half-width tiles."""

    name = "tile-split"
    summary = ("a tile too wide for ping-pong consumers, with an epilogue worth hiding, runs as two half-width "
               "tiles; one whose trip reads a streamed tile into registers runs at twice its width")
    target_specific = True
    mode: str = "auto"
    """auto (split where the epilogue costs more than a plain GEMM's), off."""
    widen: str = "auto"
    """auto (double a tile whose trip reads a streamed tile into registers, ``widen_plan``), off."""

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        if self.mode not in MODES:
            raise PassError(f"tile-split: mode must be {', '.join(MODES)}, got '{self.mode}'")
        if self.widen not in MODES:
            raise PassError(f"tile-split: widen must be {', '.join(MODES)}, got '{self.widen}'")
        if self.mode == "off":
            return kernel
        plan, why = split_plan(kernel, ctx)
        where = f"@{kernel.name}"
        if plan is None:
            if why:
                ctx.decide(where, "tile kept whole", why)
            if self.widen == "auto":
                return widened(kernel, ctx, where) or kernel
            return kernel
        pos, width, what = plan
        asked = asked_mode(ctx)
        if asked == "cooperative" and what == "pingpong":
            ctx.decide(where, "tile kept whole", f"{why}; warp-spec{{mode=cooperative}} asks for cooperative "
                       "consumers, which take the tile as written")
            return kernel
        trial, name = resized(kernel, pos, width, width // 2)
        if what == "fit":
            unfit = whole_unfit(trial, next(op.result for op in trial.walk() if isinstance(op, MMA_OPS)), ctx)
            if unfit:
                ctx.decide(where, "tile kept whole", f"{why}; the half-width tile fits none either ({unfit})")
                return kernel
            ctx.decide(where, f"tiles of {width // 2} columns: %{name} walks cdiv(.., {width // 2})",
                       f"{why}; at {width // 2} columns the consumers hold the tile, so the kernel keeps "
                       f"the wgmma lowering; every tile and vector dimension %{name} addresses takes "
                       f"{width // 2}: the same values, computed tile by tile", width=width // 2, index=name,
                       split_for="fit")
            return trial
        need, room = pingpong_fit(trial)
        if need > room:
            ctx.decide(where, "tile kept whole", f"{why}; the half-width tile needs about {need} (> {room}) too")
            return kernel
        ctx.decide(where, f"tiles of {width // 2} columns: %{name} walks cdiv(.., {width // 2})",
                   f"{why}; at {width // 2} columns one consumer holds a whole tile ({need} registers), so "
                   f"warp-spec can give them ping-pong consumers, one's epilogue beside the other's wgmmas "
                   f"(which hide part of it); every tile and vector dimension %{name} addresses takes {width // 2}: the same "
                   "values, computed tile by tile (measured, H200, 2026-11-27, whole / split, same run: "
                   "bmm 8x2048^3 + bias + erf gelu 0.932, i.e. the split 7.3% faster, "
                   "benchmarks/results/2026-11-27-nvidia-h200-s16-tile-split-1.json)",
                   width=width // 2, index=name, split_for="pingpong")
        return trial


__all__ = ["TileSplit", "split_dims", "split_plan", "widen_plan"]
