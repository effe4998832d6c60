"""Kernel source text and spans into it: the positions every diagnostic points at."""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from .frozen import Frozen


@dataclass(eq=False)
class Source(Frozen):
    """A kernel's text and the name it is reported under (a file name or ``<string>``)."""

    text: str
    filename: str = "<string>"
    _line_starts: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        starts = [0]
        for i, ch in enumerate(self.text):
            if ch == "\n":
                starts.append(i + 1)
        object.__setattr__(self, "_line_starts", tuple(starts))

    def line_col(self, offset: int) -> tuple[int, int]:
        """1-based line and column of a character offset."""
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self._line_starts, offset) - 1
        return line + 1, offset - self._line_starts[line] + 1

    def line_text(self, line: int) -> str:
        start = self._line_starts[line - 1]
        end = self.text.find("\n", start)
        return self.text[start:] if end < 0 else self.text[start:end]

    def span(self, start: int, end: int | None = None) -> "Span":
        return Span(self, start, start + 1 if end is None else end)


@dataclass(unsafe_hash=True)
class Span(Frozen):
    """A half-open character range [start, end) of a Source."""

    source: Source
    start: int
    end: int

    @property
    def line(self) -> int:
        return self.source.line_col(self.start)[0]

    @property
    def col(self) -> int:
        return self.source.line_col(self.start)[1]

    def location(self) -> str:
        return f"{self.source.filename}:{self.line}:{self.col}"

    def render(self, message: str, severity: str = "error") -> str:
        """``file:line:col: error: message``, then the source line and carets under the span."""
        line, col = self.line, self.col
        text = self.source.line_text(line)
        end_line, end_col = self.source.line_col(max(self.start, self.end - 1))
        width = (end_col - col + 1) if end_line == line else len(text) - col + 1
        width = max(1, width)
        caret = " " * (col - 1) + "^" + "~" * (width - 1)
        return f"{self.location()}: {severity}: {message}\n    {text}\n    {caret}"

    def merge(self, other: "Span | None") -> "Span":
        if other is None or other.source is not self.source:
            return self
        return Span(self.source, min(self.start, other.start), max(self.end, other.end))
