"""The kernel language's syntax tree: frozen dataclasses, every node with its source span.

The parser (``parser.py``) builds these from lark's tree; the lowering (``lower.py``) reads them.
Nothing here checks meaning: names, types, shapes and constants are the lowering's business.

Every class is declared ``@dataclass(eq=False, repr=False)`` and takes its repr and its
frozenness from ``Node`` (and ``Node`` from ``tkjit/frozen.py``): ``frozen=True`` and a repr per
class would make each class generate three more methods at import, which took 70% of this
module's import time (a cold compile's).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Optional, Union

from ..frozen import Frozen
from ..source import Span


@dataclass(eq=False, repr=False)
class Node(Frozen):
    """As a frozen dataclass: each field is set once, by ``__init__`` (``dataclasses.replace``
    makes a changed copy; ``Frozen`` refuses the rest), and the repr is the dataclass repr."""

    span: Span

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
        return f"{type(self).__qualname__}({shown})"


# -- expressions -------------------------------------------------------------------------------

@dataclass(eq=False, repr=False)
class Num(Node):
    """An integer or float literal."""

    value: Union[int, float]


@dataclass(eq=False, repr=False)
class Bool(Node):
    """``true`` or ``false``."""

    value: bool


@dataclass(eq=False, repr=False)
class Name(Node):
    """A name used as a value."""

    name: str


@dataclass(eq=False, repr=False)
class Unary(Node):
    """``-x`` or ``!x``."""

    op: str
    operand: "Expr"


@dataclass(eq=False, repr=False)
class Binary(Node):
    """``a OP b`` with OP one of ``|| && == != < <= > >= + - * / // %``."""

    op: str
    lhs: "Expr"
    rhs: "Expr"


@dataclass(eq=False, repr=False)
class Call(Node):
    """``f(args)`` or ``f<T>(args)`` (``type_arg`` is T, as written)."""

    func: str
    func_span: Span
    args: tuple["Expr", ...]
    type_arg: Optional[str] = None
    type_span: Optional[Span] = None


@dataclass(eq=False, repr=False)
class Method(Node):
    """``obj.method(args)``: ``G.tile(i, j)`` is the only method there is."""

    obj: "Expr"
    method: str
    method_span: Span
    args: tuple["Expr", ...]


Expr = Union[Num, Bool, Name, Unary, Binary, Call, Method]


# -- types ----------------------------------------------------------------------------------------

@dataclass(eq=False, repr=False)
class ScalarTypeExpr(Node):
    """``f32``, ``i32``, ``bool``."""

    dtype: str


@dataclass(eq=False, repr=False)
class TypeAttr(Node):
    """``swizzle=128B`` inside a type's angle brackets."""

    key: str
    value: str


@dataclass(eq=False, repr=False)
class ShapedTypeExpr(Node):
    """``gl<bf16>[M, K]``, ``st<bf16, swizzle=64B>[128, 64]``, ``cv<f32>[BQ]``."""

    kind: str
    kind_span: Span
    dtype: str
    dtype_span: Span
    attrs: tuple[TypeAttr, ...]
    dims: tuple[Expr, ...]


TypeExpr = Union[ScalarTypeExpr, ShapedTypeExpr]


# -- statements -----------------------------------------------------------------------------------

@dataclass(eq=False, repr=False)
class Annotation(Node):
    """``@stages(4)``: pins a decision of the compiler for the kernel or the next statement."""

    name: str
    args: tuple[Expr, ...]


@dataclass(eq=False, repr=False)
class Stmt(Node):
    """Base of the statements: each carries the annotations written above it."""

    annotations: tuple[Annotation, ...] = field(default=(), kw_only=True)


@dataclass(eq=False, repr=False)
class ConstItem(Node):
    name: str
    value: Expr


@dataclass(eq=False, repr=False)
class ConstDecl(Stmt):
    """``const BM = 128, BN = 256``."""

    items: tuple[ConstItem, ...]


@dataclass(eq=False, repr=False)
class Let(Stmt):
    """``x: rt<f32>[64, 64] = e``: a new name with a declared type."""

    name: str
    name_span: Span
    type: TypeExpr
    value: Expr


@dataclass(eq=False, repr=False)
class Assign(Stmt):
    """``x = e``: bind a new name or rebind an existing one (keeping its type)."""

    name: str
    name_span: Span
    value: Expr


@dataclass(eq=False, repr=False)
class Store(Stmt):
    """``G.tile(i, j) = e``."""

    target: str
    target_span: Span
    method: str
    method_span: Span
    coords: tuple[Expr, ...]
    value: Expr


@dataclass(eq=False, repr=False)
class ForRange(Stmt):
    """``for k in lo .. hi [step s] { body }``."""

    var: str
    var_span: Span
    lo: Expr
    hi: Expr
    step: Optional[Expr]
    body: tuple[Stmt, ...]


@dataclass(eq=False, repr=False)
class SchedArg(Node):
    """``persistent`` or ``group = 8`` inside ``schedule(...)``."""

    name: str
    value: Optional[Expr]


@dataclass(eq=False, repr=False)
class BlockLoop(Stmt):
    """``for (m, n) in blocks(NM, NN) [schedule(...)] { body }``."""

    vars: tuple[Name, ...]
    counts: tuple[Expr, ...]
    schedule: tuple[SchedArg, ...]
    body: tuple[Stmt, ...]


@dataclass(eq=False, repr=False)
class If(Stmt):
    """``if c { ... } [else { ... }]``; ``else if`` is an ``If`` alone in ``orelse``."""

    cond: Expr
    then: tuple[Stmt, ...]
    orelse: Optional[tuple[Stmt, ...]]


# -- the kernel -----------------------------------------------------------------------------------

@dataclass(eq=False, repr=False)
class ConstParam(Node):
    """``D = 128`` in ``kernel attn<D = 128, ...>``: a compile-time parameter with its default."""

    name: str
    value: Expr


@dataclass(eq=False, repr=False)
class Param(Node):
    """``A: gl<bf16>[M, K]`` or ``scale: f32``."""

    name: str
    type: TypeExpr


@dataclass(eq=False, repr=False)
class Kernel(Node):
    """``kernel name<consts>(params) { body }``: the whole kernel."""

    name: str
    name_span: Span
    annotations: tuple[Annotation, ...]
    consts: tuple[ConstParam, ...]
    params: tuple[Param, ...]
    body: tuple[Stmt, ...]


def assigned_names(stmts: tuple[Stmt, ...]) -> list[str]:
    """Names plainly assigned (``x = e``) anywhere in ``stmts``, in order of first appearance.

    The lowering intersects this with the names visible before a loop or an ``if`` to find the
    values the construct carries out."""
    seen: list[str] = []
    for s in stmts:
        if isinstance(s, Assign):
            found = [s.name]
        elif isinstance(s, ForRange):
            found = assigned_names(s.body)
        elif isinstance(s, BlockLoop):
            found = assigned_names(s.body)
        elif isinstance(s, If):
            found = assigned_names(s.then) + assigned_names(s.orelse or ())
        else:
            found = []
        for name in found:
            if name not in seen:
                seen.append(name)
    return seen
