"""Kernel text → AST (``ast.py``): the lark LALR parser, its newline rules, and the tree builder.

Syntax errors become ``DiagnosticError`` at the offending token (see ``syntax_errors.py``).
"""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Iterator

from .._lark import lark
from lark import Token, Transformer, v_args

from ..errors import DiagnosticError
from ..source import Source, Span
from . import ast

_OPENERS = {"LPAR", "LSQB"}
_CLOSERS = {"RPAR", "RSQB"}
MAX_NESTING = 100
"""Brackets, braces and prefix operators open at once, at most: deeper text is refused at the
token that goes past the limit (the tree builder and the lowering recurse once per level, and
Python's stack ends near 1,000 frames; real kernels nest about ten deep)."""
MAX_INT_DIGITS = 100
"""An integer literal's digits, at most (Python refuses to convert more than 4,300)."""


class _TooDeep(Exception):
    """Raised by the post-lexer at the token that nests past MAX_NESTING."""

    def __init__(self, token: Token):
        super().__init__()
        self.token = token


class _Newlines:
    """Post-lexer: a newline ends a statement except inside (), [], the kernel's <...> list,
    and just before ``else``; runs of newlines count once."""

    always_accept = ("_NL",)

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        depth = 0
        in_kernel_consts = False
        recent: list[str] = []  # the types of the last two tokens passed on
        pending: Token | None = None
        nesting = prefix = 0  # open brackets and braces; the current run of prefix operators
        for tok in stream:
            if tok.type in ("LPAR", "LSQB", "LBRACE"):
                nesting += 1
            elif tok.type in ("RPAR", "RSQB", "RBRACE"):
                nesting = max(0, nesting - 1)
            prefix = prefix + 1 if tok.type in ("MINUS", "BANG") else 0
            if nesting + prefix > MAX_NESTING:
                raise _TooDeep(tok)
            if tok.type == "_NL":
                if depth == 0 and not in_kernel_consts and pending is None:
                    pending = tok
                continue
            if tok.type in _OPENERS:
                depth += 1
            elif tok.type in _CLOSERS:
                depth = max(0, depth - 1)
            elif tok.type == "LESSTHAN" and recent[-2:] == ["KERNEL", "NAME"]:
                in_kernel_consts = True
            elif tok.type == "MORETHAN" and in_kernel_consts and depth == 0:
                in_kernel_consts = False
            if pending is not None and tok.type != "ELSE":
                yield pending
            pending = None
            recent = (recent + [tok.type])[-2:]
            yield tok
        if pending is not None:
            yield pending


@functools.lru_cache(maxsize=1)
def _lark() -> lark.Lark:
    from ..lark_cache import cached_lark  # the built tables are kept in tkjit's cache directory
    grammar = (Path(__file__).parent / "grammar.lark").read_text()
    return cached_lark(grammar, parser="lalr", lexer="basic", postlex=_Newlines(),
                       propagate_positions=True, maybe_placeholders=True)


_BINARY = {"or_op": "||", "and_op": "&&", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">",
           "ge": ">=", "add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%"}


class _Args(tuple):
    """The argument list of a call (kept apart from other children)."""


class _ConstParams(tuple):
    """The ``<...>`` list of a kernel."""


class _Body(tuple):
    """The statements of a ``{ ... }`` block."""


class _Schedule(tuple):
    """The arguments of ``schedule(...)``."""


@v_args(meta=True)
class _Builder(Transformer):
    """lark tree → AST, attaching a span to every node."""

    def __init__(self, source: Source):
        super().__init__(visit_tokens=False)
        self.src = source

    def _span(self, meta) -> Span:
        if getattr(meta, "empty", True):
            return self.src.span(0, 0)
        return Span(self.src, meta.start_pos, meta.end_pos)

    def _tok(self, tok: Token) -> Span:
        return Span(self.src, tok.start_pos, tok.end_pos)

    # -- kernel -------------------------------------------------------------------------
    def start(self, meta, children):
        return children[0]

    def kernel(self, meta, children):
        annotations = tuple(c for c in children if isinstance(c, ast.Annotation))
        name = next(c for c in children if isinstance(c, Token))
        consts = next((c for c in children if isinstance(c, _ConstParams)), _ConstParams())
        params = tuple(c for c in children if isinstance(c, ast.Param))
        body = next(c for c in children if isinstance(c, _Body))
        return ast.Kernel(self._span(meta), str(name), self._tok(name), annotations, tuple(consts),
                          params, tuple(body))

    def const_params(self, meta, children):
        return _ConstParams(children)

    def const_param(self, meta, children):
        name, value = children
        return ast.ConstParam(self._span(meta), str(name), value)

    def param(self, meta, children):
        name, type_ = children
        return ast.Param(self._span(meta), str(name), type_)

    def scalar_type(self, meta, children):
        return ast.ScalarTypeExpr(self._span(meta), str(children[0]))

    def shaped_type(self, meta, children):
        kind, dtype, *rest = children
        attrs = tuple(c for c in rest if isinstance(c, ast.TypeAttr))
        dims = tuple(c for c in rest if not isinstance(c, ast.TypeAttr))
        return ast.ShapedTypeExpr(self._span(meta), str(kind), self._tok(kind), str(dtype),
                                  self._tok(dtype), attrs, dims)

    def type_attr(self, meta, children):
        key, value = children
        return ast.TypeAttr(self._span(meta), str(key), str(value))

    def annotation(self, meta, children):
        tok = children[0]
        args = children[1] if len(children) > 1 else ()
        return ast.Annotation(self._span(meta), str(tok)[1:], tuple(args))

    # -- statements ---------------------------------------------------------------------
    def body(self, meta, children):
        return _Body(children)

    def annotated(self, meta, children):
        *annotations, stmt = children
        return _replace_annotations(stmt, tuple(annotations))

    def const_decl(self, meta, children):
        return ast.ConstDecl(self._span(meta), tuple(children))

    def const_item(self, meta, children):
        name, value = children
        return ast.ConstItem(self._span(meta), str(name), value)

    def let(self, meta, children):
        name, type_, value = children
        return ast.Let(self._span(meta), str(name), self._tok(name), type_, value)

    def assign(self, meta, children):
        name, value = children
        return ast.Assign(self._span(meta), str(name), self._tok(name), value)

    def store(self, meta, children):
        target, method, args, value = children
        return ast.Store(self._span(meta), str(target), self._tok(target), str(method),
                         self._tok(method), tuple(args), value)

    def for_range(self, meta, children):
        var, lo, hi, step, body = children
        return ast.ForRange(self._span(meta), str(var), self._tok(var), lo, hi, step, tuple(body))

    def block_loop(self, meta, children):
        names = tuple(ast.Name(self._tok(c), str(c)) for c in children if isinstance(c, Token))
        counts = next(c for c in children if isinstance(c, _Args))
        schedule = next((c for c in children if isinstance(c, _Schedule)), ())
        body = next(c for c in children if isinstance(c, _Body))
        return ast.BlockLoop(self._span(meta), names, tuple(counts), tuple(schedule), tuple(body))

    def schedule(self, meta, children):
        return _Schedule(children)

    def sched_arg(self, meta, children):
        name, value = children
        return ast.SchedArg(self._span(meta), str(name), value)

    def if_stmt(self, meta, children):
        cond, then, orelse = children
        if isinstance(orelse, ast.If):
            orelse = (orelse,)
        return ast.If(self._span(meta), cond, tuple(then),
                      None if orelse is None else tuple(orelse))

    # -- expressions --------------------------------------------------------------------
    def args(self, meta, children):
        return _Args(children)

    def int_lit(self, meta, children):
        digits = str(children[0])
        if len(digits) > MAX_INT_DIGITS:
            raise DiagnosticError(f"an integer literal of {len(digits)} digits: at most "
                                  f"{MAX_INT_DIGITS} are read", self._span(meta))
        return ast.Num(self._span(meta), int(digits))

    def float_lit(self, meta, children):
        return ast.Num(self._span(meta), float(children[0]))

    def true_lit(self, meta, children):
        return ast.Bool(self._span(meta), True)

    def false_lit(self, meta, children):
        return ast.Bool(self._span(meta), False)

    def name(self, meta, children):
        return ast.Name(self._span(meta), str(children[0]))

    def call(self, meta, children):
        name, args = children
        return ast.Call(self._span(meta), str(name), self._tok(name), tuple(args))

    def generic_call(self, meta, children):
        tok, args = children  # GENERIC is `name <T>` (maybe with blanks) up to the '('
        text = str(tok)
        lt, gt = text.index("<"), text.index(">")
        func = text[:lt].rstrip()
        inside = text[lt + 1:gt]
        type_arg = inside.strip()
        type_start = tok.start_pos + lt + 1 + len(inside) - len(inside.lstrip())
        func_span = Span(self.src, tok.start_pos, tok.start_pos + len(func))
        type_span = Span(self.src, type_start, type_start + len(type_arg))
        return ast.Call(self._span(meta), func, func_span, tuple(args), type_arg, type_span)

    def method(self, meta, children):
        obj, name, args = children
        return ast.Method(self._span(meta), obj, str(name), self._tok(name), tuple(args))

    def neg(self, meta, children):
        return ast.Unary(self._span(meta), "-", children[0])

    def not_op(self, meta, children):
        return ast.Unary(self._span(meta), "!", children[0])

    def __default__(self, data, children, meta):
        if data in _BINARY:
            lhs, rhs = children
            return ast.Binary(self._span(meta), _BINARY[data], lhs, rhs)
        raise AssertionError(f"no AST builder for grammar rule '{data}'")


def _replace_annotations(stmt: ast.Stmt, annotations: tuple[ast.Annotation, ...]) -> ast.Stmt:
    return dataclasses.replace(stmt, annotations=annotations)


def parse(text: str, filename: str = "<string>") -> ast.Kernel:
    """Parse one kernel. Raises ``DiagnosticError`` at the offending token on a syntax error."""
    source = Source(text, filename)
    parser = _lark()
    try:
        tree = parser.parse(text)
    except _TooDeep as err:
        tok = err.token
        raise DiagnosticError(f"nested too deeply: more than {MAX_NESTING} brackets, braces and "
                              "prefix operators open at once", Span(source, tok.start_pos, tok.end_pos)) from None
    except lark.exceptions.UnexpectedInput as err:
        from .syntax_errors import syntax_error  # imported by the first syntax error only
        raise syntax_error(err, source) from None
    except lark.exceptions.LarkError as err:  # pragma: no cover - lark's own failures
        raise DiagnosticError(f"cannot parse the kernel: {err}", source.span(0)) from None
    try:
        return _Builder(source).transform(tree)
    except RecursionError:
        raise too_deep(source, _deepest_start(tree)) from None
    except lark.exceptions.VisitError as err:  # lark wraps what a builder method raises
        if isinstance(err.orig_exc, DiagnosticError):
            raise err.orig_exc from None
        if isinstance(err.orig_exc, RecursionError):
            meta = getattr(err.obj, "meta", None)
            start = getattr(meta, "start_pos", None) if not getattr(meta, "empty", True) else None
            raise too_deep(source, start) from None
        raise


def _deepest_start(tree) -> int | None:
    """Where the deepest node of a parse tree starts (found without recursing)."""
    best, best_depth = None, -1
    pending = [(tree, 0)]
    while pending:
        node, depth = pending.pop()
        meta = getattr(node, "meta", None)
        if meta is not None and not getattr(meta, "empty", True) and depth > best_depth:
            best, best_depth = meta.start_pos, depth
        pending += [(c, depth + 1) for c in getattr(node, "children", ()) if hasattr(c, "children")]
    return best


def too_deep(source: Source, start: int | None = None) -> DiagnosticError:
    """The kernel (or, with ``start``, the expression there) recursed past Python's stack."""
    span = source.span(0) if start is None else source.span(start)
    return DiagnosticError("the kernel is nested too deeply to compile (an expression or blocks "
                           "hundreds of levels deep)", span)
