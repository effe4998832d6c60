"""checks: checked mode's run-time checks, as explicit ``check`` ops (ir/ops/check.py).

In the default pipeline only when checked mode is on (``CompileOptions.checked``: the compile
option ``checked=True``, ``TKJIT_CHECKED=1`` or ``TKJIT_DEBUG=1``), right after canonicalize, so
the interpreter, the register-tile backend and the general sm_90a lowering all see the same
checks. Before the op that could fail it inserts the condition, as ordinary scalar ops, and a
``check`` whose message is the interpreter's own (the same templates):

* every global ``load``/``store``: each leading index in ``[0, size)``, each tile coordinate in
  ``[0, cdiv(size, extent))`` (reported: the coordinate, the tile count, the size);
* every i32 ``cdiv``/``floordiv``/``mod``/``div`` whose divisor is not a non-zero constant: the
  divisor is not 0 (reported: the dividend). Inside the block loop the division then divides by
  ``select(ok, b, 1)``, so a failed check leaves defined values behind it;
* every ``for`` whose step is not a positive constant: ``step > 0 or lo >= hi`` (reported: step,
  lo, hi), and the loop runs ``select``-ed bounds that give it no trip when the check fails (a
  zero step would otherwise spin forever on the GPU).

Checks of ops before the block loop (scalars only there) go at the start of the block body: the
general lowering computes only scalars before it, and the grid's expressions stay as they are.
A failed check does not stop the GPU's threads (docs/reliability.md, "Checked mode"): the
values after it are defined and every store is clipped to its tensor, so each role runs its
protocol to the end and nothing can hang; the launcher reports the first failure.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Block, Kernel, Op, Value
from ..ir.ops import (And, Blocks, CDiv, Const, Dim, Div, FloorDiv, For, Ge, Gt, Load, Lt, Mod, Ne,
                      Or, Select, Store)
from ..ir.ops.check import (Check, division_template, index_template, loop_step_template,
                            tile_coordinate_template)
from ..ir.types import BOOL, I32, GlobalType, ScalarType, TileType
from .manager import Pass, PassContext, register_pass

I32_T, BOOL_T = ScalarType(I32), ScalarType(BOOL)
_DIVISIONS = {CDiv: "/", FloorDiv: "//", Mod: "%", Div: "/"}


def _const(v: Value):
    return v.owner.attrs["value"] if isinstance(v.owner, Const) else None


class _Inserter:
    """Builds ops before ``block.ops[index]`` (checks of pre-loop ops: into ``checks_to``)."""

    def __init__(self, block: Block, index: int, span, checks_to: list | None = None):
        self.block, self.index, self.span, self.checks_to = block, index, span, checks_to

    def op(self, cls, operands, attrs=None, types=None) -> Op:
        op = cls(operands, attrs or {}, types, [], self.span)
        op.parent = self.block
        self.block.ops.insert(self.index, op)
        self.index += 1
        return op

    def value(self, cls, *operands: Value, **attrs) -> Value:
        return self.op(cls, list(operands), attrs).result

    def const(self, value) -> Value:
        return self.op(Const, [], {"value": value}, [BOOL_T if isinstance(value, bool) else I32_T]).result

    def size(self, dim) -> Value:
        return self.op(Dim, [], {"name": dim}, [I32_T]).result if isinstance(dim, str) else self.const(dim)

    def check(self, ok: Value, values: list[Value], message: str, ids: list) -> None:
        op = Check([ok, *values], {"id": len(ids), "message": message}, [], [], self.span)
        ids.append(op)
        if self.checks_to is not None:
            self.checks_to.append(op)
            return
        op.parent = self.block
        self.block.ops.insert(self.index, op)
        self.index += 1


def _in_range(at: _Inserter, c: Value, limit: Value) -> Value:
    zero = at.const(0)
    return at.value(And, at.value(Ge, c, zero), at.value(Lt, c, limit))


def _memory_checks(at: _Inserter, op: Op, ids: list) -> None:
    g = op.operands[0]
    gt: GlobalType = g.type
    coords = op.variadic()
    value_t = op.result.type if isinstance(op, Load) else op.operands[1].type
    shape = (value_t.rows, value_t.cols) if isinstance(value_t, TileType) else (value_t.length,)
    lead = len(coords) - len(shape)
    units = ("rows", "columns") if len(shape) == 2 else ("elements",)
    name = g.hint or "?"
    for axis, c in enumerate(coords):
        dim = gt.dims[axis]
        k = axis - lead
        extent = shape[k] if k >= 0 else 1
        fixed, known = dim if isinstance(dim, int) else None, _const(c)
        if fixed is not None and known is not None and 0 <= known < -(-fixed // extent):
            continue  # in range whatever the launch
        size = at.size(dim)
        if k < 0:
            at.check(_in_range(at, c, size), [c, size], f"{op.NAME}: {index_template(name, axis, dim)}", ids)
            continue
        count = at.value(CDiv, size, at.const(extent))
        at.check(_in_range(at, c, count), [c, count, size],
                 f"{op.NAME}: {tile_coordinate_template(name, axis, dim, extent, units[k])}", ids)


def _division_check(at: _Inserter, op: Op, ids: list, guard: bool) -> None:
    a, b = op.operands
    ok = at.value(Ne, b, at.const(0))
    at.check(ok, [a], f"{op.NAME}: {division_template(_DIVISIONS[type(op)])}", ids)
    if guard:
        op.operands[1] = at.value(Select, ok, b, at.const(1))


def _step_check(at: _Inserter, op: For, ids: list) -> None:
    lo, hi, step = op.operands[:3]
    ok = at.value(Or, at.value(Gt, step, at.const(0)), at.value(Ge, lo, hi))
    at.check(ok, [step, lo, hi], f"{op.NAME}: {loop_step_template()}", ids)
    op.operands[1] = at.value(Select, ok, hi, lo)
    op.operands[2] = at.value(Select, ok, step, at.const(1))


def _needs_check(op: Op) -> bool:
    if isinstance(op, (Load, Store)):
        return isinstance(op.operands[0].type, GlobalType)
    if type(op) in _DIVISIONS:
        b = _const(op.operands[1])
        return op.result.type == I32_T and not (isinstance(b, int) and b != 0)
    if isinstance(op, For):
        step = _const(op.operands[2])
        return not (isinstance(step, int) and step > 0)
    return False


def _instrument(block: Block, ids: list, checks_to: list | None) -> None:
    i = 0
    while i < len(block.ops):
        op = block.ops[i]
        for region in op.regions:
            _instrument(region, ids, None)
        if not _needs_check(op):
            i += 1
            continue
        at = _Inserter(block, i, op.span, checks_to)
        if isinstance(op, (Load, Store)):
            _memory_checks(at, op, ids)
        elif isinstance(op, For):
            _step_check(at, op, ids)
        else:
            _division_check(at, op, ids, guard=checks_to is None)
        i = at.index + 1


@register_pass
@dataclass(frozen=True)
class ChecksPass(Pass):
    name = "checks"
    summary = ("checked mode: a check op before every load/store coordinate, integer division and "
               "loop step that can fail at run time")

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        ids: list[Check] = []
        outside: list[Check] = []
        blocks = next((op for op in kernel.body.ops if isinstance(op, Blocks)), None)
        body = kernel.body.ops
        i = 0
        while i < len(body):
            op = body[i]
            if op is blocks:
                _instrument(op.regions[0], ids, None)
            elif _needs_check(op):
                at = _Inserter(kernel.body, i, op.span, outside if blocks is not None else None)
                if type(op) in _DIVISIONS:
                    _division_check(at, op, ids, guard=blocks is None)
                i = at.index
            i += 1
        if outside:
            region = blocks.regions[0]
            for n, check in enumerate(outside):
                check.parent = region
                region.ops.insert(n, check)
        ctx.decide(f"@{kernel.name}", f"{len(ids)} run-time check(s)",
                   "checked mode: each is a check op before the load, store, division or loop it "
                   "guards; a GPU records the first failure in an error buffer the launcher reads "
                   "(the kernel takes the general lowering or the register-tile backend, both of "
                   "which emit them)",
                   checks=len(ids))
        return kernel
