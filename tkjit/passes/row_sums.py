"""row-sums: a row sum carried by a loop (``l = l * a + row_sum(p)``, or ``l + row_sum(p)``) is
kept by each thread as the sum of its own elements of the row, and combined with the other
threads of the row once, after the loop, instead of on every trip.

In the wgmma accumulator layout (and the mma.sync fragment) a row of a register tile is spread
over the four lanes of a quad; ``row_sum`` adds a thread's elements, then the quad's (two
``shfl.sync.bfly`` and two adds a row). The recurrence is linear in ``l``: with ``l`` starting
at zero, and ``a`` the same in the four lanes (any column vector is: it holds one value a row),
the lanes' shares of ``l`` add up to ``l`` after every trip, so the quad is combined once, when
the loop ends. Per trip and thread that is 4 SHFL and 4 FADD less on a 128-row tile (2 rows a
thread), off the path to the next product but on the issue slots the loop is bound by.

The pass marks such a ``row_sum`` ``partial = true`` and the loop ``partial_sums = [i, ...]``
(the carried values, by position); values are unchanged (the interpreter ignores both), the
Hopper lowering keeps the shares and combines them after the loop. It applies when the carried
value starts as ``zeros``, the row_sum's tile has the wgmma layout, and nothing but the
recurrence reads the carried value, the row_sum or the new sum inside the loop. In the default
pipeline since session 12, after ``layout`` and before ``branch-tail``: measured in the same run
against the pipeline without it (H200, 2026-11-27, general / template, N = 1k..16k,
benchmarks/results/2026-11-27-nvidia-h200-s12-attnloop-1.json): attention D = 128
0.905/0.964/1.000/1.023/1.033 with it vs 0.902/0.951/0.989/1.024/1.032 without, D = 64
0.861/0.934/0.986/1.013/1.029 vs 0.859/0.933/0.979/1.014/1.027.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Kernel, Op, Value
from ..ir.ops import REDUCE_OPS, Add, For, Mul, Zeros
from ..ir.types import F32, ScalarType, VectorType
from .decisions import subject_of
from .manager import Pass, PassContext, register_pass
from .rewrite import users_of

ROW_SUM = next(cls for cls in REDUCE_OPS if cls.NAME == "row_sum")


def _owner(v: Value, cls) -> Op | None:
    return v.owner if isinstance(v.owner, cls) else None


def _row_uniform(v: Value) -> bool:
    """The same in every lane of a row: a column vector (one value a row) or an f32 scalar."""
    t = v.type
    return (isinstance(t, VectorType) and t.kind == "cv") or t == ScalarType(F32)


def partial_sum(loop: For, i: int, users: dict[Value, list[Op]]) -> Op | None:
    """The row_sum whose quad combine can wait for the end of ``loop`` in carried value ``i``."""
    body = loop.regions[0]
    init, arg, new = loop.variadic()[i], body.args[1 + i], body.terminator.operands[i]
    t = arg.type
    if not (isinstance(t, VectorType) and t.kind == "cv" and t.dtype == F32) or _owner(init, Zeros) is None:
        return None
    add = _owner(new, Add)
    if add is None or add.parent is not body or users.get(new, []) != [body.terminator]:
        return None
    for rs_val, rest in ((add.operands[0], add.operands[1]), (add.operands[1], add.operands[0])):
        rs = _owner(rs_val, ROW_SUM)
        if rs is None or users.get(rs_val, []) != [add] or rs_val is rest:
            continue
        if dict(rs.operands[0].type.attrs).get("layout") != "wgmma":
            continue
        if rest is arg and users.get(arg, []) == [add]:
            return rs
        mul = _owner(rest, Mul)
        if mul is not None and users.get(rest, []) == [add] and users.get(arg, []) == [mul] \
                and any(v is arg for v in mul.operands) and all(_row_uniform(v) for v in mul.operands if v is not arg):
            return rs
    return None


@register_pass
@dataclass(frozen=True)
class RowSums(Pass):
    """The ``row-sums`` pass (module docstring)."""

    name = "row-sums"
    summary = "keep a loop-carried row sum per thread and combine the quad once after the loop"
    target_specific = True

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        users = users_of(kernel)
        for loop in [op for op in kernel.walk() if isinstance(op, For)]:
            marked = []
            for i in range(len(loop.variadic())):
                rs = partial_sum(loop, i, users)
                if rs is None:
                    continue
                rs.attrs["partial"] = True
                marked.append(i)
                arg = loop.regions[0].args[1 + i]
                where = f"row_sum at {rs.span.location()}" if rs.span else "row_sum"
                ctx.decide(subject_of(loop), f"row sums of %{arg.hint or i} kept per thread",
                           f"{where} adds only the thread's own elements of each row; the carried "
                           "sum is linear in them (starts at zero, scaled by a value the same in "
                           "every lane of the row), so the lanes of a row are combined once, after "
                           "the loop (2 shuffles and 2 adds a row), not every trip", value=i)
            if marked:
                loop.attrs["partial_sums"] = tuple(marked)
        return kernel
