"""Names in a kernel: what each one is (variable, parameter, dimension, index, constant), where
it was first bound, and the nested scopes of loop and branch bodies."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from ..ir.core import Value
from ..ir.types import Type
from ..source import Span

Const = Union[bool, int, float]

KIND_WORDS = {
    "var": "a variable",
    "param": "a kernel parameter",
    "dim": "a dimension bound at launch",
    "index": "a loop index",
    "block": "a block index",
    "const": "a constant",
}


@dataclass
class Var:
    """One name. ``value`` is the current SSA value (a Python number for constants; None for a
    named dimension until its ``dim`` op is made)."""

    name: str
    kind: str
    span: Span
    type: Optional[Type]
    value: Union[Value, Const, None]

    def describe(self) -> str:
        return KIND_WORDS[self.kind]

    @property
    def is_constant(self) -> bool:
        return self.kind == "const"


class Scopes:
    """A stack of scopes; the innermost is last. Remembers names that went out of scope, so an
    unknown name can say where it was local."""

    def __init__(self) -> None:
        self.stack: list[dict[str, Var]] = [{}]
        self.expired: dict[str, tuple[Var, str]] = {}

    def push(self) -> None:
        self.stack.append({})

    def pop(self, where: str) -> None:
        """Leave the innermost scope (``where``: 'the for loop', 'the if branch', ...)."""
        for name, var in self.stack.pop().items():
            self.expired.setdefault(name, (var, where))

    def lookup(self, name: str) -> Optional[Var]:
        for scope in reversed(self.stack):
            var = scope.get(name)
            if var is not None:
                return var
        return None

    def define(self, var: Var) -> Var:
        self.stack[-1][var.name] = var
        return var

    def visible(self) -> dict[str, Var]:
        out: dict[str, Var] = {}
        for scope in self.stack:
            out.update(scope)
        return out

    def suggestion(self, name: str, extra: tuple[str, ...] = ()) -> Optional[str]:
        import difflib  # only for a diagnostic: not worth its import on every compile
        names = list(self.visible()) + list(extra)
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
        return close[0] if close else None


def did_you_mean(name: str, candidates) -> str:
    import difflib  # only for a diagnostic: not worth its import on every compile
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""
