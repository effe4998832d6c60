"""Token-level mutation of kernel text and of textual IR, for fuzzing the front end and the
IR parser (tests/test_fuzz_frontend.py, benchmarks/fuzz_frontend.py).

Mutations delete, duplicate, swap or replace tokens, drawing replacements from a pool of the
inputs' own tokens and the language's punctuation, so most mutants are nearly valid kernels that
reach deep into the lowering. Whitespace and comments are kept as they are. The choices come
from a ``Chooser`` (``random.Random`` or a hypothesis ``data`` object), so the same code serves
a derandomized hypothesis test and a seeded long run.
"""
from __future__ import annotations

import random
import re
from typing import Callable, Sequence

# Kernel language: whitespace/comments (kept) and tokens (mutated).
KERNEL_PIECE = re.compile(r"\s+|#[^\n]*|[A-Za-z_]\w*|\d+\.?\d*(?:[eE][+-]?\d+)?|\.\.|//|&&|\|\|"
                          r"|[=!<>]=|\S")
KERNEL_PUNCTUATION = ["(", ")", "[", "]", "{", "}", "<", ">", ",", ";", ":", "=", ".", "..", "+", "-",
                      "*", "/", "//", "%", "==", "!=", "<=", ">=", "&&", "||", "!", "@", "\n", "0",
                      "1", "16", "-1", "1e9", "2147483648", "0.5", "true", "false", "inf", "nan"]
# Textual IR: %values, @kernels, ^blocks, "strings", names with dots (dtype attrs, op names).
IR_PIECE = re.compile(r"\s+|%[\w.]+|@[\w.]+|\^|\"[^\"\n]*\"|[A-Za-z_][\w.]*"
                      r"|-?\d+\.?\d*(?:[eE][+-]?\d+)?|->|\S")
IR_PUNCTUATION = ["(", ")", "[", "]", "{", "}", "<", ">", ",", ":", "=", "^", "%0", "%c0", "%x",
                  "0", "1", "-1", "16", "128", "2147483648", "1e40", "nan", "\"\"", "\"R\"",
                  "i32", "f32", "bool", "bf16", "f16", "e4m3", "rt", "st", "cv", "rv", "gl",
                  "yield", "for", "if", "blocks", "\n"]

KINDS = ["delete", "duplicate", "swap", "replace", "insert", "replace-alike", "replace-alike"]
DEEP_KINDS = ["replace-alike", "perturb-number", "perturb-number"]
"""Mutations that keep most kernels parseable: they reach the lowering, the passes and the backends."""


class Chooser:
    """Where a mutation's choices come from."""

    def __init__(self, pick: Callable[[Sequence, str], object], integer: Callable[[int, int, str], int]):
        self.pick, self.integer = pick, integer

    @staticmethod
    def seeded(rng: random.Random) -> "Chooser":
        return Chooser(lambda seq, label: rng.choice(list(seq)), lambda lo, hi, label: rng.randint(lo, hi))


def is_token(piece: str) -> bool:
    return not piece.isspace() and not piece.startswith("#")


def token_class(token: str) -> str:
    c = token[:1]
    if c.isalpha() or c == "_":
        return "name"
    if c == "%":
        return "value"
    return "number" if c.isdigit() or (c == "-" and token[1:2].isdigit()) else "punctuation"


class Mutator:
    """Splits texts into pieces and mutates them; ``pool`` holds every token of the given
    texts plus the extra punctuation."""

    def __init__(self, texts: Sequence[str], piece: re.Pattern = KERNEL_PIECE,
                 punctuation: Sequence[str] = KERNEL_PUNCTUATION):
        self.piece = piece
        self.pool = sorted({p for text in texts for p in self.pieces(text) if is_token(p)} | set(punctuation))
        classes = {token_class(t) for t in self.pool}
        self.by_class = {cls: [t for t in self.pool if token_class(t) == cls] for cls in classes}

    def pieces(self, text: str) -> list[str]:
        return self.piece.findall(text)

    def mutate(self, text: str, choose: Chooser, max_mutations: int = 3, kinds: Sequence[str] = KINDS) -> str:
        """1 to ``max_mutations`` mutations. 'replace-alike' swaps a name for a name, a number for
        a number, which keeps most mutants parseable so that they reach the lowering's checks."""
        out = self.pieces(text)
        for _ in range(choose.integer(1, max_mutations, "mutations")):
            tokens = [i for i, p in enumerate(out) if is_token(p)]
            if not tokens:
                break
            i = choose.pick(tokens, "at")
            kind = choose.pick(kinds, "kind")
            if kind == "perturb-number":  # a number near this one (tile sizes, indices, constants)
                numbers = [j for j in tokens if out[j].isdigit()]
                if numbers:
                    j = choose.pick(numbers, "number")
                    n = int(out[j])
                    out[j] = str(choose.pick([n * 2, n // 2, n + 16, max(n - 16, 0), n + 1, 0, 1, 8, 24], "to"))
                    continue
                kind = "replace-alike"
            if kind == "replace-alike":
                alike = self.by_class.get(token_class(out[i])) or self.pool
                out[i] = choose.pick(alike, "by")
            elif kind == "delete":
                out[i] = ""
            elif kind == "duplicate":
                out[i] = out[i] + " " + out[i]
            elif kind == "swap":
                j = choose.pick(tokens, "with")
                out[i], out[j] = out[j], out[i]
            elif kind == "replace":
                out[i] = choose.pick(self.pool, "by")
            else:
                out[i] = choose.pick(self.pool, "insert") + " " + out[i]
        return "".join(out)
