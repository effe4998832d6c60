"""The decision log: what each pass decided, about what, and why.

A pass records through its context (``ctx.decide(subject, decision, reason, **data)``); the log
renders as text for ``kernel.explain()`` and as JSON for dumps and cache metadata.

    canonicalize
      @gemm: folded 3 scalar ops into constants
          because every operand was a constant
      if at gemm.tk:12:5: kept the then region
          because the condition is the constant true
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import TkError
from ..frozen import Frozen
from ..ir.core import Op, Value


@dataclass(unsafe_hash=True)
class Decision(Frozen):
    """One decision of a pass: about what, what was decided, why, and its data."""

    pass_name: str
    subject: str
    """What the decision is about: ``@gemm``, ``%a``, ``for at gemm.tk:8:5``."""
    decision: str
    reason: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    """Structured detail for tools (JSON values only)."""

    def to_json(self) -> dict:
        return {"pass": self.pass_name, "subject": self.subject, "decision": self.decision,
                "reason": self.reason, "data": self.data}

    @staticmethod
    def from_json(obj: dict) -> "Decision":
        return Decision(obj["pass"], obj["subject"], obj["decision"], obj.get("reason", ""),
                        dict(obj.get("data", {})))


class DecisionLog:
    """An append-only list of decisions, in the order the passes made them."""

    def __init__(self, decisions: list[Decision] | None = None):
        self.decisions: list[Decision] = list(decisions or [])

    def record(self, pass_name: str, subject: str, decision: str, reason: str = "",
               **data: Any) -> Decision:
        try:
            json.dumps(data, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise TkError(f"decision data of pass '{pass_name}' is not JSON: {e}") from None
        entry = Decision(pass_name, subject, decision, reason, data)
        self.decisions.append(entry)
        return entry

    def for_pass(self, pass_name: str) -> list[Decision]:
        return [d for d in self.decisions if d.pass_name == pass_name]

    def __iter__(self):
        return iter(self.decisions)

    def __len__(self) -> int:
        return len(self.decisions)

    def render(self) -> str:
        """Readable text, grouped under each pass in the order the passes ran."""
        if not self.decisions:
            return "no decisions were recorded\n"
        lines: list[str] = []
        current = None
        for d in self.decisions:
            if d.pass_name != current:
                current = d.pass_name
                lines.append(current)
            lines.append(f"  {d.subject}: {d.decision}")
            if d.reason:
                lines.append(f"      because {d.reason}")
        return "\n".join(lines) + "\n"

    def to_json(self) -> list[dict]:
        return [d.to_json() for d in self.decisions]

    def to_json_text(self) -> str:
        return json.dumps(self.to_json(), indent=2) + "\n"

    @staticmethod
    def from_json(items: list[dict]) -> "DecisionLog":
        return DecisionLog([Decision.from_json(item) for item in items])


def subject_of(thing: Op | Value) -> str:
    """A short name for a decision's subject: ``%acc`` for a value, ``for at gemm.tk:8:5``
    (or ``for %acc.1`` without a source position) for an op."""
    if isinstance(thing, Value):
        return f"%{thing.hint}" if thing.hint else f"a value of type {thing.type}"
    if thing.span is not None:
        return f"{thing.NAME} at {thing.span.location()}"
    named = [r for r in thing.results if r.hint]
    return f"{thing.NAME} %{named[0].hint}" if named else thing.NAME
