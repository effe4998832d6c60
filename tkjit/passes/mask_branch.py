"""mask-branch: a causal mask applied on every trip of a loop runs only on the tiles it changes.

    %s2 = causal_mask %s, %q0, %k0        (in a loop's body, on an rt<f32>[R, C])

sets element (r, c) to ``fill`` where ``k0 + c > q0 + r``; on a tile wholly at or below the
diagonal (``k0 + C - 1 <= q0``) it changes nothing. A kernel written without the test for the
tiles that cross the diagonal (``examples/attention_mask.tk``) would compare and select every
score of every trip; the pass puts the mask under a uniform branch,

    %cross = gt (add %k0, C - 1), %q0
    %s2 = if %cross { %m = causal_mask %s, %q0, %k0; yield %m } { yield %s }

which is what a kernel that writes the test (``examples/attention_nol.tk``) already has: the
values are the same bit for bit, and the passes after it (scale-fold folds a scaling through a
mask inside an ``if``) see the same program. A mask already inside an ``if`` of the loop body is
left alone (the kernel wrote its own test), as is one outside any loop (it runs once a tile).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Block, Kernel, Op
from ..ir.ops import Add, CausalMask, Const, For, Gt, If, Yield
from ..ir.types import BOOL, I32, ScalarType
from .decisions import subject_of
from .manager import Pass, PassContext, register_pass

I32_T, BOOL_T = ScalarType(I32), ScalarType(BOOL)


def _in_loop_body(op: Op) -> bool:
    """``op`` sits directly in a ``for`` body (not inside an ``if`` of it)."""
    block = op.parent
    return block is not None and isinstance(block.parent, For)


def branch_mask(mask: CausalMask) -> If:
    """Replace ``mask`` in its block with the test and the ``if`` (module docstring)."""
    block: Block = mask.parent
    at = block.ops.index(mask)
    x, q0, k0 = mask.operands
    cols = x.type.shape[-1]
    span = mask.span
    last = Const([], {"value": cols - 1}, [I32_T], [], span, [None])
    col = Add([k0, last.result], {}, [I32_T], [], span, [None])
    cross = Gt([col.result, q0], {}, [BOOL_T], [], span, ["crosses_diagonal"])
    then = Block()
    inner = CausalMask(list(mask.operands), dict(mask.attrs), [mask.result.type], [], span, [None])
    then.append(inner)
    then.append(Yield([inner.result], {}, [], [], span))
    orelse = Block()
    orelse.append(Yield([x], {}, [], [], span))
    branch = If([cross.result], {}, [mask.result.type], [then, orelse], span, [None])
    branch.results = mask.results  # every reader of the mask now reads the if
    mask.result.owner = branch
    block.ops[at:at + 1] = [last, col, cross, branch]
    for op in (last, col, cross, branch):
        op.parent = block
    return branch


@register_pass
@dataclass(frozen=True)
class MaskBranch(Pass):
    """The ``mask-branch`` pass (module docstring)."""

    name = "mask-branch"
    summary = "a causal mask on every trip of a loop runs under a test for the tiles that cross the diagonal"
    target_specific = True

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        masks = [op for op in kernel.walk() if isinstance(op, CausalMask) and _in_loop_body(op)]
        for mask in masks:
            cols = mask.operands[0].type.shape[-1]
            branch_mask(mask)
            ctx.decide(subject_of(mask), "under a test for the tiles that cross the diagonal",
                       f"in a loop body on every trip: it changes a {cols}-column tile only where "
                       f"k0 + {cols - 1} > q0, so a uniform branch skips its compare and select per "
                       "element on the tiles below the diagonal (the values are the same)")
        return kernel
