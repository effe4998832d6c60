"""Written types → IR types: ``gl<bf16>[M, K]`` (parameters), ``st/rt<T, attrs>[R, C]``,
``cv/rv<T>[N]`` and scalars, with shapes folded to integers and impossible tiles refused."""
from __future__ import annotations

from typing import Optional, Union

from ..errors import DiagnosticError
from ..ir.types import (DTYPES, TILE_DTYPES, GlobalType, ScalarType, TileType, Type, VectorType,
                        type_problem)
from ..source import Span
from . import ast
from .scope import did_you_mean

SCALAR_DTYPES = ("f32", "i32", "bool")
KINDS = ("gl", "st", "rt", "cv", "rv")
SWIZZLES = ("128B", "64B", "32B", "none")
_TILE_DTYPE_NAMES = tuple(d.name for d in TILE_DTYPES)


def scalar_type(t: ast.ScalarTypeExpr) -> ScalarType:
    if t.dtype in SCALAR_DTYPES:
        return ScalarType(DTYPES[t.dtype])
    if t.dtype in DTYPES:
        raise DiagnosticError(f"scalars are f32, i32 or bool, not {t.dtype} (tiles and tensors "
                              f"may be {t.dtype})", t.span)
    if t.dtype in KINDS:
        raise DiagnosticError(f"'{t.dtype}' needs a dtype and a shape, as in {t.dtype}<f32>"
                              f"{'[64, 64]' if t.dtype in ('st', 'rt') else '[64]'}", t.span)
    hint = did_you_mean(t.dtype, SCALAR_DTYPES + KINDS)
    raise DiagnosticError(f"unknown type '{t.dtype}'{hint} (expected f32, i32, bool, or a tile "
                          "type such as rt<f32>[64, 64])", t.span)


def _element_dtype(t: ast.ShapedTypeExpr):
    if t.dtype in _TILE_DTYPE_NAMES:
        return DTYPES[t.dtype]
    if t.dtype in DTYPES:
        raise DiagnosticError(f"{t.kind}<{t.dtype}>: tiles and tensors hold bf16, f16, f32, e4m3 "
                              f"or e5m2, not {t.dtype}", t.dtype_span)
    hint = did_you_mean(t.dtype, _TILE_DTYPE_NAMES)
    raise DiagnosticError(f"unknown dtype '{t.dtype}'{hint} (expected bf16, f16, f32, e4m3 or "
                          "e5m2)", t.dtype_span)


def _check_kind(t: ast.ShapedTypeExpr, allowed: tuple[str, ...], where: str) -> None:
    if t.kind not in KINDS:
        hint = did_you_mean(t.kind, KINDS)
        raise DiagnosticError(f"unknown type '{t.kind}'{hint} (expected gl, st, rt, cv or rv)",
                              t.kind_span)
    if t.kind not in allowed:
        raise DiagnosticError(f"{where}, not {t.kind}<...>", t.kind_span)


def param_type(lw, t: ast.TypeExpr) -> tuple[Type, list[tuple[str, Span]]]:
    """A parameter's type, and the named dimensions it binds (name, where)."""
    if isinstance(t, ast.ScalarTypeExpr):
        return scalar_type(t), []
    _check_kind(t, ("gl",), "parameters are global tensors gl<T>[...] or scalars (f32, i32, bool)")
    dtype = _element_dtype(t)
    if t.attrs:
        raise DiagnosticError("global tensors take no attributes", t.attrs[0].span)
    if not t.dims:
        raise DiagnosticError("a global tensor needs at least one dimension", t.span)
    dims: list[Union[int, str]] = []
    named: list[tuple[str, Span]] = []
    for d in t.dims:
        if isinstance(d, ast.Name) and not _is_constant_name(lw, d.name):
            dims.append(d.name)
            named.append((d.name, d.span))
            continue
        n = lw.constant_int(d, "a global tensor dimension (a name, or a constant)")
        if n <= 0:
            raise DiagnosticError(f"a global tensor dimension must be positive, got {n}", d.span)
        dims.append(n)
    return GlobalType(dtype, tuple(dims)), named


def _is_constant_name(lw, name: str) -> bool:
    from .lower_expr import BUILTIN_CONSTANTS
    var = lw.scopes.lookup(name)
    return (var is not None and var.is_constant) or name in BUILTIN_CONSTANTS


def binding_type(lw, t: ast.TypeExpr, swizzle: Optional[str] = None,
                 swizzle_span: Optional[Span] = None) -> Type:
    """The declared type of ``x: T = ...``: a scalar, a tile or a vector (never a global)."""
    if isinstance(t, ast.ScalarTypeExpr):
        if swizzle is not None:
            raise DiagnosticError("@swizzle applies to shared tiles (st<...>), not scalars",
                                  swizzle_span)
        return scalar_type(t)
    _check_kind(t, ("st", "rt", "cv", "rv"),
                "global tensors are kernel parameters; a binding is a tile (st, rt), a vector "
                "(cv, rv) or a scalar")
    dtype = _element_dtype(t)
    attrs = _type_attrs(t)
    if swizzle is not None:
        if t.kind != "st":
            raise DiagnosticError(f"@swizzle applies to shared tiles (st<...>), not {t.kind}<...>",
                                  swizzle_span)
        if "swizzle" in attrs:
            raise DiagnosticError("the swizzle is given twice: by @swizzle and in the type",
                                  swizzle_span)
        attrs["swizzle"] = swizzle
    dims = [lw.constant_int(d, "a tile dimension") for d in t.dims]
    want = 2 if t.kind in ("st", "rt") else 1
    if len(dims) != want:
        noun = "a tile has 2 dimensions [rows, columns]" if want == 2 else \
            "a vector has 1 dimension [length]"
        raise DiagnosticError(f"{t.kind}<{t.dtype}>: {noun}, got {len(dims)}", t.span)
    if t.kind in ("st", "rt"):
        result: Type = TileType(t.kind, dtype, dims[0], dims[1], tuple(sorted(attrs.items())))
    else:
        if attrs:
            raise DiagnosticError("vectors take no attributes", t.attrs[0].span)
        result = VectorType(t.kind, dtype, dims[0])
    problem = type_problem(result)
    if problem:
        raise DiagnosticError(problem, t.span)
    return result


def _type_attrs(t: ast.ShapedTypeExpr) -> dict[str, str]:
    attrs: dict[str, str] = {}
    for a in t.attrs:
        if a.key != "swizzle":
            raise DiagnosticError(f"unknown type attribute '{a.key}' (a shared tile may pin "
                                  "swizzle=128B, 64B, 32B or none)", a.span)
        if t.kind != "st":
            raise DiagnosticError(f"swizzle applies to shared tiles (st<...>), not {t.kind}<...>",
                                  a.span)
        if a.value not in SWIZZLES:
            raise DiagnosticError(f"swizzle must be 128B, 64B, 32B or none, got {a.value}", a.span)
        if a.key in attrs:
            raise DiagnosticError(f"type attribute '{a.key}' given twice", a.span)
        attrs[a.key] = a.value
    return attrs
