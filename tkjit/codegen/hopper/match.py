"""Which kernels the Hopper path compiles: the warp-specialized GEMM pattern.

    blocks (m, n) {                          2-D block loop (grid or persistent, any group)
      acc = zeros : rt<f32>[BM, BN]
      acc' = for k in 0 .. T step 1 (acc) {  T from constants and tensor dimensions
        a = load A, m, k : st<bf16>[BM, BK]
        b = load B, k, n : st<bf16>[BK, BN]  (mma_AB)   or  load B, n, k : st[BN, BK] (mma_ABt)
        yield mma_AB(a, b, acc)              (or mma_ABt)
      }
      store C, [cvt<C's dtype>](acc'), m, n
    }

plus any scalar arithmetic (constants, dims, tile counts). A, B, C are 2-D globals; A and B are
bf16 or f16; C is bf16, f16 or f32. ``match_gemm`` returns a GemmMatch, or the reason the
kernel is not this pattern (the caller falls back to the register-tile backend).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import NotAvailableError
from ...frozen import Frozen
from ...ir.core import Kernel, Op, Value
from ...ir.ops import Blocks, Const, Cvt, For, Load, MmaAB, MmaABt, Store, Yield, Zeros
from ...ir.types import BF16, F16, F32, GlobalType, ScalarType, TileType
from ..abi import grid_expr

INPUT_DTYPES = (BF16, F16)
OUTPUT_DTYPES = (BF16, F16, F32)


class NoMatch(Exception):
    """Why a kernel is not the GEMM pattern (internal: match_gemm returns the message)."""


@dataclass(unsafe_hash=True)
class GemmMatch(Frozen):
    """A kernel matched as the GEMM pattern: its ops, parameters, tile sizes and dtypes."""

    kernel: Kernel
    blocks: Blocks
    loop: For
    load_a: Load
    load_b: Load
    mma: Op
    store: Store
    a: int
    b: int
    c: int
    """Parameter indices of A, B and C."""
    bm: int
    bn: int
    bk: int
    dtype: str
    c_dtype: str
    b_major: str
    """"MN" (mma_AB: B is [K, N]) or "K" (mma_ABt: B is [N, K])."""
    trips: object
    """The loop's trip count as a JSON expression over named dims (grid-expression form)."""
    counts: tuple
    """The block counts (tiles along M, tiles along N) as JSON expressions."""

    @property
    def params(self) -> list[Value]:
        return self.kernel.params

    @property
    def split(self) -> int:
        """How many CTAs (one cluster) share each tile's K loop (the block loop's ``split``)."""
        return int(self.blocks.attrs.get("split", 1))


def match_gemm(kernel: Kernel) -> GemmMatch | str:
    try:
        return _match(kernel)
    except NoMatch as e:
        return str(e)


def _match(kernel: Kernel) -> GemmMatch:
    blocks_ops = [op for op in kernel.body.ops if isinstance(op, Blocks)]
    if len(blocks_ops) != 1:
        raise NoMatch(f"needs one block loop, found {len(blocks_ops)}")
    blocks = blocks_ops[0]
    _only_scalars(kernel.body.ops, blocks)
    if len(blocks.variadic()) != 2:
        raise NoMatch(f"the block loop is {len(blocks.variadic())}-D; the GEMM pattern's is 2-D (m, n)")
    body = blocks.regions[0]
    bm_arg, bn_arg = body.args
    loops = [op for op in body.ops if isinstance(op, For)]
    stores = [op for op in body.ops if isinstance(op, Store)]
    if len(loops) != 1 or len(stores) != 1:
        raise NoMatch(f"the tile body has {len(loops)} loop(s) and {len(stores)} store(s); the GEMM "
                      "pattern has one of each")
    loop, store = loops[0], stores[0]
    mma, load_a, load_b, k_arg = _match_loop(loop)
    init = loop.variadic()[0].owner
    if not isinstance(init, Zeros):
        raise NoMatch("the accumulator does not start as zeros()")
    c_value, c_dtype = _match_store(store, loop)
    allowed = {init, loop, store, c_value.owner if isinstance(c_value.owner, Cvt) else None}
    _only_scalars(body.ops, *[op for op in allowed if op is not None])
    params = kernel.params
    a, b, c = (param_index(params, op.operands[0]) for op in (load_a, load_b, store))
    ta, tb = load_a.result.type, load_b.result.type
    b_major = "MN" if isinstance(mma, MmaAB) else "K"
    _check_coords(load_a, (bm_arg, k_arg), "A")
    _check_coords(load_b, (k_arg, bn_arg) if b_major == "MN" else (bn_arg, k_arg), "B")
    _check_coords(store, (bm_arg, bn_arg), "C")
    for name, index in (("A", a), ("B", b), ("C", c)):
        if params[index].type.rank != 2:
            raise NoMatch(f"{name} is {params[index].type}; the Hopper GEMM takes 2-D tensors")
    if ta.dtype not in INPUT_DTYPES or tb.dtype != ta.dtype:
        raise NoMatch(f"A and B are {ta.dtype} and {tb.dtype}; the Hopper GEMM takes bf16 or f16")
    bn = tb.cols if b_major == "MN" else tb.rows
    trips = _expr(loop.operands[1], "the loop's trip count", loop)
    counts = tuple(_expr(v, "a block count", blocks) for v in blocks.variadic())
    return GemmMatch(kernel, blocks, loop, load_a, load_b, mma, store, a, b, c, ta.rows, bn, ta.cols,
                     ta.dtype.name, c_dtype, b_major, trips, counts)


def _match_loop(loop: For):
    lo, step = loop.operands[0], loop.operands[2]
    if const_value(lo) != 0 or const_value(step) != 1:
        raise NoMatch("the K loop must run from 0 in steps of 1")
    if len(loop.variadic()) != 1:
        raise NoMatch(f"the K loop carries {len(loop.variadic())} values; the GEMM pattern carries "
                      "the accumulator only")
    body = loop.regions[0]
    k_arg, acc_arg = body.args
    loads = [op for op in body.ops if isinstance(op, Load)]
    mmas = [op for op in body.ops if isinstance(op, (MmaAB, MmaABt))]
    if len(loads) != 2 or len(mmas) != 1:
        raise NoMatch(f"the K loop has {len(loads)} load(s) and {len(mmas)} mma_AB/mma_ABt; the "
                      "GEMM pattern has two loads and one product")
    mma = mmas[0]
    term = body.terminator
    if not isinstance(term, Yield) or list(term.operands) != [mma.result]:
        raise NoMatch("the K loop must yield the product")
    if len(mma.operands) != 3 or mma.operands[2] is not acc_arg:
        raise NoMatch("the product must accumulate into the loop's carried accumulator")
    a_val, b_val = mma.operands[0], mma.operands[1]
    by_result = {op.result: op for op in loads}
    if a_val not in by_result or b_val not in by_result:
        raise NoMatch("the product's operands must be the loop's two shared-tile loads")
    load_a, load_b = by_result[a_val], by_result[b_val]
    for ld in (load_a, load_b):
        if not (isinstance(ld.result.type, TileType) and ld.result.type.space == "st"):
            raise NoMatch("the product's operands must be shared tiles (st)")
    acc_t = mma.result.type
    if acc_t.dtype != F32:
        raise NoMatch(f"the accumulator is {acc_t.dtype}; the Hopper GEMM accumulates in f32")
    _only_scalars(body.ops, load_a, load_b, mma, term)
    return mma, load_a, load_b, k_arg


def _match_store(store: Store, loop: For) -> tuple[Value, str]:
    value = store.operands[1]
    c_dtype = store.operands[0].type.dtype
    if c_dtype not in OUTPUT_DTYPES:
        raise NoMatch(f"C is {c_dtype}; the Hopper GEMM stores bf16, f16 or f32")
    if value is loop.results[0]:
        return value, c_dtype.name
    owner = value.owner
    if isinstance(owner, Cvt) and owner.operands[0] is loop.results[0]:
        if owner.result.type.dtype != c_dtype:
            raise NoMatch(f"the stored tile is {owner.result.type.dtype} but C is {c_dtype} (two "
                          "roundings)")
        return value, c_dtype.name
    raise NoMatch("the store must write the loop's accumulator (optionally through cvt)")


def _only_scalars(ops, *allowed: Op) -> None:
    for op in ops:
        if op in allowed or isinstance(op, Yield) and not op.operands:
            continue
        if op.regions or not all(isinstance(v.type, ScalarType) for v in (*op.operands, *op.results)):
            raise NoMatch(f"'{op.NAME}' is not part of the GEMM pattern")


def _check_coords(op: Op, want: tuple[Value, ...], name: str) -> None:
    got = tuple(op.variadic())
    if got != want:
        names = ", ".join(f"%{v.hint}" for v in want)
        raise NoMatch(f"{name} must be addressed at tile coordinates ({names})")


def param_index(params: list[Value], v: Value) -> int:
    """The index of the global parameter ``v`` is (a pattern's tensors are kernel parameters)."""
    for i, p in enumerate(params):
        if p is v and isinstance(p.type, GlobalType):
            return i
    raise NoMatch("a load or store does not name a kernel parameter")


def const_value(v: Value):
    """The value of a ``const`` op's result, else None."""
    return v.owner.attrs["value"] if isinstance(v.owner, Const) else None


def _expr(v: Value, what: str, where: Op):
    try:
        return grid_expr(v, where)
    except NotAvailableError:
        raise NoMatch(f"{what} must come from constants and tensor dimensions") from None
