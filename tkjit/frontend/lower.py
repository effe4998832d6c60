"""AST → tile IR: the kernel, its parameters and constants, and every statement.

SSA construction: a variable is a name for the current value. A ``for`` loop carries every
variable that was bound before it and is reassigned in its body (a block argument inside, a loop
result after it); an ``if`` yields every such variable from both branches (a branch that does not
assign one yields the old value). Names first bound inside a body are local to it. An ``if`` on a
compile-time constant keeps only the branch it takes.
"""
from __future__ import annotations

import math
import numbers
from typing import Optional

from ..errors import DiagnosticError
from ..ir import ops
from ..ir.core import Block, Kernel, Value
from ..ir.types import (BOOL, E4M3, E5M2, I32, GlobalType, ScalarType, TileType, Type, VectorType, describe,
                        is_scalar)
from ..source import Span
from . import annotate, ast
from .fold import Const, is_const, kind_of, show
from .lower_expr import BUILTIN_CONSTANTS, ExprLowering, _text
from .memory import lower_store
from .scope import Var, did_you_mean
from .typeexpr import binding_type, param_type


class Lowerer(ExprLowering):
    """Lowers one kernel: ``Lowerer(ast, constants).kernel()`` → an unverified IR kernel."""

    def __init__(self, kernel: ast.Kernel, constants: Optional[dict] = None):
        super().__init__()
        self.ast = kernel
        self.overrides = dict(constants or {})
        self.block_loop: Optional[ast.BlockLoop] = None
        self.depth = 0  # statements nested in loops / branches
        self.statement_start: Optional[int] = None

    # -- the kernel ---------------------------------------------------------------------
    def kernel(self) -> Kernel:
        k = self.ast
        body = Block()
        self.blocks.append(body)
        self.const_cache.append({})
        self.kernel_constants()
        params = self.params()
        attrs = annotate.kernel_attrs(self, k.annotations)
        for stmt in k.body:
            if self.block_loop is not None and isinstance(stmt, ast.BlockLoop):
                self.nested_block_loop(stmt)
            if self.block_loop is not None:
                raise DiagnosticError("nothing may follow the block loop: it is the kernel's "
                                      "last statement", stmt.span,
                                      [f"the block loop is at {self.block_loop.span.location()}"])
            self.top_level(stmt)
        if self.block_loop is None:
            raise DiagnosticError(f"kernel '{k.name}' has no block loop: its work goes in "
                                  "`for (i, j) in blocks(...) { ... }`", k.name_span)
        _refuse_fp8_registers(body)
        order = [n for n in _named_dims(params) if n in self.dim_ops]
        body.ops[0:0] = [self.dim_ops[n] for n in order]
        for op in body.ops[:len(order)]:
            op.parent = body
        return Kernel(k.name, params, body, attrs, k.span)

    def kernel_constants(self) -> None:
        declared = {c.name: c for c in self.ast.consts}
        for name in self.overrides:
            if name not in declared:
                known = ", ".join(declared) or "none"
                raise DiagnosticError(
                    f"constants: '{name}' is not a constant of kernel '{self.ast.name}'"
                    f"{did_you_mean(name, declared)} (its constants: {known})", self.ast.name_span)
        for c in self.ast.consts:
            self.check_new_name(c.name, c.span)
            value = self.constant(c.value, f"the default of {c.name}")
            if c.name in self.overrides:
                value = _override(c, value, self.overrides[c.name])
            self.scopes.define(Var(c.name, "const", c.span, None, value))

    def params(self) -> list[Value]:
        values = []
        for p in self.ast.params:
            self.check_new_name(p.name, p.span)
            t, named = param_type(self, p.type)
            if isinstance(t, ScalarType) and t.dtype == BOOL:
                raise DiagnosticError(f"parameter '{p.name}': a kernel cannot take a bool scalar (the "
                                      "launch passes f32 and i32 scalars); take an i32 and test "
                                      f"{p.name} != 0", p.span)
            v = Value(t, p.name)
            self.scopes.define(Var(p.name, "param", p.span, t, v))
            values.append(v)
            for name, span in named:
                var = self.scopes.lookup(name)
                if var is None:
                    self.scopes.define(Var(name, "dim", span, ScalarType(I32), None))
                elif var.kind != "dim":
                    raise DiagnosticError(f"'{name}' names both {var.describe()} and a dimension",
                                          span, [f"'{name}' was first bound at "
                                                 f"{var.span.location()}"])
        return values

    def top_level(self, stmt: ast.Stmt) -> None:
        """A statement of the kernel body: the block loop, or scalar work before it."""
        if isinstance(stmt, ast.BlockLoop):
            self.block_loop_stmt(stmt)
            return
        body = self.blocks[-1]
        start = len(body.ops)
        self.stmt(stmt)
        for op in body.ops[start:]:
            if op.regions or not op.results or not all(is_scalar(r.type) for r in op.results):
                raise DiagnosticError(
                    "before the block loop only scalars can be computed: move this into the "
                    "block loop `for ... in blocks(...) { ... }`", stmt.span)

    # -- statements ---------------------------------------------------------------------
    def stmt(self, s: ast.Stmt) -> None:
        self.statement_start = s.span.start  # where a RecursionError is reported (lower_source)
        handler = _STATEMENTS[type(s)]
        handler(self, s)

    def stmts(self, body: tuple[ast.Stmt, ...]) -> None:
        for s in body:
            self.stmt(s)

    def const_decl(self, s: ast.ConstDecl) -> None:
        annotate.reject(self, s.annotations, "stmt")
        for item in s.items:
            self.check_new_name(item.name, item.span)
            value = self.constant(item.value, f"the value of const {item.name}")
            self.scopes.define(Var(item.name, "const", item.span, None, value))

    def let(self, s: ast.Let) -> None:
        pinned, ann = annotate.swizzle(self, s.annotations)
        self.check_new_name(s.name, s.name_span)
        t = binding_type(self, s.type, pinned, ann.span if ann else None)
        v = self.expr(s.value, want=t)
        v = self.bind_declared(v, t, s)
        self.scopes.define(Var(s.name, "var", s.name_span, t, v))

    def assign(self, s: ast.Assign) -> None:
        annotate.reject(self, s.annotations, "stmt")
        var = self.scopes.lookup(s.name)
        if var is None:
            if s.name in BUILTIN_CONSTANTS:
                raise DiagnosticError(f"'{s.name}' is a built-in constant and cannot be bound",
                                      s.name_span)
            v = self.expr(s.value)
            if is_const(v):
                v = self.materialize(v, s.value.span, hint=s.name)
            self.reject_global(v, s.value)
            _name(v, s.name)
            self.scopes.define(Var(s.name, "var", s.name_span, v.type, v))
            return
        if var.kind != "var":
            raise DiagnosticError(f"'{s.name}' is {var.describe()} and cannot be reassigned; "
                                  "bind the result to a new name", s.name_span,
                                  [f"'{s.name}' was bound at {var.span.location()}"])
        v = self.expr(s.value, want=var.type)
        if is_const(v):
            v = self.const_of_type(v, var.type, s, rebinding=var)
        self.reject_global(v, s.value)
        if v.type != var.type:
            raise DiagnosticError(
                f"'{s.name}' is {var.type} and keeps its type, but this value is {v.type}: "
                "bind it to a new name", s.span,
                [f"'{s.name}' was first bound at {var.span.location()}"])
        _name(v, s.name)
        var.value = v

    def store(self, s: ast.Store) -> None:
        annotate.reject(self, s.annotations, "stmt")
        lower_store(self, s)

    def for_range(self, s: ast.ForRange) -> None:
        attrs = annotate.loop_attrs(self, s.annotations)
        lo = self.index(s.lo, "the loop's start")
        hi = self.index(s.hi, "the loop's end")
        if s.step is not None:
            step_c = self.expr(s.step)
            if is_const(step_c) and not isinstance(step_c, bool) and isinstance(step_c, int) \
                    and step_c <= 0:
                raise DiagnosticError(f"the loop's step must be positive, got {step_c}",
                                      s.step.span)
            step = self.index(s.step, "the loop's step")
        else:
            step = self.const(1, I32, s.span)
        self.check_new_name(s.var, s.var_span)
        carried = self.carried(s.body)
        inits = [var.value for var in carried]
        body = Block()
        k = body.add_arg(ScalarType(I32), s.var)
        for var in carried:
            var.value = body.add_arg(var.type, var.name)
        self.enter(body)
        self.scopes.define(Var(s.var, "index", s.var_span, ScalarType(I32), k))
        self.stmts(s.body)
        self.emit(ops.Yield, [var.value for var in carried], span=s.span)
        self.leave("the for loop")
        op = ops.For([lo, hi, step, *inits], attrs, None, [body], s.span,
                     [var.name for var in carried])
        self.blocks[-1].append(op)
        for var, result in zip(carried, op.results):
            var.value = result

    def if_stmt(self, s: ast.If) -> None:
        annotate.reject(self, s.annotations, "stmt")
        cond = self.expr(s.cond)
        if is_const(cond):
            if not isinstance(cond, bool):
                raise DiagnosticError(f"an if condition must be a bool, got {show(cond)}",
                                      s.cond.span)
            taken = s.then if cond else s.orelse
            if taken is not None:
                self.scopes.push()
                self.depth += 1
                self.stmts(taken)
                self.depth -= 1
                self.scopes.pop("the if branch")
            return
        self.reject_global(cond, s.cond)
        if cond.type != ScalarType(BOOL):
            raise DiagnosticError(f"an if condition must be a bool, got {describe(cond.type)}; "
                                  "compare it, as in `n > 0`", s.cond.span)
        carried = self.carried(s.then + (s.orelse or ()))
        before = [var.value for var in carried]
        regions = []
        for branch in (s.then, s.orelse or ()):
            block = Block()
            self.enter(block)
            self.stmts(branch)
            self.emit(ops.Yield, [var.value for var in carried], span=s.span)
            self.leave("the if branch")
            regions.append(block)
            for var, v in zip(carried, before):
                var.value = v
        op = ops.If([cond], {}, [var.type for var in carried], regions, s.span,
                    [var.name for var in carried])
        self.blocks[-1].append(op)
        for var, result in zip(carried, op.results):
            var.value = result

    def block_loop_stmt(self, s: ast.BlockLoop) -> None:
        annotate.reject(self, s.annotations, "block")
        self.block_loop = s
        n = len(s.counts)
        if not 1 <= n <= 5:
            raise DiagnosticError(f"blocks(...) takes 1 to 5 block counts, got {n}", s.span)
        if len(s.vars) != n:
            raise DiagnosticError(f"{_count(len(s.vars), 'block index', 'block indices')} for "
                                  f"{_count(n, 'block count', 'block counts')}: give one index "
                                  "per count", s.span)
        counts = [self.index(c, "a block count") for c in s.counts]
        attrs = self.schedule(s)
        body = Block()
        for name in s.vars:
            self.check_new_name(name.name, name.span)
        lead = n - 2 if n > 3 else 0   # more than 3 counts: the leading n - 2 are one grid axis
        flat = None
        if lead:
            flat = counts[0]
            for c in counts[1:lead]:
                flat = self.emit(ops.Mul, [flat, c], span=s.span).result
            names = [name.name for name in s.vars[:lead]]
            indices = [body.add_arg(ScalarType(I32), "_".join(names))]
            indices += [body.add_arg(ScalarType(I32), name.name) for name in s.vars[lead:]]
        else:
            indices = [body.add_arg(ScalarType(I32), name.name) for name in s.vars]
        self.enter(body)
        if lead:
            indices = self.unflatten_block_index(indices[0], counts[:lead], names, s.span) + indices[1:]
            counts = [flat] + counts[lead:]
        for name, v in zip(s.vars, indices):
            self.scopes.define(Var(name.name, "block", name.span, v.type, v))
        self.stmts(s.body)
        self.leave("the block loop")
        op = ops.Blocks(counts, attrs, [], [body], s.span)
        self.blocks[-1].append(op)

    def unflatten_block_index(self, flat: Value, counts: list[Value], names: list[str],
                              span: Span) -> list[Value]:
        """The indices of leading block counts c0, c1, ... folded into one grid axis of c0*c1*...
        blocks, the last varying fastest: i_last = flat % c_last, the rest from flat // c_last."""
        out: list[Value] = []
        rest = flat
        for i in range(len(counts) - 1, 0, -1):
            out.append(self.emit(ops.Mod, [rest, counts[i]], span=span, hints=[names[i]]).result)
            hint = names[0] if i == 1 else "_".join(names[:i])
            rest = self.emit(ops.FloorDiv, [rest, counts[i]], span=span, hints=[hint]).result
        return [rest] + out[::-1]

    def schedule(self, s: ast.BlockLoop) -> dict:
        attrs: dict = {}
        for arg in s.schedule:
            if arg.value is None:
                if arg.name not in ("grid", "persistent"):
                    raise DiagnosticError(f"unknown schedule '{arg.name}' (expected grid or "
                                          "persistent, and optionally group = G)", arg.span)
                if "schedule" in attrs:
                    raise DiagnosticError("the schedule is given twice", arg.span)
                attrs["schedule"] = arg.name
            elif arg.name == "group":
                if "group" in attrs:
                    raise DiagnosticError("group is given twice", arg.span)
                g = self.constant_int(arg.value, "the group size")
                if g < 1:
                    raise DiagnosticError(f"the group size must be at least 1, got {g}", arg.span)
                attrs["group"] = g
            elif arg.name == "split":
                if "split" in attrs:
                    raise DiagnosticError("split is given twice", arg.span)
                n = self.constant_int(arg.value, "the split count")
                if n < 1:
                    raise DiagnosticError(f"the split count must be at least 1, got {n}", arg.span)
                attrs["split"] = n
            else:
                raise DiagnosticError(f"unknown schedule option '{arg.name}' (expected group = G "
                                      "or split = S)", arg.span)
        if attrs.get("split") == 1:  # the default: the IR of an unsplit loop stays as it was
            del attrs["split"]
        return {k: attrs[k] for k in ("schedule", "group", "split") if k in attrs}

    def nested_block_loop(self, s: ast.BlockLoop) -> None:
        first = self.block_loop
        if first is not None and first is not s and self.depth == 0:
            raise DiagnosticError("a kernel has exactly one block loop", s.span,
                                  [f"the first is at {first.span.location()}"])
        raise DiagnosticError("the block loop must be at the kernel's top level, not inside "
                              "another loop or a branch", s.span)

    # -- scopes, names and bindings -------------------------------------------------------
    def enter(self, block: Block) -> None:
        self.blocks.append(block)
        self.const_cache.append({})
        self.scopes.push()
        self.depth += 1

    def leave(self, where: str) -> None:
        self.depth -= 1
        self.scopes.pop(where)
        self.const_cache.pop()
        self.blocks.pop()

    def carried(self, body: tuple[ast.Stmt, ...]) -> list[Var]:
        """Variables bound before a loop or if and reassigned inside it, in order."""
        out = []
        for name in ast.assigned_names(body):
            var = self.scopes.lookup(name)
            if var is not None and var.kind == "var":
                out.append(var)
        return out

    def check_new_name(self, name: str, span: Span) -> None:
        var = self.scopes.lookup(name)
        if var is not None:
            raise DiagnosticError(f"'{name}' is already defined (as {var.describe()})", span,
                                  [f"'{name}' was first defined at {var.span.location()}"])
        if name in BUILTIN_CONSTANTS:
            raise DiagnosticError(f"'{name}' is a built-in constant and cannot be redefined", span)

    def const_of_type(self, c: Const, t: Type, s, rebinding: Optional[Var] = None) -> Value:
        """A constant bound to a declared (or already bound) scalar type."""
        if not isinstance(t, ScalarType):
            who = f"'{rebinding.name}'" if rebinding else "the binding"
            raise DiagnosticError(f"cannot bind the number {show(c)} to {who}, {describe(t)}: "
                                  "write fill(v) for a tile or vector of v", s.value.span)
        if t.dtype == BOOL and not isinstance(c, bool):
            raise DiagnosticError(f"expected a bool, got {show(c)}", s.value.span)
        if t.dtype != BOOL and isinstance(c, bool):
            raise DiagnosticError(f"expected a {t} number, got {show(c)}", s.value.span)
        if t.dtype == I32 and isinstance(c, float):
            raise DiagnosticError(f"{show(c)} is a float but {s.name} is i32", s.value.span)
        return self.const(c, t.dtype, s.value.span, hint=s.name)

    def bind_declared(self, v, t: Type, s: ast.Let) -> Value:
        """``x: T = v``: v as a T — the same value, a copy to another placement, or an error."""
        if is_const(v):
            return self.const_of_type(v, t, s)
        self.reject_global(v, s.value)
        have = v.type
        if have == t:
            return _name(v, s.name)
        problem = f"'{s.name}' is declared {t} but the value is {describe(have)}"
        if isinstance(t, TileType) and isinstance(have, TileType):
            if have.shape != t.shape:
                raise DiagnosticError(problem, s.span)
            if have.space == t.space and have.dtype != t.dtype:
                raise DiagnosticError(problem + _convert_hint(have, t, s.value), s.span)
            if t.space == "st" and have.dtype != t.dtype:
                raise DiagnosticError(problem + f"; shared tiles keep the dtype of what is copied "
                                      f"in: convert first, cvt<{t.dtype}>({_text(s.value)})",
                                      s.span)
            return self.emit(ops.Copy, [v], result_types=[t], span=s.span, hints=[s.name]).result
        if isinstance(t, VectorType) and isinstance(have, VectorType) and have.kind == t.kind \
                and have.length == t.length:
            raise DiagnosticError(problem + _convert_hint(have, t, s.value), s.span)
        if isinstance(t, ScalarType) and isinstance(have, ScalarType):
            raise DiagnosticError(problem + _convert_hint(have, t, s.value), s.span)
        raise DiagnosticError(problem, s.span)


def _convert_hint(have: Type, want: Type, node: ast.Node) -> str:
    """'; convert it with cvt<bf16>(x)' when only the dtype differs (and cvt can do it)."""
    dt = getattr(want, "dtype", None)
    if dt is None or _with_dtype(have, dt) != want:
        return ""
    if isinstance(have, TileType) and have.space == "st":
        return "; a shared tile keeps its dtype: copy it into a register tile (rt) to convert"
    return f"; convert it with cvt<{dt}>({_text(node)})"


def _with_dtype(t: Type, dt) -> Optional[Type]:
    if isinstance(t, (TileType, VectorType)):
        return t.with_dtype(dt)
    if isinstance(t, ScalarType):
        return ScalarType(dt)
    return None


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _name(v: Value, name: str) -> Value:
    """Give a fresh value its variable's name (printed IR then reads %acc, %acc.1, ...)."""
    if v.hint is None:
        v.hint = name
    return v


def _override(c: ast.ConstParam, default: Const, value) -> Const:
    """A ``constants={...}`` override, checked against the kind of the default."""
    if isinstance(value, bool) or (hasattr(value, "dtype") and str(value.dtype) == "bool"):
        value = bool(value)
    elif isinstance(value, numbers.Integral):
        value = int(value)
    elif isinstance(value, numbers.Real):
        try:
            value = float(value)
        except OverflowError:
            value = math.inf
        if not math.isfinite(value):
            raise DiagnosticError(f"constants: {c.name} = {value!r} is not a finite number; a "
                                  "constant must be finite (write inf or -inf in the kernel text "
                                  "where one is meant)", c.span)
    else:
        raise DiagnosticError(f"constants: {c.name} must be a number or a bool, got "
                              f"{type(value).__name__} {value!r}", c.span)
    want, got = kind_of(default), kind_of(value)
    if want == got or (want == "float" and got == "int"):
        if want == "float" and got == "int" and abs(value) > 2**128:
            raise DiagnosticError(f"constants: {c.name} = {value} does not fit in a float", c.span)
        return float(value) if want == "float" else value
    raise DiagnosticError(f"constants: {c.name} is {'an' if want == 'int' else 'a'} {want} "
                          f"(default {show(default)}), got {show(value)}", c.span)


def _refuse_fp8_registers(body: Block) -> None:
    """fp8 stays in global tensors and shared tiles: neither GPU backend has fp8 register tiles or
    vectors, so one is refused here, where it is written, rather than at the PTX stage."""
    pending = [body]
    while pending:
        for op in pending.pop().ops:
            pending += op.regions
            for r in op.results:
                t = r.type
                if getattr(t, "dtype", None) in (E4M3, E5M2) and (
                        isinstance(t, VectorType) or isinstance(t, TileType) and not t.is_shared):
                    raise DiagnosticError(f"{t.dtype} values in registers ({t}) are not supported: "
                                          "keep fp8 data in global tensors and shared tiles "
                                          f"(st<{t.dtype}>), and compute in bf16 or f32", op.span)


def _named_dims(params: list[Value]) -> list[str]:
    seen: list[str] = []
    for p in params:
        if isinstance(p.type, GlobalType):
            seen += [d for d in p.type.dims if isinstance(d, str) and d not in seen]
    return seen


def _block_loop(lw: Lowerer, s: ast.BlockLoop) -> None:
    if lw.depth > 0 or lw.block_loop is not None:
        lw.nested_block_loop(s)
    lw.block_loop_stmt(s)


_STATEMENTS = {
    ast.ConstDecl: Lowerer.const_decl,
    ast.Let: Lowerer.let,
    ast.Assign: Lowerer.assign,
    ast.Store: Lowerer.store,
    ast.ForRange: Lowerer.for_range,
    ast.If: Lowerer.if_stmt,
    ast.BlockLoop: _block_loop,
}


def lower(kernel: ast.Kernel, constants: Optional[dict] = None) -> Kernel:
    """Lower a parsed kernel to tile IR (not yet verified; see ``lower_source``)."""
    return Lowerer(kernel, constants).kernel()

