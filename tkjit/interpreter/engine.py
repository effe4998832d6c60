"""The interpreter loop: an environment of SSA values and a dispatch table from op class to handler.

``Interpreter.run_block`` executes a block's ops in order; each op's handler (see
``handlers/``) receives the interpreter, the op and its operand values and returns its result
values. A block ends at its ``yield`` (whose operands become the region's results). Control ops
(blocks, for, if) run their regions through ``run_block``, so new op families — roles,
barriers, asynchronous copies — plug in as new handlers with their state in the environment.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import InterpreterError, NotAvailableError
from ..ir.core import Block, Kernel, Op, Value
from ..ir.ops import Yield
from .launch import Launch, bind

Handler = Callable[["Interpreter", Op, list], list]


class Environment:
    """The state of one launch: every SSA value's runtime value and the bound dimension sizes."""

    def __init__(self, launch: Launch):
        self.values: dict[Value, Any] = dict(launch.params)
        self.dims: dict[str, int] = dict(launch.dims)

    def __getitem__(self, v: Value) -> Any:
        return self.values[v]

    def bind(self, targets: list[Value], values: list) -> None:
        for target, value in zip(targets, values):
            self.values[target] = value


class Interpreter:
    """Executes one kernel launch over an environment with a handler table."""

    def __init__(self, kernel: Kernel, env: Environment, handlers: dict[type[Op], Handler]):
        self.kernel = kernel
        self.env = env
        self.handlers = handlers

    def error(self, op: Op, message: str) -> InterpreterError:
        """A runtime error reported against the op's source line."""
        return InterpreterError(f"{op.NAME}: {message}", op.span)

    def run_kernel(self) -> None:
        self.run_block(self.kernel.body, [])

    def run_block(self, block: Block, args: list) -> list:
        """Run ``block`` with its arguments bound to ``args``; return what its ``yield`` yields."""
        env = self.env
        env.bind(block.args, args)
        for op in block.ops:
            operands = [env.values[v] for v in op.operands]
            if isinstance(op, Yield):
                return operands
            handler = self.handlers.get(type(op))
            if handler is None:
                raise NotAvailableError(
                    f"the interpreter cannot run '{op.NAME}' ({type(op).__name__}): no handler "
                    "for it (it runs tile IR before the Hopper-specific passes)", op.span)
            env.bind(op.results, handler(self, op, operands))
        return []


def run(kernel: Kernel, args: list, *, constants: dict[str, int] | None = None,
        handlers: dict[type[Op], Handler] | None = None) -> None:
    """Execute a verified kernel on the CPU: every block of its block loop, in place on ``args``.

    ``args`` are in kernel parameter order: torch CPU tensors or numpy arrays for globals
    (outputs are written into them), Python numbers for scalars. ``constants`` gives the values
    of dimension names that are kernel constants (checked, not bound)."""
    from .handlers import HANDLERS
    env = Environment(bind(kernel, args, constants))
    with np.errstate(all="ignore"):
        Interpreter(kernel, env, handlers or HANDLERS).run_kernel()
