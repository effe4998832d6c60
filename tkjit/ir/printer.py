"""Print tile IR as text. The format round-trips exactly through ``tkjit.ir.parser``.

    kernel @name(%A: gl<bf16>[M, K], ...) attributes {consumers = 2} {
      %r = opname {attr = 1} %a, %b : type {
      ^(%k: i32):
        ...
      }
    }
"""
from __future__ import annotations

import json
import math

from .core import Block, Kernel, Op, Value


def format_attr(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(format_attr(v) for v in value) + "]"
    raise TypeError(f"cannot print attribute value {value!r}")


def format_attrs(attrs: dict) -> str:
    return "{" + ", ".join(f"{k} = {format_attr(v)}" for k, v in attrs.items()) + "}"


class Namer:
    """Gives every value a unique printed name: its hint when free, else hint.N; else a number."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.used: set[str] = set()
        self.counter = 0
        self.suffix: dict[str, int] = {}
        """hint → the suffix its last name took: every smaller one is taken (names are never
        freed), so the search resumes there and n rebindings of one name cost O(n), not O(n²)."""

    def define(self, v: Value) -> str:
        hint = v.hint
        if hint and not hint.isdigit():
            i = self.suffix.get(hint, 0)
            name = f"{hint}.{i}" if i else hint
            while name in self.used:
                i += 1
                name = f"{hint}.{i}"
            self.suffix[hint] = i
        else:
            while str(self.counter) in self.used:
                self.counter += 1
            name = str(self.counter)
            self.counter += 1
        self.used.add(name)
        self.names[id(v)] = name
        return "%" + name

    def __call__(self, v: Value) -> str:
        name = self.names.get(id(v))
        return "%" + name if name is not None else "%<undefined>"


class Printer:
    def __init__(self, locs: bool = False, marks: dict[int, str] | None = None):
        self.namer = Namer()
        self.lines: list[str] = []
        self.locs = locs
        self.marks = marks or {}

    def kernel(self, k: Kernel) -> str:
        params = ", ".join(f"{self.namer.define(p)}: {p.type}" for p in k.params)
        attrs = f" attributes {format_attrs(k.attrs)}" if k.attrs else ""
        self.lines.append(f"kernel @{k.name}({params}){attrs} {{")
        self.block_ops(k.body, 1)
        self.lines.append("}")
        return "\n".join(self.lines) + "\n"

    def block_ops(self, block: Block, depth: int) -> None:
        for op in block.ops:
            self.op(op, depth)

    def op(self, op: Op, depth: int) -> None:
        pad = "  " * depth
        text = pad
        if op.results:
            text += ", ".join(self.namer.define(r) for r in op.results) + " = "
        text += op.NAME
        if op.attrs:
            text += " " + format_attrs(op.attrs)
        if op.operands:
            text += " " + ", ".join(self.namer(v) for v in op.operands)
        if op.results:
            text += " : " + ", ".join(str(r.type) for r in op.results)
        for i, region in enumerate(op.regions):
            text += " {" if i == 0 else "} {"
            if self.locs and op.span is not None and i == 0:
                text += f"  // {op.span.location()}"
            self.lines.append(text)
            if region.args:
                args = ", ".join(f"{self.namer.define(a)}: {a.type}" for a in region.args)
                self.lines.append(f"{pad}^({args}):")
            self.block_ops(region, depth + 1)
            text = pad
        if op.regions:
            self.lines.append(pad + "}")
        else:
            if not op.operands and not op.results and getattr(op, "SEMICOLON", False):
                text += ";"  # else a next op's result would read as this op's operand
            if self.locs and op.span is not None:
                text += f"  // {op.span.location()}"
            self.lines.append(text)
        if id(op) in self.marks:
            self.lines.append(pad + "^^^ " + self.marks[id(op)])


def print_kernel(k: Kernel, locs: bool = False) -> str:
    """The kernel's textual IR. ``locs`` adds ``// file:line:col`` comments (the parser skips them)."""
    return Printer(locs).kernel(k)


def print_with_mark(k: Kernel, op: Op, message: str) -> str:
    """The kernel's IR with ``^^^ message`` under one op (verifier failures show where)."""
    return Printer(marks={id(op): message}).kernel(k)


def print_kernels(ks: list[Kernel], locs: bool = False) -> str:
    return "\n".join(print_kernel(k, locs) for k in ks)
