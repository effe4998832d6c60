"""A generator of random, well-typed tile programs in the kernel language (issue 20, item 6), in
the spirit of Csmith/YARPGen: every program it writes is valid, so any difference between two
ways of running it -- the CPU interpreter, the register-tile backend's PTX on the PTX simulator
(tests/difftest.py), the compiled kernel on a GPU (benchmarks/difftest.py) -- is a bug.

What a program can hold: a block loop of 1 to 3 indices over ragged tensors (dims drawn so that
tiles cross the edges); tile, vector and scalar loads (global -> register directly, or through a
shared tile); elementwise maps (``exp log sqrt rsqrt abs relu sin cos tanh gelu gelu_tanh silu
sigmoid``, guarded so that values stay finite), arithmetic with tiles, vectors and scalars,
``max``/``min``; row and column reductions and the ``*_row``/``*_col`` broadcasts; ``cvt``
round trips through bf16/f16; ``select`` on tile and vector comparisons (of exact values only:
loads, index tiles, scalar parameters -- a comparison turns the GPU's last-bit differences from
approximate math into different elements, see ``exact_tile``); ``row_index``/``col_index``,
``causal_mask``; every ``mma_*`` variant on bf16/f16 shared or register operands, with an f32
or (f16 inputs) f16 accumulator, in a K loop with a ragged K; ``for`` loops carrying tiles,
vectors and scalars (constant trip counts and a runtime ``n``); ``if``/``else`` on block
indices, loop indices and scalar parameters; several stores of tiles (bf16/f16/f32) and of
row/column vectors, stores under ``if``.

Not generated: fp8, shared-tile arithmetic, bool/i32 tiles, `%`-heavy index arithmetic in tile
coordinates, out-of-range coordinates (those are errors, tested elsewhere), annotations.

``generate(seed)`` returns a ``Program``: its source text, the named dims' sizes, and a way to
make the inputs. Deterministic in the seed.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

UNARY_SAFE = ["tanh", "sigmoid", "sin", "cos", "relu", "abs", "silu", "gelu", "gelu_tanh"]
BINARY = ["+", "-", "*", "max", "min"]
BROADCAST_OPS = ["add", "sub", "mul", "max", "min"]
MMA = ["mma_AB", "mma_ABt", "mma_AtB", "mma_AtBt"]
COMPARE = ["<", "<=", ">", ">=", "==", "!="]


@dataclass
class Param:
    name: str
    kind: str
    """``in``/``out`` (tensors), ``f32``/``i32`` (scalars)."""
    dtype: str = "f32"
    dims: tuple = ()
    """Dimension names (str) of a tensor."""
    value: float | int | None = None
    """A scalar's value at launch."""


@dataclass
class Program:
    seed: int
    source: str
    params: list[Param]
    dims: dict[str, int]
    features: set[str] = field(default_factory=set)

    @property
    def name(self) -> str:
        return f"gen{self.seed}"

    @property
    def outputs(self) -> list[int]:
        return [i for i, p in enumerate(self.params) if p.kind == "out"]

    def make_args(self, device: str = "cpu") -> list:
        """Inputs drawn from the seed (torch); outputs filled with NaN (never-written elements
        compare equal as NaN on every path)."""
        import torch
        gen = torch.Generator().manual_seed(self.seed)
        dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
        args = []
        for p in self.params:
            if p.kind in ("f32", "i32"):
                args.append(p.value)
                continue
            shape = tuple(self.dims[d] if d in self.dims else int(d) for d in p.dims)
            if p.kind == "in":
                t = (torch.randn(shape, generator=gen, dtype=torch.float64)).to(dt[p.dtype])
            else:
                t = torch.full(shape, float("nan"), dtype=dt[p.dtype])
            args.append(t.to(device))
        return args


class _Scope:
    def __init__(self, parent=None):
        self.parent = parent
        self.names: dict[str, str] = {}

    def all(self) -> dict[str, str]:
        out = dict(self.parent.all()) if self.parent else {}
        out.update(self.names)
        return out


class Generator:
    """One program. ``T`` is the working tile type rt<f32>[TM, TN]; ``cv``/``rv`` its column and
    row vectors; ``f``/``i`` f32/i32 scalars."""

    def __init__(self, seed: int, max_blocks: int = 12, max_stmts: int = 14, hopper: bool = False):
        self.seed = seed
        self.hopper = hopper
        self.rng = random.Random(seed)
        r = self.rng
        self.nd = r.choice([1, 2, 2, 3])
        if hopper:  # warpgroup-sized tiles, shared operands: what TMA + wgmma take
            self.TM, self.TN, self.TK = r.choice([64, 128]), r.choice([64, 128]), r.choice([32, 64])
        else:
            self.TM, self.TN, self.TK = r.choice([16, 32]), r.choice([16, 32]), r.choice([16, 32])
        self.max_stmts = max_stmts
        self.features: set[str] = set()
        self.params: list[Param] = []
        self.dims: dict[str, int] = {}
        self.counter = 0
        self.lines: list[str] = []
        self.depth = 2
        self.scope = _Scope()
        self.loop_vars: list[str] = []
        self.readonly: set[str] = set()
        self.exact: set[str] = set()
        """Names whose value is computed the same way bit for bit on every backend (a load, an
        index tile, a scalar parameter) and not rebound since: what comparisons read."""
        self.budget = 40  # expression nodes per statement, roughly
        # dims: ragged against the tiles; the grid small enough for the simulator
        while True:
            self.dims["M"] = r.randint(1, 3 * self.TM)
            self.dims["N"] = r.randint(1, self.TN) if self.nd == 1 else r.randint(1, 3 * self.TN)
            self.dims["B"] = r.randint(1, 2)
            blocks = -(-self.dims["M"] // self.TM) * (-(-self.dims["N"] // self.TN) if self.nd > 1 else 1)
            blocks *= self.dims["B"] if self.nd == 3 else 1
            if blocks <= max_blocks:
                break
        self.dims["K"] = r.randint(1, 3 * self.TK)
        self.dims["I"] = -(-self.dims["M"] // self.TM)
        self.dims["J"] = -(-self.dims["N"] // self.TN) if self.nd > 1 else 1
        self.lead = ("B",) if self.nd == 3 else ()
        self.lead_idx = ("b",) if self.nd == 3 else ()
        self.col = "j" if self.nd > 1 else "0"

    # ------------------------------------------------------------------ names and params
    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def param(self, kind: str, dtype: str = "f32", dims: tuple = (), value=None) -> str:
        prefix = {"in": "X", "out": "Y", "f32": "s", "i32": "n"}[kind]
        name = f"{prefix}{len(self.params)}"
        self.params.append(Param(name, kind, dtype, dims, value))
        return name

    def bind(self, name: str, kind: str) -> None:
        self.scope.names[name] = kind

    def names(self, kind: str, writable: bool = False) -> list[str]:
        return sorted(n for n, k in self.scope.all().items()
                      if k == kind and not (writable and n in self.readonly))

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    def idx(self, *last: str) -> str:
        return ", ".join(self.lead_idx + last)

    # ------------------------------------------------------------------ expressions
    def scalar_f(self) -> str:
        r = self.rng
        names = self.names("f")
        c = r.random()
        if names and c < 0.5:
            return r.choice(names)
        if c < 0.7:
            ints = self.names("i") + list(self.loop_vars) + ["i"]
            self.features.add("cvt-scalar")
            return f"cvt<f32>({r.choice(ints)})"
        return r.choice(["0.5", "2.0", "-1.25", "0.75", "3.0", "-0.5"])

    def tile(self, d: int) -> str:
        r = self.rng
        names = self.names("T")
        if d <= 0 or r.random() < 0.25:
            if names:
                return r.choice(names)
            return f"fill_like({self.scalar_f()})"  # replaced by a statement below
        c = r.random()
        if c < 0.22:
            f = r.choice(UNARY_SAFE)
            self.features.add(f)
            return f"{f}({self.tile(d - 1)})"
        if c < 0.3:
            g = r.choice(["exp(min({}, 3.0))", "log(abs({}) + 1.0)", "sqrt(abs({}) + 0.0625)", "rsqrt(abs({}) + 1.0)",
                          "exp2(min({}, 3.0))", "log2(abs({}) + 0.5)", "{} / (abs({}) + 1.0)"])
            self.features.add(g.split("(")[0] or "div")
            return g.replace("{}", self.tile(d - 1)) if g.count("{}") == 1 else \
                g.format(self.tile(d - 1), self.tile(d - 1))
        if c < 0.45:
            op = r.choice(BINARY)
            a, b = self.tile(d - 1), self.tile(d - 1) if r.random() < 0.7 else self.scalar_f()
            if r.random() < 0.15:
                a, b = b, a
            self.features.add(f"tile{op}")
            return f"{op}({a}, {b})" if op in ("max", "min") else f"({a} {op} {b})"
        if c < 0.6:
            vec = r.choice(["cv", "rv"])
            kind = "row" if vec == "cv" else "col"
            op = r.choice(BROADCAST_OPS + ["div"])
            v = self.vector(vec, d - 1)
            if op == "div":
                v = f"(abs({v}) + 1.0)"
            self.features.add(f"{op}_{kind}")
            return f"{op}_{kind}({self.tile(d - 1)}, {v})"
        if c < 0.72:
            cmp = r.choice(COMPARE)
            a = self.exact_tile()
            b = self.exact_tile() if r.random() < 0.6 else self.exact_scalar()
            x = self.tile(d - 1)
            y = self.tile(d - 1) if r.random() < 0.7 else self.scalar_f()
            self.features.add("select")
            return f"select({a} {cmp} {b}, {x}, {y})"
        if c < 0.8:
            low = r.choice(["bf16", "f16"])
            self.features.add(f"cvt-{low}")
            return f"cvt<f32>(cvt<{low}>({self.tile(d - 1)}))"
        if c < 0.85:
            self.features.add("causal_mask")
            q = f"i * {self.TM}" if r.random() < 0.7 else "0"
            k = f"{self.col} * {self.TN}" if r.random() < 0.7 else "5"
            return f"max(causal_mask({self.tile(d - 1)}, {q}, {k}), -8.0)"
        if c < 0.93:
            return f"({self.tile(d - 1)} * {self.scalar_f()})"
        return f"-{self.tile(d - 1)}"

    def vector(self, vec: str, d: int) -> str:
        r = self.rng
        names = self.names(vec)
        kind = "row" if vec == "cv" else "col"
        c = r.random()
        if (d <= 0 or c < 0.3) and names:
            return r.choice(names)
        if d <= 0 or c < 0.7:
            red = r.choice(["max", "min", "sum"])
            self.features.add(f"{kind}_{red}")
            t = self.tile(min(d, 1) - 1 if d > 0 else 0)
            if "fill_like" in t:
                t = self.need_tile()
            return f"{kind}_{red}({t})"
        if c < 0.8:
            f = r.choice(UNARY_SAFE)
            return f"{f}({self.vector(vec, d - 1)})"
        if c < 0.9:
            op = r.choice(BINARY)
            b = self.vector(vec, d - 1) if r.random() < 0.6 else self.scalar_f()
            a = self.vector(vec, d - 1)
            return f"{op}({a}, {b})" if op in ("max", "min") else f"({a} {op} {b})"
        self.features.add(f"select-{vec}")
        a, b = self.vector(vec, d - 1), self.vector(vec, d - 1)
        return f"select({self.exact_vector(vec)} {r.choice(COMPARE)} {self.exact_scalar()}, {a}, {b})"

    # ------------------------------------------------------------------ what comparisons read
    # A comparison (select, if) is discontinuous: a last-bit difference in its operands picks the
    # other element. The GPU's transcendental maps (tanh, ex2, rcp, rsqrt, sin ... are MUFU
    # approximations), its summation orders (reductions, mma) and its division differ from the
    # interpreter's exact f32 in the last bits, so comparisons read only exact values: loads,
    # index tiles, scalar parameters, ``cvt`` of integers, constants, max/min reductions of those
    # (max and min are exact in any order). A name compared is never rebound afterwards.
    def _exact_name(self, kind: str) -> str | None:
        names = [n for n in self.names(kind) if n in self.exact]
        if not names:
            return None
        name = self.rng.choice(names)
        self.readonly.add(name)
        return name

    def exact_tile(self) -> str:
        name = self._exact_name("T")
        if name is None:
            name = self.load_tile()
            self.readonly.add(name)
        return name

    def exact_vector(self, vec: str) -> str:
        name = self._exact_name(vec)
        if name is not None:
            return name
        kind = "row" if vec == "cv" else "col"
        return f"{kind}_{self.rng.choice(['max', 'min'])}({self.exact_tile()})"

    def exact_scalar(self) -> str:
        r = self.rng
        c = r.random()
        name = self._exact_name("f") if c < 0.5 else None
        if name is not None:
            return name
        if c < 0.7:
            ints = self.names("i") + list(self.loop_vars) + ["i"]
            return f"cvt<f32>({r.choice(ints)})"
        return r.choice(["0.5", "2.0", "-1.25", "0.75", "3.0", "-0.5"])

    def need_tile(self) -> str:
        names = self.names("T")
        return self.rng.choice(names) if names else self.load_tile()

    def clean(self, expr: str) -> str:
        """fill_like(v) placeholders (a tile wanted where none exists) become a bound tile."""
        while "fill_like(" in expr:
            start = expr.index("fill_like(")
            depth, k = 0, start + len("fill_like")
            for k in range(start + len("fill_like"), len(expr)):
                depth += {"(": 1, ")": -1}.get(expr[k], 0)
                if depth == 0:
                    break
            value = expr[start + len("fill_like("):k]
            name = self.fresh("f")
            if value[0].isdigit() or value[0] == "-":  # fill() takes a constant
                self.emit(f"{name}: rt<f32>[{self.TM}, {self.TN}] = fill({value})")
                self.features.add("fill")
            else:  # a runtime scalar is broadcast by arithmetic
                self.emit(f"{name}: rt<f32>[{self.TM}, {self.TN}] = zeros()")
                self.emit(f"{name} = {name} + {value}")
                self.features.add("zeros")
            self.bind(name, "T")
            expr = expr[:start] + name + expr[k + 1:]
        return expr

    # ------------------------------------------------------------------ statements
    def load_tile(self) -> str:
        r = self.rng
        dt = r.choice(["f32", "bf16", "f16"])
        x = self.param("in", dt, self.lead + ("M", "N"))
        name = self.fresh("t")
        if r.random() < 0.3 and dt != "f32":
            sh = self.fresh("sh")
            self.emit(f"{sh}: st<{dt}>[{self.TM}, {self.TN}] = {x}.tile({self.idx('i', self.col)})")
            self.emit(f"{name}: rt<f32>[{self.TM}, {self.TN}] = {sh}")
            self.features.add("shared-copy")
        else:
            self.emit(f"{name}: rt<f32>[{self.TM}, {self.TN}] = {x}.tile({self.idx('i', self.col)})")
        self.features.add(f"load-{dt}")
        self.bind(name, "T")
        self.exact.add(name)
        return name

    def load_vector(self, vec: str) -> str:
        if vec == "cv":
            x = self.param("in", "f32", ("M",))
            coord = "i"
            typ = f"cv<f32>[{self.TM}]"
        else:
            x = self.param("in", "f32", ("N",))
            coord = self.col
            typ = f"rv<f32>[{self.TN}]"
        name = self.fresh("v")
        self.emit(f"{name}: {typ} = {x}.tile({coord})")
        self.features.add(f"load-{vec}")
        self.bind(name, vec)
        self.exact.add(name)
        return name

    def mma(self) -> str:
        r = self.rng
        op = r.choice(MMA)
        dt = r.choice(["bf16", "f16"])
        TM, TN, TK = self.TM, self.TN, self.TK
        a_t = op in ("mma_AtB", "mma_AtBt")
        b_t = op in ("mma_ABt", "mma_AtBt")
        A = self.param("in", dt, self.lead + (("K", "M") if a_t else ("M", "K")))
        B = self.param("in", dt, self.lead + (("N", "K") if b_t else ("K", "N")))
        acc_dt = "f16" if dt == "f16" and r.random() < 0.3 else "f32"
        acc = self.fresh("acc")
        self.emit(f"{acc}: rt<{acc_dt}>[{TM}, {TN}] = zeros()")
        k = self.fresh("k")
        self.emit(f"for {k} in 0 .. K / {TK} {{")
        self.depth += 1
        place_a = r.choice(["st", "st", "rt"] if self.hopper else ["st", "rt"])
        place_b = "st" if self.hopper else r.choice(["st", "rt"])
        a, b = self.fresh("a"), self.fresh("b")
        a_shape = f"[{TK}, {TM}]" if a_t else f"[{TM}, {TK}]"
        b_shape = f"[{TN}, {TK}]" if b_t else f"[{TK}, {TN}]"
        a_coord = self.idx(k, "i") if a_t else self.idx("i", k)
        b_coord = self.idx(self.col, k) if b_t else self.idx(k, self.col)
        self.emit(f"{a}: {place_a}<{dt}>{a_shape} = {A}.tile({a_coord})")
        self.emit(f"{b}: {place_b}<{dt}>{b_shape} = {B}.tile({b_coord})")
        self.emit(f"{acc} = {op}({a}, {b}, {acc})")
        self.depth -= 1
        self.emit("}")
        self.features.update({op, f"mma-{dt}", f"mma-a-{place_a}", f"mma-b-{place_b}", f"acc-{acc_dt}"})
        if acc_dt == "f16":
            name = self.fresh("t")
            # scaled down: an f16 accumulator rounds at every k16 step on the tensor cores and
            # once per mma in the interpreter; later maps must not magnify that to a mismatch
            self.emit(f"{name}: rt<f32>[{TM}, {TN}] = cvt<f32>({acc}) * 0.125")
            self.bind(name, "T")
            return name
        self.bind(acc, "T")
        return acc

    def assign(self, kind: str, rebind: bool) -> None:
        r = self.rng
        if kind == "T":
            expr = self.clean(self.tile(r.randint(1, 3)))
            if r.random() < 0.3:
                expr = f"tanh({expr})"  # keeps magnitudes in range through loops
        elif kind in ("cv", "rv"):
            expr = self.clean(self.vector(kind, r.randint(1, 2)))
        else:
            expr = self.scalar_f()
            if r.random() < 0.5:
                expr = f"({expr} {r.choice(['+', '*', '-'])} {self.scalar_f()})"
            expr = f"tanh({expr})" if r.random() < 0.3 else expr
        targets = self.names(kind, writable=True)
        if rebind and targets:
            target = r.choice(targets)
            self.exact.discard(target)
            self.emit(f"{target} = {expr}")
            return
        name = self.fresh({"T": "t", "cv": "c", "rv": "r", "f": "x"}[kind])
        typ = {"T": f"rt<f32>[{self.TM}, {self.TN}]", "cv": f"cv<f32>[{self.TM}]",
               "rv": f"rv<f32>[{self.TN}]", "f": "f32"}[kind]
        self.emit(f"{name}: {typ} = {expr}")
        self.bind(name, kind)

    def index_tile(self) -> None:
        r = self.rng
        which = r.choice(["row_index", "col_index"])
        off = r.choice(["", f"i * {self.TM}", "3", f"{self.col} * {self.TN}"])
        name = self.fresh("ix")
        self.emit(f"{name}: rt<f32>[{self.TM}, {self.TN}] = {which}({off})")
        self.emit(f"{name} = {name} * 0.0625")
        self.features.add(which)
        self.bind(name, "T")
        self.exact.add(name)

    def store(self) -> None:
        r = self.rng
        c = r.random()
        if c < 0.7 or not (self.names("cv") or self.names("rv")):
            dt = r.choice(["f32", "bf16", "f16"])
            y = self.param("out", dt, self.lead + ("M", "N"))
            self.emit(f"{y}.tile({self.idx('i', self.col)}) = {self.need_tile()}")
            self.features.add(f"store-{dt}")
        elif self.names("cv") and (c < 0.85 or not self.names("rv")):
            y = self.param("out", "f32", self.lead + ("J", "M"))
            self.emit(f"{y}.tile({self.idx(self.col, 'i')}) = {r.choice(self.names('cv'))}")
            self.features.add("store-cv")
        else:
            y = self.param("out", "f32", self.lead + ("I", "N"))
            self.emit(f"{y}.tile({self.idx('i', self.col)}) = {r.choice(self.names('rv'))}")
            self.features.add("store-rv")

    def statement(self, n_left: int, nest: int) -> None:
        r = self.rng
        c = r.random()
        if c < 0.12 and nest < 2:
            self.loop(nest)
        elif c < 0.22 and nest < 2:
            self.branch(nest)
        elif c < 0.32 and nest == 0:
            self.mma()
        elif c < 0.42 and nest == 0:
            self.load_tile() if r.random() < 0.6 else self.load_vector(r.choice(["cv", "rv"]))
        elif c < 0.46:
            self.index_tile()
        elif c < 0.52 and nest == 0:
            self.store()
        else:
            kind = r.choice(["T", "T", "T", "cv", "rv", "f"])
            self.assign(kind, rebind=nest > 0 or r.random() < 0.3)

    def loop(self, nest: int) -> None:
        r = self.rng
        lv = self.fresh("l")
        hi = r.choice(["2", "3", self.params_n(), "1"])
        step = " step 2" if r.random() < 0.15 else ""
        self.emit(f"for {lv} in 0 .. {hi}{step} {{")
        self.features.add("for")
        self.depth += 1
        self.scope = _Scope(self.scope)
        self.loop_vars.append(lv)
        for _ in range(r.randint(1, 3)):
            self.statement(0, nest + 1)
        # a carried value: rebind something from outside
        kind = r.choice([k for k in ("T", "cv", "rv", "f") if self.names(k, True)] or ["T"])
        self.assign(kind, rebind=True)
        self.loop_vars.pop()
        self.scope = self.scope.parent
        self.depth -= 1
        self.emit("}")

    def params_n(self) -> str:
        names = [p.name for p in self.params if p.kind == "i32"]
        if names:
            return names[0]
        return self.param("i32", "i32", value=self.rng.randint(0, 3))

    def condition(self) -> str:
        r = self.rng
        cands = ["i % 2 == 0", f"{self.col} > 0" if self.col != "0" else "i > 0", "i == 1"]
        cands += [f"{lv} == 1" for lv in self.loop_vars]
        cands += [f"{s} > 0.0" for s in self.names("f") if s in self.exact]  # not a tanh of one
        s = [p.name for p in self.params if p.kind == "f32"]
        if s:
            cands.append(f"{s[0]} < 0.5")
        c = r.choice(cands)
        if r.random() < 0.2:
            c = f"{c} && {r.choice(cands)}"
        elif r.random() < 0.1:
            c = f"!({c})"
        return c

    def branch(self, nest: int) -> None:
        r = self.rng
        self.emit(f"if {self.condition()} {{")
        self.features.add("if")
        for has_else in (False, True):
            self.depth += 1
            self.scope = _Scope(self.scope)
            for _ in range(r.randint(0, 2)):
                self.statement(0, nest + 1)
            kind = r.choice([k for k in ("T", "cv", "rv", "f") if self.names(k, True)] or ["T"])
            self.assign(kind, rebind=True)
            if nest == 0 and r.random() < 0.2:
                self.store()
                self.features.add("store-under-if")
            self.scope = self.scope.parent
            self.depth -= 1
            if has_else:
                self.emit("}")
            elif r.random() < 0.6:
                self.emit("} else {")
                self.features.add("else")
            else:
                self.emit("}")
                break

    def generate(self) -> Program:
        r = self.rng
        if r.random() < 0.6:
            s = self.param("f32", value=r.choice([0.25, -0.75, 1.5]))
            self.bind(s, "f")
            self.readonly.add(s)
            self.exact.add(s)
        self.load_tile()
        if self.hopper:
            self.mma()
        for n in range(r.randint(3, self.max_stmts)):
            self.statement(self.max_stmts - n, 0)
        for _ in range(r.randint(1, 3)):
            self.store()
        if not any(p.kind == "out" for p in self.params):
            self.store()
        if self.nd == 1:
            head = "for i in blocks(M / %d) {" % self.TM
        elif self.nd == 2:
            head = "for (i, j) in blocks(M / %d, N / %d) {" % (self.TM, self.TN)
        else:
            head = "for (b, i, j) in blocks(B, M / %d, N / %d) {" % (self.TM, self.TN)
        sig = []
        for p in self.params:
            sig.append(f"{p.name}: {p.kind}" if p.kind in ("f32", "i32")
                       else f"{p.name}: gl<{p.dtype}>[{', '.join(p.dims)}]")
        name = f"gen{self.seed}"
        src = [f"# generated by tkjit.testing.gen, seed {self.seed}",
               f"kernel {name}({', '.join(sig)}) {{", "  " + head, *self.lines, "  }", "}", ""]
        self.features.add(f"blocks-{self.nd}d")
        used = {d for p in self.params for d in p.dims}
        dims = {d: v for d, v in self.dims.items() if d in used}
        return Program(self.seed, "\n".join(src), self.params, dims, self.features)


def generate(seed: int, *, hopper: bool = False, **kw) -> Program:
    """Program ``seed``; ``hopper=True`` shapes it for the Hopper path (64/128-row tiles, a
    matrix product on shared operands first), for compile-only runs and GPU runs."""
    return Generator(seed, hopper=hopper, **kw).generate()
