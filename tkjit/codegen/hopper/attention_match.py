"""Which kernels the Hopper attention path compiles: the online-softmax attention pattern.

    blocks (b, h, i) {                              3-D block loop (batch, head, query block)
      q = load Q, .., i, 0 : st<bf16>[BQ, D]        (leading coordinates: any scalar expression)
      o = zeros : rt<f32>[BQ, D];  mx = fill -inf : cv<f32>[BQ];  l = zeros : cv<f32>[BQ]
      l', o', mx' = for j in 0 .. T step 1 (l, o, mx) {      T: any scalar expression (causal: of i)
        k = load K, .., j, 0 : st[BKV, D];  v = load V, .., j, 0 : st[BKV, D]
        s = mul(mma_ABt(q, k), c)                   c: a scalar (scale · log2 e)
        [s = if cond { causal_mask(s, q0, k0) } else { s }]
        mx_new = max(mx, row_max(s));  p = exp2(sub_row(s, mx_new));  alpha = exp2(mx - mx_new)
        l_new = l * alpha + row_sum(p)
        o_new = mma_AB(cvt<bf16>(p), v, mul_row(o, alpha))
        yield l_new, o_new, mx_new                  (any order)
      }
      store O, cvt<bf16>(div_row(o', l')), .., i, 0
      store L, (mx' + log2(l')) * c2, .., i         c2: a scalar (ln 2)
    }

Commutative operands may come in either order; scalar arithmetic may appear anywhere. Every
tile op of the kernel must be one of these (nothing is silently dropped). ``match_attention``
returns an AttentionMatch, or the reason the kernel is not this pattern.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...frozen import Frozen
from ...ir.core import Kernel, Op, Value
from ...ir.ops import Blocks, Const, Cvt, For, If, Load, MmaAB, MmaABt, Store, Yield, Zeros
from ...ir.ops.elementwise import Add, CausalMask, Exp2, Fill, Log2, Max, Mul, Sub
from ...ir.types import BF16, F32, GlobalType, ScalarType, TileType, VectorType
from .scalars import UnsupportedScalar, supported

HEAD_DIMS = (64, 128)


class NoMatch(Exception):
    """Why a kernel is not the attention pattern, or why its plan cannot be made (internal:
    ``match_attention`` and ``plan_attention`` return the message)."""


def param_index(params: list[Value], v: Value) -> int:
    """The index of the global parameter ``v`` is (the pattern's tensors are kernel parameters)."""
    for i, p in enumerate(params):
        if p is v and isinstance(p.type, GlobalType):
            return i
    raise NoMatch("a load or store does not name a kernel parameter")


def const_value(v: Value):
    """The value of a ``const`` op's result, else None."""
    return v.owner.attrs["value"] if isinstance(v.owner, Const) else None


def _op_named(name: str) -> type:
    from ...ir.ops import reduce
    for cls in (*reduce.REDUCE_OPS, *reduce.BROADCAST_OPS):
        if cls.NAME == name:
            return cls
    raise KeyError(name)


RowMax, RowSum = _op_named("row_max"), _op_named("row_sum")
SubRow, MulRow, DivRow = _op_named("sub_row"), _op_named("mul_row"), _op_named("div_row")


@dataclass(unsafe_hash=True)
class AttentionMatch(Frozen):
    """A kernel matched as the online-softmax attention: its ops, scalars, parameters and blocks."""

    kernel: Kernel
    blocks: Blocks
    loop: For
    q_load: Load
    k_load: Load
    v_load: Load
    o_store: Store
    l_store: Store
    qk_scale: Value
    """The scalar the scores are multiplied by (scale · log2 e)."""
    lse_scale: Value
    """The scalar (mx + log2 l) is multiplied by to give L (ln 2)."""
    mask_cond: Value | None
    """The condition under which causal_mask applies (None: no causal mask)."""
    mask: CausalMask | None
    q: int
    k: int
    v: int
    o: int
    l: int
    """Parameter indices of Q, K, V, O and L."""
    bq: int
    bkv: int
    d: int
    block_args: tuple[Value, Value, Value]
    """(b, h, i) of the block loop."""
    j: Value
    trips: Value

    @property
    def params(self) -> list[Value]:
        return self.kernel.params

    @property
    def causal(self) -> bool:
        return self.mask is not None


def match_attention(kernel: Kernel) -> AttentionMatch | str:
    try:
        return _match(kernel)
    except NoMatch as e:
        return str(e)


def _owner(v: Value, cls, what: str) -> Op:
    op = v.owner
    if not isinstance(op, cls):
        got = getattr(op, "NAME", "a block argument")
        raise NoMatch(f"{what} must be {_names(cls)}, got '{got}' (%{v.hint})")
    return op


def _names(cls) -> str:
    classes = cls if isinstance(cls, tuple) else (cls,)
    return " or ".join(f"'{c.NAME}'" for c in classes)


def _split(op: Op, first, what: str) -> tuple[Value, Value]:
    """A commutative op's operands as (the one ``first`` accepts, the other)."""
    a, b = op.operands
    if first(a):
        return a, b
    if first(b):
        return b, a
    raise NoMatch(f"{what}: neither operand of '{op.NAME}' is the expected one")


def _is_scalar(v: Value) -> bool:
    return isinstance(v.type, ScalarType)


def _match(kernel: Kernel) -> AttentionMatch:
    blocks_ops = [op for op in kernel.body.ops if isinstance(op, Blocks)]
    if len(blocks_ops) != 1:
        raise NoMatch(f"needs one block loop, found {len(blocks_ops)}")
    blocks = blocks_ops[0]
    if len(blocks.variadic()) != 3:
        raise NoMatch(f"the block loop is {len(blocks.variadic())}-D; attention's is 3-D (batch, head, "
                      "query block)")
    body = blocks.regions[0]
    b_arg, h_arg, i_arg = body.args
    loops = [op for op in body.ops if isinstance(op, For)]
    if len(loops) != 1:
        raise NoMatch(f"the tile body has {len(loops)} loops; attention has one key/value loop")
    loop = loops[0]
    if len(loop.variadic()) != 3:
        raise NoMatch(f"the key loop carries {len(loop.variadic())} values; attention carries o, the "
                      "row maxima and the row sums")
    lo, step = loop.operands[0], loop.operands[2]
    if const_value(lo) != 0 or const_value(step) != 1:
        raise NoMatch("the key loop must run from 0 in steps of 1")
    inits = loop.variadic()
    lbody = loop.regions[0]
    j_arg, *carried = lbody.args
    o_pos = _carried(inits, lambda v: isinstance(v.owner, Zeros) and isinstance(v.type, TileType), "o = zeros()")
    mx_pos = _carried(inits, lambda v: isinstance(v.owner, Fill) and v.owner.attrs["value"] == float("-inf"),
                      "mx = fill(-inf)")
    l_pos = _carried(inits, lambda v: isinstance(v.owner, Zeros) and isinstance(v.type, VectorType), "l = zeros()")
    o_arg, mx_arg, l_arg = carried[o_pos], carried[mx_pos], carried[l_pos]
    term = lbody.terminator
    if not isinstance(term, Yield) or len(term.operands) != 3:
        raise NoMatch("the key loop must yield its three carried values")
    o_new, mx_new, l_new = term.operands[o_pos], term.operands[mx_pos], term.operands[l_pos]

    # o_new = mma_AB(cvt<bf16>(p), v, mul_row(o, alpha))
    pv = _owner(o_new, MmaAB, "the new o")
    if len(pv.operands) != 3:
        raise NoMatch("o must accumulate: mma_AB(cvt<bf16>(p), v, mul_row(o, alpha))")
    p_cvt = _owner(pv.operands[0], Cvt, "the A operand of P·V")
    if p_cvt.result.type.dtype != BF16:
        raise NoMatch(f"P is converted to {p_cvt.result.type.dtype}; this path feeds bf16 P to wgmma")
    p = p_cvt.operands[0]
    v_load = _owner(pv.operands[1], Load, "the B operand of P·V")
    rescale = _owner(pv.operands[2], MulRow, "the accumulator of P·V")
    if rescale.operands[0] is not o_arg:
        raise NoMatch("P·V must accumulate into mul_row(o, alpha) of the carried o")
    alpha = rescale.operands[1]
    # alpha = exp2(mx - mx_new)
    sub = _owner(_owner(alpha, Exp2, "alpha").operands[0], Sub, "alpha's exponent")
    if list(sub.operands) != [mx_arg, mx_new]:
        raise NoMatch("alpha must be exp2(mx - mx_new)")
    # mx_new = max(mx, row_max(s))
    mx_max = _owner(mx_new, Max, "the new row maximum")
    _, rmax = _split(mx_max, lambda v: v is mx_arg, "the new row maximum")
    s = _owner(rmax, RowMax, "the new row maximum's operand").operands[0]
    # p = exp2(sub_row(s, mx_new))
    sr = _owner(_owner(p, Exp2, "p").operands[0], SubRow, "p's exponent")
    if list(sr.operands) != [s, mx_new]:
        raise NoMatch("p must be exp2(sub_row(s, mx_new)) of the same s")
    # l_new = l * alpha + row_sum(p)
    l_add = _owner(l_new, Add, "the new row sum")
    l_mul, rsum = _split(l_add, lambda v: isinstance(v.owner, Mul), "the new row sum")
    _owner(rsum, RowSum, "the new row sum's second term")
    if rsum.owner.operands[0] is not p:
        raise NoMatch("the row sum must be row_sum(p)")
    if set(l_mul.owner.operands) != {l_arg, alpha}:
        raise NoMatch("the new row sum must be l * alpha + row_sum(p)")
    # s = [if cond { causal_mask(s0, q0, k0) } else { s0 }], s0 = mul(mma_ABt(q, k), c)
    mask_cond, mask = None, None
    if isinstance(s.owner, If):
        branch = s.owner
        then_y, else_y = (r.terminator.operands[s.index] for r in branch.regions)
        mask = _owner(then_y, CausalMask, "the masked scores")
        s0 = mask.operands[0]
        if else_y is not s0:
            raise NoMatch("the unmasked branch must yield the scores unchanged")
        mask_cond = branch.operands[0]
        for r in branch.regions:
            _only(r.ops, {mask, r.terminator}, "the masking branch")
    else:
        s0 = s
    scale_mul = _owner(s0, Mul, "the scores")
    qk, qk_scale = _split(scale_mul, lambda v: isinstance(v.owner, MmaABt), "the scores")
    if not _is_scalar(qk_scale):
        raise NoMatch("the scores must be scaled by a scalar")
    qk_op = qk.owner
    if len(qk_op.operands) != 2:
        raise NoMatch("S = mma_ABt(q, k) must not accumulate")
    q_load = _owner(qk_op.operands[0], Load, "the A operand of Q·Kᵀ")
    k_load = _owner(qk_op.operands[1], Load, "the B operand of Q·Kᵀ")
    if q_load.parent is not body:
        raise NoMatch("Q must be loaded once per tile, outside the key loop")
    for ld, name in ((k_load, "K"), (v_load, "V")):
        if ld.parent is not lbody:
            raise NoMatch(f"{name} must be loaded inside the key loop")
    loop_ops = {k_load, v_load, qk_op, scale_mul, rmax.owner, mx_max, sr, p.owner, sub, alpha.owner,
                l_mul.owner, rsum.owner, l_add, p_cvt, rescale, pv, term}
    if mask is not None:
        loop_ops.add(s.owner)
    _only(lbody.ops, loop_ops, "the key loop")

    # the epilogue
    res = {"o": loop.results[o_pos], "mx": loop.results[mx_pos], "l": loop.results[l_pos]}
    stores = [op for op in body.ops if isinstance(op, Store)]
    o_store = next((st for st in stores if isinstance(st.operands[1].type, TileType)), None)
    l_store = next((st for st in stores if isinstance(st.operands[1].type, VectorType)), None)
    if len(stores) != 2 or o_store is None or l_store is None:
        raise NoMatch("the tile body must store O (a tile) and L (a vector) once each")
    o_cvt = _owner(o_store.operands[1], Cvt, "the stored O")
    div = _owner(o_cvt.operands[0], DivRow, "the stored O before conversion")
    if list(div.operands) != [res["o"], res["l"]]:
        raise NoMatch("O must be cvt(div_row(o, l)) of the loop's results")
    l_scale_mul = _owner(l_store.operands[1], Mul, "the stored L")
    lse_sum, lse_scale = _split(l_scale_mul, lambda v: isinstance(v.owner, Add), "the stored L")
    if not _is_scalar(lse_scale):
        raise NoMatch("L must be (mx + log2(l)) times a scalar")
    lse_add = lse_sum.owner
    _, lg = _split(lse_add, lambda v: v is res["mx"], "L's sum")
    if _owner(lg, Log2, "L's second term").operands[0] is not res["l"]:
        raise NoMatch("L must be (mx + log2(l)) * ln 2")
    inits_ops = {v.owner for v in inits}
    _only(body.ops, {q_load, loop, o_store, l_store, o_cvt, div, l_scale_mul, lse_add, lg.owner}
          | inits_ops, "the tile body")
    _only([op for op in kernel.body.ops if op is not blocks], set(), "the kernel")

    # operands and shapes
    params = kernel.params
    q, k, v, o, l = (param_index(params, op.operands[0]) for op in (q_load, k_load, v_load, o_store, l_store))
    qt, kt, vt = (ld.result.type for ld in (q_load, k_load, v_load))
    for t, name in ((qt, "Q"), (kt, "K"), (vt, "V")):
        if t.space != "st" or t.dtype != BF16:
            raise NoMatch(f"{name} must be loaded as a bf16 shared tile, got {t}")
    if o_store.operands[0].type.dtype != BF16 or params[l].type.dtype != F32:
        raise NoMatch("O must be bf16 and L f32")
    d = qt.cols
    if d not in HEAD_DIMS:
        raise NoMatch(f"head dim {d}: this path handles {HEAD_DIMS}")
    if kt.cols != d or vt.cols != d or kt.rows != vt.rows:
        raise NoMatch(f"K and V tiles must both be [BKV, {d}], got {kt} and {vt}")
    for idx, name in ((q, "Q"), (k, "K"), (v, "V"), (o, "O")):
        t = params[idx].type
        if t.rank < 3 or t.dims[-1] != d:
            raise NoMatch(f"{name} must be a tensor of rank >= 3 whose last dimension is {d}, got {t}")
    if params[l].type.rank != params[o].type.rank - 1:
        raise NoMatch("L must have one dimension less than O")
    _coords(q_load, i_arg, "Q")
    _coords(o_store, i_arg, "O")
    _coords(l_store, i_arg, "L", vector=True)
    _coords(k_load, j_arg, "K")
    _coords(v_load, j_arg, "V")
    outer = {b_arg, h_arg, i_arg, *(x for x in params if _is_scalar(x))}
    inner = outer | {j_arg}
    try:
        for op in (q_load, o_store, l_store):
            for c in op.variadic():
                supported(c, outer)
        for op in (k_load, v_load):
            for c in op.variadic():
                supported(c, inner)
        supported(loop.operands[1], outer)
        supported(qk_scale, outer)
        supported(lse_scale, outer)
        if mask is not None:
            for x in (mask_cond, mask.operands[1], mask.operands[2]):
                supported(x, inner)
    except UnsupportedScalar as e:
        raise NoMatch(f"an index or scale cannot be computed: {e}") from None
    return AttentionMatch(kernel, blocks, loop, q_load, k_load, v_load, o_store, l_store, qk_scale,
                          lse_scale, mask_cond, mask, q, k, v, o, l, qt.rows, kt.rows, d,
                          (b_arg, h_arg, i_arg), j_arg, loop.operands[1])


def _carried(inits, test, what: str) -> int:
    hits = [n for n, v in enumerate(inits) if test(v)]
    if len(hits) != 1:
        raise NoMatch(f"the key loop must carry exactly one {what}")
    return hits[0]


def _coords(op: Op, row: Value, name: str, vector: bool = False) -> None:
    coords = list(op.variadic())
    if vector:
        if coords[-1] is not row:
            raise NoMatch(f"{name} must be addressed at (.., %{row.hint})")
        return
    if coords[-2] is not row or const_value(coords[-1]) != 0:
        raise NoMatch(f"{name} must be addressed at (.., %{row.hint}, 0): whole rows of the head dim")


def _only(ops, allowed: set, where: str) -> None:
    for op in ops:
        if op in allowed or isinstance(op, Yield) and not op.operands:
            continue
        if op.regions or not all(_is_scalar(v) for v in (*op.operands, *op.results)):
            raise NoMatch(f"'{op.NAME}' in {where} is not part of the attention pattern")
