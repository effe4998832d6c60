"""The general lowering's copying producer: rows TMA cannot address (a row of a tensor the
producer loads is not a multiple of 16 bytes, e.g. a bf16 GEMM with K = 700).

A kernel compiled with the option ``unaligned_rows`` (the variant a launch with such rows
compiles, kernel.py) tests the loaded tensors' row lengths once in its prologue (``rows_ok``).
Where TMA can address them the producer is the one elected thread of lower_producer.py. Where it
cannot, all 128 producer threads walk the same protocol program: each ``TmaLoad`` step copies its
IR ``load`` element by element (zeros outside the tensor) into the swizzled panels the TMA boxes
would have written (copy.py), the ``ExpectTx`` step arrives on
nothing, and after the stage's last load the threads fence their writes for the async proxy
(wgmma reads through it), meet on a named barrier and one thread arrives on full[s]: full[s]
still counts one arrival per phase, so the consumers and the protocol the checker explored are
unchanged. Stores of a tensor whose rows may be such go from registers (no TMA-store staging,
``lower_consumer.plan_stagings``). The tensor maps of such tensors say ``fallback: true``: the
launcher encodes none where the kernel copies (runtime/tensormap.py).

A load of a tensor of rank 3 to 5 (a batch or head index before the tile's two coordinates)
copies from the matrix its leading coordinates select: their row-major offset, in 64 bits, moves
the source address (``leading_offset``); they index the tensor directly, as the TMA box's do.

Refused (``copy_refusal``): shared-tile loads of tensors with elements other than 1, 2 or 4
bytes, split-K tiles, the option ``strided`` (the copy reads rows as contiguous). ``lowering="auto"`` takes it
since its GPU test passed (tests/gpu/test_general_lowering_gpu.py, H200, 2026-11-27). A
multicast pair is not taken in this variant (passes/pairs.py): each CTA copies only its own
stage, so the kernel runs unpaired.
"""
from __future__ import annotations

from ...ir.core import Kernel
from ...ir.ops import Load
from ...ir.types import TileType
from ...passes.hopper import block_loop, is_shared, swizzle_bytes
from ...passes.sync_protocol import ExpectTx, TmaLoad
from . import copy, mbarrier
from .lower_producer import ProducerRole, load_stage_stride
from .wgmma import Operand

COPY_BARRIER = 15
"""The named barrier of the producer warpgroup's 128 threads after a copied stage (the consumers
use 0 (the CTA), 1, 2.. (staging) and 6.. (ping-pong turns))."""


def row_may_be_unaligned(param) -> bool:
    """Whether a row of ``param`` may not be a whole number of 16-byte units: its length is a
    named dim, or a constant that is not such a multiple."""
    last = param.type.dims[-1]
    return isinstance(last, str) or (last * param.type.dtype.nbytes) % 16 != 0


def shared_loads(kernel: Kernel) -> list[Load]:
    return [op for op in block_loop(kernel).walk() if isinstance(op, Load) and is_shared(op.result)]


def copy_refusal(kernel: Kernel, options: dict):
    """None where the copying producer can take every shared-tile load of ``kernel``; else the
    Refusal (lower.Refusal) naming what it cannot."""
    from .lower import Refusal
    if options.get("strided"):
        return Refusal(None, "rows that are not whole 16-byte units in views with strides as parameters: the "
                             "copying producer reads rows as contiguous")
    for op in shared_loads(kernel):
        g = op.operands[0].type
        if g.dtype.nbytes not in copy.ELEMENT:
            return Refusal(op, f"rows that are not whole 16-byte units: the copying producer copies tensors of "
                               f"1-, 2- or 4-byte elements, not {g.dtype} ones")
    return None


def rows_aligned(k) -> str | None:
    """Emit (in the common prologue) the predicate 'TMA can address every tensor the producer
    loads': each named row length a multiple of 16 bytes' worth of its elements (the launcher has
    checked the base addresses). None where no loaded tensor's row length is named and all are
    aligned."""
    b = k.b
    params = list(dict.fromkeys(op.operands[0] for op in shared_loads(k.kernel)))
    named = {}  # dim -> the largest element count a 16-byte unit holds among the tensors it ends
    for p in params:
        d = p.type.dims[-1]
        if isinstance(d, str):
            named[d] = max(named.get(d, 1), 16 // p.type.dtype.nbytes)
    constant_ok = all((p.type.dims[-1] * p.type.dtype.nbytes) % 16 == 0 for p in params
                      if not isinstance(p.type.dims[-1], str))
    if not named and constant_ok:
        return None
    ok = b.pred()
    if not constant_ok:
        b(f"setp.eq.u32 {ok}, 0, 1;")
        return ok
    bits, low = b.reg(), b.reg()
    b(f"mov.b32 {bits}, 0;")
    for d, multiple in named.items():
        b(f"and.b32 {low}, {b.dims[d]}, {multiple - 1};", f"or.b32 {bits}, {bits}, {low};")
    b(f"setp.eq.u32 {ok}, {bits}, 0;")
    return ok


def leading_offset(b, src: str, leading: list[str], dims: list[str], elem_bytes: int) -> str:
    """The address of the matrix that the leading coordinates ``leading`` select in the row-major
    tensor at ``src`` with extents ``dims`` (registers): src + ((c0 d1 + c1) d2 + ..) d[-2] d[-1]
    elements, in 64 bits."""
    n = len(leading)
    index, wide, extent = b.reg("b64"), b.reg("b64"), b.reg("b64")
    b(f"cvt.s64.s32 {index}, {leading[0]};")
    for i in range(1, n + 2):  # the leading extents after the first, then the matrix's two
        b(f"cvt.u64.u32 {extent}, {dims[i]};", f"mul.lo.s64 {index}, {index}, {extent};")
        if i < n:
            b(f"cvt.s64.s32 {wide}, {leading[i]};", f"add.s64 {index}, {index}, {wide};")
    if elem_bytes > 1:
        b(f"shl.b64 {index}, {index}, {elem_bytes.bit_length() - 1};")
    address = b.reg("b64")
    b(f"add.s64 {address}, {src}, {index};")
    return address


class CopyingProducer(ProducerRole):
    """All 128 producer threads walk the protocol's producer program and copy each load."""

    def walk(self) -> None:
        k, b = self.k, self.b
        self.leader = b.pred()
        b(f"setp.eq.u32 {self.leader}, {k.tid_wg}, 0;")
        self.walk_rings()

    def expect_tx(self, step: ExpectTx) -> None:
        self.b("// copied: the arrival follows the stage's last load")

    def tma_load(self, step: TmaLoad) -> None:
        b, ctx, k = self.b, self.ctx, self.k
        load: Load = self.loads[(step.ring, step.load)]
        r = self.rings[step.ring]
        t: TileType = load.result.type
        param = load.operands[0]
        coords = [ctx.get(v).reg for v in load.variadic()]
        stage = b.reg()
        stride = load_stage_stride(k.schedule.ring_loop.get(step.ring), load)
        b(f"mad.lo.u32 {stage}, {r.s}, {stride}, {k.smem};",
          f"add.u32 {stage}, {stage}, {load.attrs['smem']};")
        row0, col0 = b.reg(), b.reg()
        b(f"mul.lo.s32 {row0}, {coords[-2]}, {t.rows};", f"mul.lo.s32 {col0}, {coords[-1]}, {t.cols};")
        dims = [b.dims[d] if isinstance(d, str) else b.mov(d) for d in param.type.dims]
        rows, cols = dims[-2:]
        src = k.globals[id(param)]
        if len(dims) > 2:
            src = leading_offset(b, src, coords[:-2], dims, t.dtype.nbytes)
        op = Operand("K", t.rows, t.cols, swizzle_bytes(t), t.dtype.nbytes)  # the TMA boxes' panels
        copy.copy_tile(b, op, k.tid_wg, src, rows, cols, row0, col0, stage)
        if step.load == r.ring.loads[-1].name:
            b("fence.proxy.async.shared::cta;", f"bar.sync {COPY_BARRIER}, {copy.PRODUCER_THREADS};",
              self.leading(mbarrier.arrive(self.bar(r, "full"))))


__all__ = [
    "COPY_BARRIER",
    "CopyingProducer",
    "copy_refusal",
    "leading_offset",
    "row_may_be_unaligned",
    "rows_aligned",
    "shared_loads",
]
