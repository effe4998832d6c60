"""A small PTX text builder for the Hopper kernels: virtual registers (the register-tile
backend's Namer), unique labels, and the integer expressions of the launch ABI
(``["cdiv", ["dim", "K"], 64]``) evaluated in registers."""
from __future__ import annotations

from ..ptx import Namer

EXPR_OPS = {"add": "add.s32", "mul": "mul.lo.s32", "min": "min.s32", "max": "max.s32"}


class Builder:
    def __init__(self) -> None:
        self.namer = Namer()
        self.lines: list[str] = []
        self.labels = 0
        self.dims: dict[str, str] = {}

    def reg(self, kind: str = "b32") -> str:
        return self.namer.new(kind)

    def pred(self) -> str:
        return self.namer.pred()

    def __call__(self, *lines: str) -> None:
        self.lines.extend(lines)

    def label(self, what: str) -> str:
        self.labels += 1
        return f"$L_{what}_{self.labels}"

    def place(self, label: str) -> None:
        self.lines.append(f"{label}:")

    def mov(self, value) -> str:
        r = self.reg()
        self(f"mov.b32 {r}, {value};")
        return r

    def expr(self, e) -> str:
        """A register holding the value of a JSON integer expression over the named dims."""
        if isinstance(e, int):
            return self.mov(e)
        op, *args = e
        if op == "dim":
            return self.dims[args[0]]
        a, b = (self.expr(x) for x in args)
        out = self.reg()
        if op == "cdiv":
            t = self.reg()
            self(f"add.s32 {t}, {a}, {b};", f"sub.s32 {t}, {t}, 1;", f"div.s32 {out}, {t}, {b};")
        elif op in EXPR_OPS:
            self(f"{EXPR_OPS[op]} {out}, {a}, {b};")
        else:
            raise ValueError(f"expression '{op}' cannot be evaluated in a kernel")
        return out

    def body(self) -> list[str]:
        """Register declarations, then the instructions (labels flush left)."""
        out = self.namer.declarations()
        for line in self.lines:
            out.append(line if line.endswith(":") else "  " + line)
        return out
