"""lark's parse errors → a kernel author's syntax diagnostics, in human terms.

    expected ',' or ')' to close the call opened at 7:12, got 'acc'
    unexpected end of kernel: missing '}' to close the '{' opened at 3:51
    expected an operator or the end of the statement, got 'b'
"""
from __future__ import annotations

import re

from .._lark import lark

from ..errors import DiagnosticError
from ..source import Source, Span

_NAMED = {
    "NAME": "a name", "INT": "an integer", "FLOAT": "a number", "GENERIC": "a call",
    "ANNOTATION": "an annotation", "SIZE": "a size such as 128B", "_NL": "a new line",
    "$END": "the end of the kernel",
}
_EXPR_START = {"NAME", "INT", "FLOAT", "GENERIC", "LPAR", "MINUS", "BANG", "TRUE", "FALSE"}
_STMT_START = {"NAME", "CONST", "FOR", "IF", "ANNOTATION"}
_END_OF_STMT = {"_NL", "SEMICOLON"}
_OPERATORS = {"||", "&&", "==", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "//", "%"}
_COMPARISONS = {"==", "!=", "<", "<=", ">", ">="}
_CLOSER = {"(": ")", "[": "]", "{": "}"}
_CLOSER_TERMINAL = {"(": "RPAR", "[": "RSQB", "{": "RBRACE"}


def syntax_error(err: lark.exceptions.UnexpectedInput, source: Source) -> DiagnosticError:
    if isinstance(err, lark.exceptions.UnexpectedCharacters):
        return _bad_character(err, source)
    tok = getattr(err, "token", None)
    if isinstance(err, lark.exceptions.UnexpectedEOF) or tok is None or tok.type == "$END":
        return _end_of_kernel(err, source)
    expected = set(getattr(err, "accepts", None) or getattr(err, "expected", None) or ())
    span = Span(source, tok.start_pos, max(tok.end_pos, tok.start_pos + 1))
    return DiagnosticError(_unexpected_token(err, tok, expected, source), span)


def _bad_character(err, source: Source) -> DiagnosticError:
    pos = err.pos_in_stream
    ch = source.text[pos] if 0 <= pos < len(source.text) else "?"
    message = f"unexpected character {ch!r}"
    if ch in "\"'":
        message += ": the kernel language has no strings"
    elif ch == "@":
        message += ": an annotation is '@' and a name, as in @stages(4)"
    return DiagnosticError(message, source.span(pos))


def _end_of_kernel(err, source: Source) -> DiagnosticError:
    end = len(source.text.rstrip())
    span = source.span(max(0, end - 1), max(1, end))
    stack = _open_brackets(source.text, len(source.text))
    if stack:
        ch, pos = stack[-1]
        line, col = source.line_col(pos)
        return DiagnosticError(f"unexpected end of kernel: missing '{_CLOSER[ch]}' to close the "
                               f"'{ch}' opened at {line}:{col}", span)
    expected = set(getattr(err, "accepts", None) or getattr(err, "expected", None) or ())
    if not source.text.strip():
        return DiagnosticError("empty source: expected a kernel, as in `kernel k(...) { ... }`",
                               source.span(0))
    return DiagnosticError(f"unexpected end of kernel: expected {_describe(expected)}", span)


def _previous_token(err) -> str | None:
    """The type of the token the parser read last (None when it cannot tell)."""
    parser = getattr(err, "interactive_parser", None)
    stack = getattr(getattr(parser, "parser_state", None), "value_stack", None) or []
    last = stack[-1] if stack else None
    return last.type if isinstance(last, lark.Token) else None


def _unexpected_token(err, tok, expected: set[str], source: Source) -> str:
    got = _describe_token(tok)
    stack = _open_brackets(source.text, tok.start_pos)
    if stack and stack[-1][0] in "([" and _CLOSER_TERMINAL[stack[-1][0]] in expected:
        ch, pos = stack[-1]
        line, col = source.line_col(pos)
        what = _bracket_kind(source.text, pos)
        closer = f"'{_CLOSER[ch]}'"
        alts = f"',' or {closer}" if "COMMA" in expected else closer
        return f"expected {alts} to close {what} opened at {line}:{col}, got {got}"
    if tok.type == "LPAR" and expected and expected <= {"COLON", "EQUAL", "DOT"}:
        return ("expected '=' or ':' after the name, got '(': a call alone is not a statement; "
                "bind its result, as in `x = f(...)`")
    if expected == {"NAME"} and _previous_token(err) == "COLON":
        return ("expected a type (f32, i32, bool, or a tile type such as rt<f32>[64, 64]), "
                f"got {got}")
    if expected and expected <= {"_NL", "SEMICOLON", "$END"}:
        if tok.type in ("KERNEL", "ANNOTATION"):
            return f"expected the end of the kernel, got {got}: one kernel per source"
        return f"expected the end of the kernel, got {got}"
    message = f"expected {_describe(expected)}, got {got}"
    lit = _literal(tok.type)
    if tok.type == "EQUAL" and any(_literal(t) == "==" for t in expected):
        message += " (did you mean '=='?)"
    elif lit is not None and lit.isalpha() and "NAME" in expected:
        message += f": '{lit}' is a keyword and cannot be a name"
    elif lit in _COMPARISONS and _after_expression(expected) \
            and not any(_literal(t) in _COMPARISONS for t in expected):
        message += ": comparisons do not chain; combine them with &&"
    return message


def _after_expression(expected: set[str]) -> bool:
    """Whether the parser stands after a complete operand (it would take a binary operator)."""
    return sum(_literal(t) in _OPERATORS for t in expected) >= 3


def _describe(expected: set[str]) -> str:
    """A phrase for what the parser would have accepted, grouping terminals into categories."""
    rest = set(expected)
    items: list[str] = []
    if {"FOR", "IF", "CONST"} <= rest:
        items.append("a statement")
        rest -= _STMT_START | _END_OF_STMT
    if {"NAME", "INT"} <= rest:
        items.append("an expression")
        rest -= _EXPR_START
    operators = {t for t in rest if _literal(t) in _OPERATORS}
    if _after_expression(rest):
        items.append("an operator")
        rest -= operators | {"DOT", "LPAR"}
    if rest & _END_OF_STMT:
        items.append("the end of the statement")
        rest -= _END_OF_STMT | {"RBRACE"}
    items += sorted(_describe_terminal(t) for t in rest)
    if not items:
        return "something else"
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def _describe_terminal(name: str) -> str:
    if name in _NAMED:
        return _NAMED[name]
    lit = _literal(name)
    return f"'{lit}'" if lit is not None else name.lower()


def _describe_token(tok) -> str:
    if tok.type == "_NL":
        return "the end of the line"
    lit = _literal(tok.type)
    if lit is not None and lit.isalpha():
        return f"the keyword '{tok}'"
    return f"'{tok}'"


def _literal(terminal: str) -> str | None:
    """The text of a literal terminal ('RPAR' → ')'), None for patterns such as NAME."""
    from .parser import _lark
    try:
        pattern = _lark().get_terminal(terminal).pattern
    except KeyError:
        return None
    return pattern.value if isinstance(pattern, lark.lexer.PatternStr) else None


_KERNEL_HEAD = re.compile(r"\bkernel\s+\w+\s*(<[^>]*>)?\s*$")


def _bracket_kind(text: str, pos: int) -> str:
    """What the bracket at ``pos`` opens, in words: the parameter list, a call, ..."""
    before = text[:pos]
    if text[pos] == "(" and _KERNEL_HEAD.search(before):
        return "the parameter list"
    stripped = before.rstrip(" \t")
    if text[pos] == "(" and stripped and (stripped[-1].isalnum() or stripped[-1] in "_>"):
        return "the call"
    return f"the '{text[pos]}'"


def _open_brackets(text: str, end: int) -> list[tuple[str, int]]:
    """The brackets still open at ``end``: (character, offset), innermost last. Skips comments."""
    stack: list[tuple[str, int]] = []
    i = 0
    while i < end:
        ch = text[i]
        if ch == "#":
            nl = text.find("\n", i)
            i = end if nl < 0 else nl
            continue
        if ch in _CLOSER:
            stack.append((ch, i))
        elif ch in ")]}" and stack:
            stack.pop()
        i += 1
    return stack
