"""The kernel verifier: every op's own rules, region structure, SSA scoping, and placement."""
from __future__ import annotations

from ..errors import VerifyError
from .core import Block, Kernel, Op
from .ops import Blocks, Dim, Yield
from .types import ScalarType, is_scalar


def verify_kernel(k: Kernel, show_ir: bool = False) -> None:
    """Raise ``VerifyError`` on the first broken rule. ``show_ir`` attaches the IR with the op marked."""
    try:
        _Verifier().kernel(k)
    except VerifyError as e:
        op = getattr(e, "op", None)
        if show_ir and op is not None:
            from .printer import print_with_mark
            e.notes.append("in this IR:\n" + print_with_mark(k, op, e.message))
        raise


class _Verifier:
    def __init__(self) -> None:
        self.visible: list[set[int]] = []

    def fail(self, op: Op, message: str) -> VerifyError:
        err = op.error(message)
        err.op = op  # type: ignore[attr-defined]
        return err

    def kernel(self, k: Kernel) -> None:
        from .ops.async_ops import AsyncOp, ConsumerRoles  # (ops/__init__ imports it last)
        self.visible = [{id(p) for p in k.params}]
        n_blocks = 0
        for op in k.body.ops:
            if isinstance(op, ConsumerRoles):  # the async schedule: the block loop is the consumers'
                op = next((o for o in op.regions[0].ops if isinstance(o, Blocks)), op)
            if isinstance(op, Blocks):
                n_blocks += 1
                if n_blocks > 1:
                    raise self.fail(op, "a kernel has one block loop")
            elif isinstance(op, AsyncOp):
                continue
            elif op.regions or not all(is_scalar(r.type) for r in op.results) or op.IS_TERMINATOR:
                raise self.fail(op, "outside the block loop only scalar ops are allowed")
        self.kernel_attrs(k)
        self.block(k.body, None)
        named = k.named_dims()
        for op in k.walk():
            if isinstance(op, Dim) and op.attrs.get("name") not in named:
                raise self.fail(op, f"names no dimension of a parameter: '{op.attrs.get('name')}' "
                                    f"is bound at launch only from a tensor's shape (the parameters' "
                                    f"dimensions: {', '.join(named) or 'none'})")

    @staticmethod
    def kernel_attrs(k: Kernel) -> None:
        """The consumer count the front end checks in @consumers, for kernels that come as
        textual IR (``consumers = 0`` reached the GEMM template's planner: ZeroDivisionError).
        ``regs`` is the reg-budget pass's to check (tests/ir/reg-budget)."""
        n = k.attrs.get("consumers")
        if n is not None and not (isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 4):
            raise VerifyError(f"kernel attribute consumers must be an integer from 1 to 4, got {n!r}", k.span)

    def block(self, block: Block, parent: Op | None) -> None:
        from .ops.async_ops import ConsumerRoles
        self.visible.append({id(a) for a in block.args})
        for i, op in enumerate(block.ops):
            for v in op.operands:
                if not any(id(v) in scope for scope in self.visible):
                    raise self.fail(op, f"uses {v.hint and '%' + v.hint or 'a value'} "
                                        "where it is not defined")
            try:
                op.verify()
            except VerifyError as e:
                e.op = op  # type: ignore[attr-defined]
                raise
            if op.IS_TERMINATOR and i != len(block.ops) - 1:
                raise self.fail(op, "must be the last op of its region")
            if isinstance(op, Yield) and (parent is None or isinstance(parent, Blocks)):
                raise self.fail(op, "yield outside a loop or if")
            if isinstance(op, Blocks) and parent is not None and not isinstance(parent, ConsumerRoles):
                raise self.fail(op, "the block loop must be at the kernel's top level")
            for region in op.regions:
                self.block(region, op)
            if hasattr(op, "verify_regions"):
                try:
                    op.verify_regions()
                except VerifyError as e:
                    e.op = op  # type: ignore[attr-defined]
                    raise
            self.visible[-1].update(id(r) for r in op.results)
        self.visible.pop()


_ = ScalarType
