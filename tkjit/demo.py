"""``tkjit demo``: compile every example in ``examples/`` and show what the compiler made of it.

For each ``examples/*.tk`` it prints the kernel's IR summary (parameters, named dimensions, ops
by kind, decisions) and then one table row: compiled or not, how long it took, and on which
backend it would run (the GPU when one is present, the CPU interpreter otherwise). Running the
examples is the next step: ``run_example`` is the hook for it.
"""
from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import TextIO

from .errors import TkError

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"


def find_examples(directory: Path | None = None) -> list[Path]:
    directory = directory or EXAMPLES_DIR
    return sorted(directory.glob("*.tk")) if directory.is_dir() else []


def ir_summary(kernel) -> str:
    """A few lines about a compiled kernel: its signature, its ops by kind, its decisions."""
    from .ir.ops import Blocks
    ir = kernel.ir
    params = ", ".join(f"{p.hint}: {p.type}" for p in ir.params)
    ops = Counter(op.NAME for op in ir.walk())
    grid = next((op for op in ir.walk() if isinstance(op, Blocks)), None)
    lines = [f"kernel {kernel.name}({params})"]
    if ir.named_dims():
        lines.append(f"  runtime dimensions: {', '.join(ir.named_dims())}")
    if grid is not None:
        schedule = grid.attrs.get("schedule", "grid")
        lines.append(f"  block loop: {len(grid.variadic())}-D, schedule {schedule}")
    lines.append("  ops: " + ", ".join(f"{name} x{n}" for name, n in sorted(ops.items())))
    lines.append(f"  decisions: {len(kernel.decisions)} (see `tkjit explain`)")
    return "\n".join(lines)


def backend_here() -> str:
    try:
        from .runtime.driver import gpu_available
        return "gpu" if gpu_available() else "interpret"
    except Exception:  # noqa: BLE001 - no cuda-python, no torch: the CPU it is
        return "interpret"


def run_example(kernel, path: Path, backend: str) -> str:
    """Run one compiled example on ``backend``; returns the table's result cell.
    (Not yet: the examples' inputs and reference checks come with their drivers.)"""
    return "not run yet"


def run_demo(directory: Path | None = None, out: TextIO | None = None) -> int:
    """Compile (and, where possible, run) every example; 0 when all compiled."""
    import sys

    from .kernel import load
    out = out or sys.stdout
    examples = find_examples(directory)
    if not examples:
        print(f"no examples found in {directory or EXAMPLES_DIR}", file=out)
        return 1
    backend = backend_here()
    rows = [("example", "kernel", "compile", "ms", f"run ({backend})")]
    failures = 0
    for path in examples:
        start = time.perf_counter()
        try:
            kernel = load(path)
        except TkError as e:
            failures += 1
            ms = f"{(time.perf_counter() - start) * 1e3:.1f}"
            rows.append((path.name, "-", "failed", ms, "-"))
            print(f"{path.name}:\n{_indent(e.render())}\n", file=out)
            continue
        ms = f"{(time.perf_counter() - start) * 1e3:.1f}"
        print(f"{path.name}:\n{_indent(ir_summary(kernel))}\n", file=out)
        rows.append((path.name, kernel.name, "ok", ms, run_example(kernel, path, backend)))
    print(format_table(rows), file=out)
    return 1 if failures else 0


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def format_table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
