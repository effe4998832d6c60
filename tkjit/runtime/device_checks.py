"""Checked mode on the GPU: the error buffer a checked launch passes, and the error it reports.

A kernel compiled with ``checked=True`` has ``check`` ops (passes/checks.py); its PTX takes one
more ``.u64`` parameter after the kernel's own (before the named dims): ``CHECK_WORDS`` i32
words, zeroed before the launch. The first thread whose check fails swaps word 0 from 0 to 1
(``atom.cas``), then writes the check's id to word 1 and its values to words 2...; the others
leave it. After the launch the kernel object synchronizes, reads the buffer and raises
``CheckError``: the interpreter's message (the check's template, ir/ops/check.py) at the kernel's
line:col. The metadata ``device_checks`` lists each check's template and span by id.
"""
from __future__ import annotations

from ..errors import CheckError
from ..source import Source

CHECK_PARAM = "__checks"
"""The error buffer's name among the metadata's params (the launcher checks it like a tensor)."""
CHECK_WORDS = 8
"""status, check id, up to MAX_VALUES values, padding: 32 bytes."""


def buffer_param() -> dict:
    """The error buffer's metadata entry (a written i32 tensor of CHECK_WORDS elements)."""
    return {"kind": "global", "name": CHECK_PARAM, "dtype": "i32", "dims": [CHECK_WORDS], "writes": True}


def checks_metadata(kernel) -> list[dict]:
    """Per check op of ``kernel`` (IR), by id: its message template and its span's offsets."""
    from ..ir.ops.check import Check
    found = sorted((op for op in kernel.walk() if isinstance(op, Check)), key=lambda op: op.attrs["id"])
    return [{"id": op.attrs["id"], "message": op.attrs["message"],
             "span": [op.span.start, op.span.end] if op.span is not None else None} for op in found]


def check_error(words, checks: list[dict], source: str, filename: str) -> CheckError | None:
    """The error the buffer's ``words`` report (None when no check failed)."""
    from ..ir.ops.check import render
    words = [int(w) for w in words]
    if words[0] == 0:
        return None
    by_id = {c["id"]: c for c in checks}
    entry = by_id.get(words[1])
    if entry is None:
        return CheckError(f"a run-time check failed, but its id {words[1]} names no check of the kernel")
    span = Source(source, filename).span(*entry["span"]) if entry.get("span") else None
    return CheckError(render(entry["message"], words[2:]), span)
