"""The front end: kernel text → AST → verified tile IR.

    parse(text, filename)                     -> ast.Kernel       (syntax errors: DiagnosticError)
    lower_source(text, filename, constants)   -> tkjit.ir.core.Kernel, verified

Every error is a ``DiagnosticError`` that renders ``file:line:col``, the line and a caret.
"""
from __future__ import annotations

from typing import Optional

from ..ir.core import Kernel
from ..ir.verify import verify_kernel
from . import ast
from .lower import Lowerer, lower
from .parser import parse, too_deep


def lower_source(text: str, filename: str = "<string>", constants: Optional[dict] = None) -> Kernel:
    """Parse ``text``, lower it to tile IR with ``constants`` overriding the kernel's ``<...>``
    constants, and verify the result."""
    tree = parse(text, filename)
    lowerer = Lowerer(tree, constants)
    try:
        kernel = lowerer.kernel()
        verify_kernel(kernel)
        from ..passes.stream_cols import oversized_tile_problem
        problem = oversized_tile_problem(kernel)  # a too-large register tile that cannot be streamed
        if problem is not None:
            raise problem
        if "fill_sms" in kernel.attrs:
            from .fill_sms_check import check_fill_sms
            check_fill_sms(tree, kernel, constants)
    except RecursionError:
        raise too_deep(tree.span.source, lowerer.statement_start) from None
    return kernel


__all__ = ["ast", "lower", "lower_source", "parse"]
