"""What ``kernel.explain()`` returns: the decision log as text that also knows its structure.

An ``Explanation`` is a ``str`` (the text ``tkjit explain`` prints), so ``print()``, ``in``,
``str()``, ``splitlines()`` and comparisons work as on the text. Beside that it shows itself
as that text at a Python or IPython prompt (not as a quoted string), renders as a table in a
notebook (``_repr_html_``), and gives its decisions as JSON (``to_json()``: kernel, pipeline,
decisions with pass, subject, decision, reason and data, and the notes on the code generator and
the launch path).
"""
from __future__ import annotations

import html
import json


class Explanation(str):
    """The text of a kernel's decision log, with its structure (``to_json()``)."""

    kernel: str
    pipeline: str
    decisions: list[dict]
    notes: list[str]

    def __new__(cls, text: str, *, kernel: str, pipeline: str, decisions: list[dict], notes: list[str]):
        self = super().__new__(cls, text)
        self.kernel, self.pipeline, self.decisions, self.notes = kernel, pipeline, decisions, notes
        return self

    def __repr__(self) -> str:  # a prompt shows the text, not a quoted one-line string
        return str.__str__(self).rstrip("\n")

    def __str__(self) -> str:
        return str.__str__(self)

    def _repr_pretty_(self, p, cycle: bool) -> None:  # IPython's terminal
        p.text(repr(self))

    def _repr_html_(self) -> str:  # a notebook: one row per decision, grouped by pass
        esc = html.escape
        rows = []
        for d in self.decisions:
            rows.append(f"<tr><td><code>{esc(str(d.get('pass', '')))}</code></td>"
                        f"<td><code>{esc(str(d.get('subject', '')))}</code></td>"
                        f"<td>{esc(str(d.get('decision', '')))}</td>"
                        f"<td style='color:#555'>{esc(str(d.get('reason', '')))}</td></tr>")
        notes = "".join(f"<p>{esc(n)}</p>" for n in self.notes)
        return (f"<div class='tkjit-explain'><p><b>kernel <code>{esc(self.kernel)}</code></b>, pipeline "
                f"<code>{esc(self.pipeline)}</code></p>"
                "<table><thead><tr><th>pass</th><th>subject</th><th>decision</th><th>because</th></tr></thead>"
                f"<tbody>{''.join(rows)}</tbody></table>{notes}</div>")

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "pipeline": self.pipeline, "decisions": self.decisions,
                "notes": list(self.notes)}

    def to_json_text(self) -> str:
        return json.dumps(self.to_json(), indent=2, default=str) + "\n"

    def __reduce__(self):  # pickles (and copies) as the plain text
        return (str, (str.__str__(self),))
