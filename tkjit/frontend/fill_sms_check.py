"""@fill_sms's constants may size tiles and nothing else (issue 20).

The launch swaps a ``@fill_sms`` constant for another of its candidates (tkjit/fill_sms.py) when
the default tiles leave SMs idle. That is sound only when the constant changes the tiling and not
the answer: with ``@fill_sms(BR, S)`` and ``Y = x * S`` the GPU would compute ``x*64`` where the
interpreter (which runs the defaults) computes ``x*128``. So the front end lowers the kernel again
with each constant at its next candidate value and compares the two kernels with every integer
erased (tile shapes, block counts, loop bounds, index arithmetic, integer attributes): any other
difference -- a float constant, an op that appears or goes -- is refused at the op where the two
part, and a constant whose change alters nothing at all sizes no tile and is refused too.
"""
from __future__ import annotations

import re
from typing import Optional

from ..errors import DiagnosticError
from ..ir.core import Block, Kernel, Op
from ..ir.types import ScalarType
from . import ast


def check_fill_sms(tree: ast.Kernel, kernel: Kernel, constants: Optional[dict]) -> None:
    """Raise a DiagnosticError if a ``@fill_sms`` constant does more than size tiles."""
    attr = kernel.attrs.get("fill_sms")
    if not attr:
        return
    from ..fill_sms import constants_of, halvings
    from .lower import lower
    pinned = set(constants or {})
    annotation = next(a for a in tree.annotations if a.name == "fill_sms")
    base_exact, base_shape = _fingerprints(kernel)
    for name, value in constants_of(attr).items():
        others = halvings(value)[1:]
        if name in pinned or not others:
            continue  # the launch never changes it
        other = others[0]
        try:
            variant = lower(tree, {**(constants or {}), name: other})
        except DiagnosticError:
            continue  # a variant that does not compile is never launched
        exact, shape = _fingerprints(variant)
        span = next((a.span for a in annotation.args if getattr(a, "name", None) == name),
                    annotation.span)
        if exact == base_exact:
            raise DiagnosticError(f"@fill_sms: {name} sizes no tile: the kernel is the same at "
                                  f"{name} = {other} as at {value}, so the launch has nothing "
                                  "to choose", span)
        where = _first_difference(base_shape, shape)
        if where is not None:
            op_span = where.span or span
            raise DiagnosticError(
                f"@fill_sms: {name} does more than size tiles: the launch may run the kernel at "
                f"{name} = {other} instead of {value}, and this computation changes with it, so "
                "the variants would compute different answers", op_span,
                [f"@fill_sms names {name} at {span.location()}; name only constants that size "
                 "tiles (tile shapes, block counts, loop bounds), or pin it with "
                 f"constants={{'{name}': {value}}}"])


_SHAPE = re.compile(r"\[[^\]]*\]")


def _fingerprints(kernel: Kernel) -> tuple[list, list]:
    """(every op as it is, every op with its integers erased and i32 constants left out), each
    op paired with the op it came from in the second list."""
    exact: list = []
    shape: list = []
    ids: dict[int, int] = {}

    def ref(v) -> object:
        owner = v.owner
        if isinstance(owner, Op) and _int_const(owner):
            return "int"
        return ids.get(id(v), "?")

    def block(b: Block) -> None:
        for a in b.args:
            ids[id(a)] = len(ids)
            exact.append(("arg", str(a.type)))
            shape.append((("arg", _SHAPE.sub("[]", str(a.type))), None))
        for op in b.ops:
            exact.append((op.NAME, repr(sorted(op.attrs.items())), [str(r.type) for r in op.results],
                          [ids.get(id(v), repr(getattr(v.owner, "attrs", None))) for v in op.operands]))
            if not _int_const(op):
                shape.append(((op.NAME, _erase(_without_ints(op.attrs)), [_SHAPE.sub("[]", str(r.type)) for r in op.results],
                               [ref(v) for v in op.operands]), op))
            for r in op.results if not _int_const(op) else ():
                ids[id(r)] = len(ids)  # (i32 constants are shared when equal: they get no number)
            for region in op.regions:
                block(region)

    for p in kernel.params:
        ids[id(p)] = len(ids)
    block(kernel.body)
    return exact, shape


def _int_const(op: Op) -> bool:
    return op.NAME == "const" and len(op.results) == 1 and isinstance(op.results[0].type, ScalarType) \
        and op.results[0].type.dtype.name == "i32"


def _without_ints(attrs: dict) -> dict:
    """Integer attributes go (an attribute at its default is not printed: ``split = 1``)."""
    return {k: v for k, v in attrs.items() if isinstance(v, bool) or not isinstance(v, int)}


def _erase(value) -> object:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return "int"
    if isinstance(value, dict):
        return tuple(sorted((k, _erase(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_erase(v) for v in value)
    if isinstance(value, str):
        return re.sub(r"\d+", "#", value)
    return repr(value)


def _first_difference(a: list, b: list) -> Optional[Op]:
    """The op (of ``a``) where the two erased kernels part, or None when they agree."""
    for (x, op), (y, _) in zip(a, b):
        if x != y:
            return op
    if len(a) != len(b):
        return next((op for _, op in a[len(b):] if op is not None), a[-1][1] if a else None)
    return None
