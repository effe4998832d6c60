"""Annotations: where each may be written, its arguments, and the IR attribute it becomes.

    @consumers(N)   kernel        kernel attr consumers = N         (1 to 4 warpgroups)
    @regs(P, C)     kernel        kernel attr regs = [P, C]         (setmaxnreg: 24..256, step 8)
    @stages(S)      for loop      for attr stages = S               (1 to 8)
    @unroll(U)      for loop      for attr unroll = U               (1 or more)
    @swizzle(B)     st binding    type attr swizzle = "<B>B"/"none" (B in 0, 32, 64, 128)
    @fill_sms(C, ...) kernel      kernel attr fill_sms = "C=v ..."  (<...> constants that size the
                                                                     block loop's tiles; chosen per
                                                                     launch shape, tkjit/fill_sms.py)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import DiagnosticError
from ..frozen import Frozen
from . import ast
from .scope import did_you_mean


@dataclass(unsafe_hash=True)
class Rule(Frozen):
    """Where an annotation may be written and the parameters it takes."""

    place: str
    """'kernel', 'for' or 'st' (a shared tile declaration)."""
    params: tuple[str, ...]


RULES: dict[str, Rule] = {
    "consumers": Rule("kernel", ("N",)),
    "regs": Rule("kernel", ("P", "C")),
    "stages": Rule("for", ("S",)),
    "unroll": Rule("for", ("U",)),
    "swizzle": Rule("st", ("B",)),
    "fill_sms": Rule("kernel", ("C", "...")),
    "require_hopper": Rule("kernel", ()),
}
_PLACES = {
    "kernel": "the kernel (write it before `kernel`)",
    "for": "a sequential `for` loop",
    "st": "a shared tile declaration (x: st<...>[...] = ...)",
}
_HERE = {
    "kernel": "the kernel", "block": "the block loop", "for": "a `for` loop",
    "let": "this declaration", "stmt": "this statement",
}


def _checked(lw, ann: ast.Annotation, here: str) -> list[int]:
    rule = _rule(ann, here)
    if len(ann.args) != len(rule.params):
        want = f"@{ann.name}({', '.join(rule.params)})"
        raise DiagnosticError(f"@{ann.name} takes {len(rule.params)} argument"
                              f"{'s' if len(rule.params) != 1 else ''}: {want}", ann.span)
    return [lw.constant_int(a, f"the argument of @{ann.name}") for a in ann.args]


def _rule(ann: ast.Annotation, here: str) -> Rule:
    """The annotation's rule, once it is known and written in its place."""
    rule = RULES.get(ann.name)
    if rule is None:
        hint = did_you_mean(ann.name, RULES)
        known = ", ".join("@" + n for n in RULES)
        raise DiagnosticError(f"unknown annotation '@{ann.name}'{hint} (known: {known})", ann.span)
    if rule.place != here and not (rule.place == "st" and here == "let"):
        raise DiagnosticError(f"@{ann.name} applies to {_PLACES[rule.place]}, not to "
                              f"{_HERE[here]}", ann.span)
    return rule


def _constant_names(lw, ann: ast.Annotation) -> str:
    """@fill_sms(BM, BN): integer ``<...>`` constants and their values, ``"BM=128 BN=256"``."""
    if not ann.args:
        raise DiagnosticError(f"@{ann.name} takes the names of the kernel's <...> constants that "
                              "size the block loop's tiles: @fill_sms(BM, BN)", ann.span)
    declared = {c.name for c in lw.ast.consts}
    names: list[str] = []
    values: list[int] = []
    for arg in ann.args:
        if not isinstance(arg, ast.Name) or arg.name not in declared:
            known = ", ".join(sorted(declared)) or "none"
            raise DiagnosticError(f"@{ann.name}: each argument names one of the kernel's <...> "
                                  f"constants (its constants: {known})", arg.span)
        if arg.name in names:
            raise DiagnosticError(f"@{ann.name}: {arg.name} is named twice", arg.span)
        value = lw.constant_int(arg, f"the constant {arg.name} of @{ann.name}")
        if value <= 0:
            raise DiagnosticError(f"@{ann.name}: {arg.name} sizes tiles, so it must be positive, "
                                  f"got {value}", arg.span)
        names.append(arg.name)
        values.append(value)
    return " ".join(f"{name}={value}" for name, value in zip(names, values))


def _unique(annotations: tuple[ast.Annotation, ...]) -> None:
    seen: dict[str, ast.Annotation] = {}
    for ann in annotations:
        if ann.name in seen:
            raise DiagnosticError(f"@{ann.name} is given twice", ann.span,
                                  [f"first given at {seen[ann.name].span.location()}"])
        seen[ann.name] = ann


def _range(ann: ast.Annotation, value: int, lo: int, hi: Optional[int], what: str) -> None:
    if value < lo or (hi is not None and value > hi):
        bound = f"{lo} to {hi}" if hi is not None else f"at least {lo}"
        raise DiagnosticError(f"@{ann.name}: {what} must be {bound}, got {value}", ann.span)


def kernel_attrs(lw, annotations: tuple[ast.Annotation, ...]) -> dict:
    _unique(annotations)
    attrs: dict = {}
    for ann in annotations:
        if ann.name == "fill_sms" and _rule(ann, "kernel"):
            attrs["fill_sms"] = _constant_names(lw, ann)
            continue
        args = _checked(lw, ann, "kernel")
        if ann.name == "require_hopper":
            attrs["require_hopper"] = True
        elif ann.name == "consumers":
            _range(ann, args[0], 1, 4, "the number of consumer warpgroups")
            attrs["consumers"] = args[0]
        else:
            for who, n in zip(("producer", "consumer"), args):
                _range(ann, n, 24, 256, f"the {who} register count")
                if n % 8:
                    raise DiagnosticError(f"@regs: register counts are multiples of 8 "
                                          f"(setmaxnreg), got {n}", ann.span)
            attrs["regs"] = tuple(args)
    return attrs


def loop_attrs(lw, annotations: tuple[ast.Annotation, ...]) -> dict:
    _unique(annotations)
    attrs: dict = {}
    for ann in annotations:
        (n,) = _checked(lw, ann, "for")
        if ann.name == "stages":
            _range(ann, n, 1, 8, "the number of pipeline stages")
        else:
            _range(ann, n, 1, None, "the unroll factor")
        attrs[ann.name] = n
    return attrs


def swizzle(lw, annotations: tuple[ast.Annotation, ...]
            ) -> tuple[Optional[str], Optional[ast.Annotation]]:
    """The swizzle pinned on a declaration: '128B', '64B', '32B', 'none' or None."""
    _unique(annotations)
    for ann in annotations:
        (b,) = _checked(lw, ann, "let")
        if b not in (0, 32, 64, 128):
            raise DiagnosticError(f"@swizzle takes 128, 64, 32 or 0 (bytes), got {b}", ann.span)
        return ("none" if b == 0 else f"{b}B"), ann
    return None, None


def reject(lw, annotations: tuple[ast.Annotation, ...], here: str) -> None:
    """Statements that take no annotation: report the first one, in terms of where it belongs."""
    for ann in annotations:
        _checked(lw, ann, here)
