"""Parse textual tile IR (as printed by ``printer.py``) back into kernels, then verify them."""
from __future__ import annotations

import functools
from pathlib import Path

from .._lark import lark

from ..errors import DiagnosticError
from ..source import Source, Span
from .core import Block, Kernel, Op, Value
from .ops import OPS
from .types import DTYPES, GlobalType, ScalarType, TileType, Type, VectorType


@functools.lru_cache(maxsize=1)
def _lark() -> lark.Lark:
    from ..lark_cache import cached_lark  # the built tables are kept in tkjit's cache directory
    grammar = (Path(__file__).parent / "ir.lark").read_text()
    return cached_lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=True)


class _IRBuilder:
    def __init__(self, source: Source):
        self.src = source
        self.scopes: list[dict[str, Value]] = []

    def span(self, node) -> Span | None:
        meta = getattr(node, "meta", None)
        if meta is None or getattr(meta, "empty", True):
            if isinstance(node, lark.Token) and node.start_pos is not None:
                return self.src.span(node.start_pos, node.end_pos)
            return None
        return self.src.span(meta.start_pos, meta.end_pos)

    def fail(self, msg: str, node) -> DiagnosticError:
        return DiagnosticError(msg, self.span(node))

    # -- values and scopes ---------------------------------------------------------------
    def define(self, tok: lark.Token, type: Type, owner_value: Value | None = None) -> Value:
        name = str(tok)[1:]
        for scope in self.scopes:
            if name in scope:
                raise self.fail(f"%{name} is defined twice", tok)
        v = owner_value or Value(type, name)
        v.hint = name
        self.scopes[-1][name] = v
        return v

    def use(self, tok: lark.Token) -> Value:
        name = str(tok)[1:]
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        raise self.fail(f"use of undefined value %{name}", tok)

    # -- types ---------------------------------------------------------------------------
    def type(self, node) -> Type:
        if node.data == "scalar_type":
            name = str(node.children[0])
            if name not in DTYPES:
                raise self.fail(f"unknown type '{name}'", node)
            return ScalarType(DTYPES[name])
        kind_tok, dt_tok, *rest = node.children
        kind, dt = str(kind_tok), str(dt_tok)
        if dt not in DTYPES:
            raise self.fail(f"unknown dtype '{dt}'", dt_tok)
        tattrs = [c for c in rest if isinstance(c, lark.Tree) and c.data == "tattr"]
        dims = [c for c in rest if isinstance(c, lark.Tree) and c.data in ("int_dim", "name_dim")]
        attrs = tuple(sorted((str(a.children[0]), _tattr_value(a.children[1])) for a in tattrs))
        dimvals = [int(d.children[0]) if d.data == "int_dim" else str(d.children[0]) for d in dims]
        dtype = DTYPES[dt]
        if kind == "gl":
            if attrs:
                raise self.fail("global types take no attributes", node)
            return GlobalType(dtype, tuple(dimvals))
        if any(isinstance(d, str) for d in dimvals):
            raise self.fail(f"{kind} dimensions must be integers", node)
        if kind in ("st", "rt"):
            if len(dimvals) != 2:
                raise self.fail(f"a tile has 2 dimensions, got {len(dimvals)}", node)
            return TileType(kind, dtype, dimvals[0], dimvals[1], attrs)
        if kind in ("rv", "cv"):
            if len(dimvals) != 1:
                raise self.fail(f"a vector has 1 dimension, got {len(dimvals)}", node)
            return VectorType(kind, dtype, dimvals[0], attrs)
        raise self.fail(f"unknown type '{kind}' (expected gl, st, rt, rv or cv)", kind_tok)

    def attrs(self, node) -> dict:
        out: dict = {}
        if node is None:
            return out
        for a in node.children:
            if a is None:
                continue
            key, val = str(a.children[0]), a.children[1]
            if key in out:
                raise self.fail(f"attribute '{key}' given twice", a)
            out[key] = _attr_value(val)
        return out

    # -- structure -----------------------------------------------------------------------
    def kernel(self, node) -> Kernel:
        sym, *rest = [c for c in node.children if c is not None]
        params_nodes = [c for c in rest if isinstance(c, lark.Tree) and c.data == "param"]
        kattrs = next((c for c in rest if isinstance(c, lark.Tree) and c.data == "kattrs"), None)
        ops = [c for c in rest if isinstance(c, lark.Tree) and c.data == "op"]
        self.scopes = [{}]
        params = [self.define(p.children[0], self.type(p.children[1])) for p in params_nodes]
        body = Block()
        for o in ops:
            body.append(self.op(o))
        attrs = self.attrs(kattrs.children[0]) if kattrs is not None else {}
        return Kernel(str(sym)[1:], params, body, attrs, self.span(node))

    def op(self, node) -> Op:
        ch = [c for c in node.children if c is not None]
        i = 0
        results = []
        while i < len(ch) and isinstance(ch[i], lark.Token) and ch[i].type == "VALUE":
            results.append(ch[i])
            i += 1
        name_tok = ch[i]
        i += 1
        cls = OPS.get(str(name_tok))
        if cls is None:
            raise self.fail(f"unknown op '{name_tok}'", name_tok)
        attr_node = None
        if i < len(ch) and isinstance(ch[i], lark.Tree) and ch[i].data == "attrdict":
            attr_node = ch[i]
            i += 1
        operands, types, regions = [], [], []
        for c in ch[i:]:
            if c is None:
                continue
            if isinstance(c, lark.Token) and c.type == "VALUE":
                operands.append(self.use(c))
            elif isinstance(c, lark.Tree) and c.data == "region":
                regions.append(c)
            elif isinstance(c, lark.Tree):
                types.append(self.type(c))
        if len(types) != len(results):
            raise self.fail(f"{name_tok}: {len(results)} results but {len(types)} result types",
                            node)
        blocks = [self.region(r) for r in regions]
        span = self.span(node)
        try:
            op = cls(operands, self.attrs(attr_node), types, blocks, span,
                     [str(r)[1:] for r in results])
        except DiagnosticError:
            raise
        for tok, v in zip(results, op.results):
            self.define(tok, v.type, v)
        return op

    def region(self, node) -> Block:
        self.scopes.append({})
        block = Block()
        for c in node.children:
            if isinstance(c, lark.Tree) and c.data == "blockhdr":
                for p in c.children:
                    if p is not None:
                        v = self.define(p.children[0], self.type(p.children[1]))
                        block.add_arg(v.type, v.hint)
                        self.scopes[-1][v.hint] = block.args[-1]
            elif isinstance(c, lark.Tree) and c.data == "op":
                block.append(self.op(c))
        self.scopes.pop()
        return block


def _tattr_value(tok):
    s = str(tok)
    if s.isdigit():
        return int(s)
    if s in ("true", "false"):
        return s == "true"
    return s


def _attr_value(node):
    kind = node.data
    if kind == "int_val":
        return int(node.children[0])
    if kind == "float_val":
        return float(node.children[0])
    if kind == "str_val":
        import json
        return json.loads(str(node.children[0]))
    if kind == "true_val":
        return True
    if kind == "false_val":
        return False
    if kind == "special_val":
        return float(str(node.children[0]))
    if kind == "tuple_val":
        return tuple(int(c) for c in node.children if c is not None)
    raise ValueError(kind)


def parse_ir(text: str, filename: str = "<ir>", verify: bool = True) -> list[Kernel]:
    """Parse IR text into kernels (each verified unless ``verify=False``)."""
    src = Source(text, filename)
    try:
        tree = _lark().parse(text)
    except lark.exceptions.UnexpectedInput as e:
        pos = getattr(e, "pos_in_stream", None) or 0
        tok = getattr(e, "token", None)
        what = f"unexpected '{tok}'" if tok is not None and str(tok) else "unexpected input"
        if isinstance(e, lark.exceptions.UnexpectedEOF) or (tok is not None and tok.type == "$END"):
            what, pos = "unexpected end of input", len(text)
        raise DiagnosticError(f"IR syntax error: {what}", src.span(pos)) from None
    _check_nesting(tree, src)
    builder = _IRBuilder(src)
    kernels = [builder.kernel(k) for k in tree.children]
    if verify:
        from .verify import verify_kernel
        for k in kernels:
            verify_kernel(k)
    return kernels


MAX_REGION_NESTING = 100
"""Regions inside regions, at most: the builder, the verifier, the printer and the passes recurse
once per level (Python's stack ends near 1,000 frames)."""


def _check_nesting(tree, src: Source) -> None:
    """Refuse, at the region that goes past MAX_REGION_NESTING, before anything recurses."""
    pending = [(tree, 0)]
    while pending:
        node, depth = pending.pop()
        if getattr(node, "data", None) == "region":
            depth += 1
            if depth > MAX_REGION_NESTING:
                meta = node.meta
                start = 0 if getattr(meta, "empty", True) else meta.start_pos
                raise DiagnosticError(f"regions nested more than {MAX_REGION_NESTING} deep",
                                      src.span(start))
        pending += [(c, depth) for c in getattr(node, "children", ()) if hasattr(c, "children")]


def parse_kernel(text: str, filename: str = "<ir>", verify: bool = True) -> Kernel:
    ks = parse_ir(text, filename, verify)
    if len(ks) != 1:
        raise DiagnosticError(f"expected one kernel in {filename}, found {len(ks)}")
    return ks[0]
