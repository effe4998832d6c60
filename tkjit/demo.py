"""``tkjit demo``: compile every example in ``examples/``, run it, and check it against PyTorch.

For each ``examples/*.tk`` it prints the kernel's IR summary (parameters, named dimensions, ops
by kind, decisions), then runs the example's driver (``examples/<name>.py``: fresh random
inputs, poisoned outputs, a PyTorch reference) on the GPU when one is present and on the CPU
interpreter otherwise, and ends with a table: kernel, shape, relative error, ok.
"""
from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import TextIO

from .errors import TkError

def _examples_dir() -> Path:
    """tkjit/examples in a regular install (setup.py ships examples/ there), else the source
    checkout's examples/ (an editable install, or running from the repository)."""
    here = Path(__file__).resolve().parent
    shipped = here / "examples"
    return shipped if shipped.is_dir() else here.parent / "examples"


EXAMPLES_DIR = _examples_dir()


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


TOLERANCE = 1e-2  # relative error allowed against the reference (bf16 inputs and outputs)

# Extra configurations a driver is run with beyond its defaults (keyword arguments of check()).
VARIANTS = {"attention": [{}, {"causal": True}, {"causal": True, "d": 64}],
            "attention_nol": [{}, {"causal": True}]}


def run_example(path: Path, backend: str) -> list[tuple[str, str, str]]:
    """Run an example's driver on ``backend``; rows of (shape, relative error, ok)."""
    import importlib.util
    driver = path.with_suffix(".py")
    if not driver.is_file():
        return [("-", "-", "no driver")]
    spec = importlib.util.spec_from_file_location(f"tkjit_example_{path.stem}", driver)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    device = "cuda" if backend == "gpu" else "cpu"
    rows = []
    for kwargs in VARIANTS.get(path.stem, [{}]):
        try:
            shape, err = module.check(device, None, **kwargs)
        except TkError as e:
            rows.append(("-", "-", "error: " + e.message.splitlines()[0]))
            continue
        ok = err == err and err <= TOLERANCE  # NaN never passes
        rows.append((shape, f"{err:.2e}", "ok" if ok else "FAILED"))
    return rows


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
    where = "the GPU" if backend == "gpu" else "the CPU interpreter (no GPU here)"
    print(f"running the examples on {where}\n", file=out)
    rows = [("example", "compile ms", "shape", "rel. error", "ok")]
    failures = 0
    for path in examples:
        start = time.perf_counter()
        try:
            kernel = load(path)
        except TkError as e:
            failures += 1
            ms = f"{(time.perf_counter() - start) * 1e3:.1f}"
            rows.append((path.name, ms, "-", "-", "compile failed"))
            print(f"{path.name}:\n{_indent(e.render())}\n", file=out)
            continue
        ms = f"{(time.perf_counter() - start) * 1e3:.1f}"
        print(f"{path.name}:\n{_indent(ir_summary(kernel))}\n", file=out)
        for shape, err, ok in run_example(path, backend):
            failures += ok not in ("ok", "no driver")
            rows.append((path.name, ms, shape, err, ok))
    print(format_table(rows), file=out)
    return 1 if failures else 0


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def format_table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
