"""The tile IR's skeleton: SSA values, ops with regions, blocks, and the kernel.

An op subclass is declarative (see ``tkjit/ir/ops``): it names itself, its operands, its
attributes, how many results and regions it has, and implements ``infer()`` (the result types
its operands imply, raising ``VerifyError`` with an "expected X, got Y" message otherwise).
``verify()`` re-runs ``infer()`` and compares with the recorded result types, so the front
end (which builds ops) and the IR parser (which reads them) share one set of rules.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator, Sequence

from ..errors import VerifyError
from ..source import Span
from .types import AttrValue, GlobalType, Type, type_problem


class Value:
    """An SSA value: an op result or a block argument. ``hint`` is a name for printing."""

    __slots__ = ("type", "hint", "owner", "index")

    def __init__(self, type: Type, hint: str | None = None, owner: Any = None, index: int = 0):
        self.type = type
        self.hint = hint
        self.owner = owner  # the defining Op, or the Block for a block argument
        self.index = index

    def __repr__(self) -> str:
        return f"Value({self.hint or '?'}: {self.type})"


class Block:
    """A straight-line list of ops with block arguments (loop induction variables, carried values)."""

    def __init__(self, args: Sequence[Value] = (), ops: Sequence["Op"] | None = None):
        self.args: list[Value] = list(args)
        for i, a in enumerate(self.args):
            a.owner, a.index = self, i
        self.ops: list[Op] = []
        self.parent: Op | None = None
        for op in ops or ():
            self.append(op)

    def append(self, op: "Op") -> "Op":
        op.parent = self
        self.ops.append(op)
        return op

    def add_arg(self, type: Type, hint: str | None = None) -> Value:
        v = Value(type, hint, self, len(self.args))
        self.args.append(v)
        return v

    @property
    def terminator(self) -> "Op | None":
        return self.ops[-1] if self.ops else None


class Op:
    """Base class of every tile-IR op."""

    NAME: ClassVar[str] = "?"
    OPERANDS: ClassVar[tuple[str, ...]] = ()
    """Operand names. A trailing ``?`` marks the last one optional; ``*`` makes the last variadic."""
    ATTRS: ClassVar[dict[str, type | tuple[type, ...]]] = {}
    """Attribute names and their Python types. Names listed in OPTIONAL_ATTRS may be absent."""
    OPTIONAL_ATTRS: ClassVar[frozenset[str]] = frozenset()
    NUM_RESULTS: ClassVar[int | None] = 1
    """Fixed result count, or None for as many as the op decides (loops, ifs)."""
    NUM_REGIONS: ClassVar[int] = 0
    IS_TERMINATOR: ClassVar[bool] = False
    origin: "Op | None" = None
    """On a copy the ``async-schedule`` pass made: the tile program's op it copied (the emitter
    lowers that one, in the order the copies stand). Not printed; None elsewhere."""

    def __init__(self, operands: Sequence[Value] = (), attrs: dict[str, Any] | None = None,
                 result_types: Sequence[Type] | None = None, regions: Sequence[Block] = (),
                 span: Span | None = None, result_hints: Sequence[str | None] | None = None):
        self.operands: list[Value] = list(operands)
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.regions: list[Block] = list(regions)
        for r in self.regions:
            r.parent = self
        self.span = span
        self.parent: Block | None = None
        self._check_form()
        hints = list(result_hints or [])
        self.results: list[Value] = []
        given = result_types is not None
        types = list(result_types) if given else self.infer()
        self.results = [
            Value(t, hints[i] if i < len(hints) else None, self, i) for i, t in enumerate(types)]
        if given:
            self.verify()  # the given types must be the ones the operands imply
        else:
            self._check_result_types()

    # -- declarative checks -------------------------------------------------------------
    def error(self, message: str) -> VerifyError:
        return VerifyError(f"{self.NAME}: {message}", self.span)

    def _check_form(self) -> None:
        names = self.OPERANDS
        n = len(self.operands)
        if names and names[-1].endswith("*"):
            lo, hi = len(names) - 1, None
        elif names and names[-1].endswith("?"):
            lo, hi = len(names) - 1, len(names)
        else:
            lo, hi = len(names), len(names)
        if n < lo or (hi is not None and n > hi):
            want = f"{lo}" if hi == lo else (f"{lo} or {hi}" if hi is not None else f"at least {lo}")
            raise self.error(f"expected {want} operands, got {n}")
        for key, typ in self.ATTRS.items():
            if key not in self.attrs:
                if key in self.OPTIONAL_ATTRS:
                    continue
                raise self.error(f"missing attribute '{key}'")
            val = self.attrs[key]
            if not isinstance(val, typ) or (isinstance(val, bool) and typ in (int, float)):
                raise self.error(f"attribute '{key}' expected {_type_name(typ)}, got {val!r}")
        for key in self.attrs:
            if key not in self.ATTRS:
                raise self.error(f"unknown attribute '{key}'")
        if len(self.regions) != self.NUM_REGIONS:
            raise self.error(f"expected {self.NUM_REGIONS} regions, got {len(self.regions)}")

    def _check_result_types(self) -> None:
        for r in self.results:
            problem = type_problem(r.type)
            if problem:
                raise self.error(problem)

    def operand(self, name: str) -> Value | None:
        """An operand by its declared name (None when an optional one is absent)."""
        names = [n.rstrip("?*") for n in self.OPERANDS]
        i = names.index(name)
        if self.OPERANDS[i].endswith("*"):
            raise KeyError(f"{name} is variadic; use variadic()")
        return self.operands[i] if i < len(self.operands) else None

    def variadic(self) -> list[Value]:
        return self.operands[len(self.OPERANDS) - 1:]

    def infer(self) -> list[Type]:
        """The result types the operands and attributes imply; raise ``self.error`` if invalid."""
        raise NotImplementedError(f"{type(self).__name__}.infer")

    def verify(self) -> None:
        """Check this op alone (regions are checked by the kernel verifier)."""
        self._check_form()
        if self.NUM_RESULTS is not None and len(self.results) != self.NUM_RESULTS:
            raise self.error(f"expected {self.NUM_RESULTS} results, got {len(self.results)}")
        self._check_result_types()
        expected = self.infer()
        got = [r.type for r in self.results]
        if len(expected) != len(got) or not all(map(_same_type, expected, got)):
            raise self.error(f"result type expected {_types(expected)}, got {_types(got)}")

    # -- conveniences ---------------------------------------------------------------------
    @property
    def result(self) -> Value:
        if len(self.results) != 1:
            raise ValueError(f"{self.NAME} has {len(self.results)} results")
        return self.results[0]

    def walk(self) -> Iterator["Op"]:
        yield self
        for region in self.regions:
            for op in region.ops:
                yield from op.walk()

    def __repr__(self) -> str:
        return f"<{self.NAME} op>"


def _same_type(expected: Type, got: Type) -> bool:
    """Layout attributes (``swizzle=128B``, ``layout=wgmma``) are chosen by passes, not by type
    inference: an inferred type without attributes accepts a recorded one that has them."""
    if expected == got:
        return True
    if getattr(got, "attrs", ()) and not getattr(expected, "attrs", ()):
        return dataclasses.replace(got, attrs=()) == expected
    return False


def _type_name(t: type | tuple[type, ...]) -> str:
    if isinstance(t, tuple):
        return " or ".join(x.__name__ for x in t)
    return t.__name__


def _types(ts: Sequence[Type]) -> str:
    return "(" + ", ".join(str(t) for t in ts) + ")" if len(ts) != 1 else str(ts[0])


@dataclass
class Kernel:
    """A kernel: a name, typed parameters, kernel-level attributes and a body block."""

    name: str
    params: list[Value]
    body: Block
    attrs: dict[str, AttrValue | tuple[int, ...]] = field(default_factory=dict)
    span: Span | None = None
    tile_program: "Kernel | None" = field(default=None, repr=False, compare=False)
    """Set by the ``async-schedule`` pass on the kernel it makes: the kernel it rewrote into roles
    (the tile program the emitter reads). Not printed; None for every other kernel."""

    def walk(self) -> Iterator[Op]:
        for op in self.body.ops:
            yield from op.walk()

    def named_dims(self) -> list[str]:
        """Runtime dimension names in order of first appearance in the parameters."""
        seen: list[str] = []
        for p in self.params:
            if isinstance(p.type, GlobalType):
                for d in p.type.dims:
                    if isinstance(d, str) and d not in seen:
                        seen.append(d)
        return seen
