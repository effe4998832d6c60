"""The GPU test suite, run as ``python -m pytest tests/gpu -q`` in a subprocess before the
benchmarks; its counts come from pytest's JUnit XML report, its summary line from its output."""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from .context import REPO

TAIL_CHARS = 4000
FIRST_FAILURE_CHARS = 3000
"""The first failure's whole report is kept: later ones are often its consequence (a CUDA error
such as an illegal address leaves the test process's context unusable)."""


def run_gpu_tests(timeout_s: float, env: dict | None = None, path: str = "tests/gpu") -> dict:
    """Run the suite; what it says (counts, failures' first lines, the output's tail)."""
    with tempfile.TemporaryDirectory(prefix="tkbench-pytest-") as tmp:
        junit = Path(tmp) / "junit.xml"
        command = [sys.executable, "-m", "pytest", path, "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"]
        begin = time.monotonic()
        result = {"command": f"python -m pytest {path} -q", "ran": True}
        try:
            proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
            output, result["returncode"] = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            output = _text(exc.stdout) + _text(exc.stderr)
            result["returncode"] = None
            result["error"] = f"stopped after {timeout_s:g} s"
        result["seconds"] = round(time.monotonic() - begin, 2)
        result["summary"] = summary_line(output)
        result["output_tail"] = output[-TAIL_CHARS:]
        result.update(read_junit(junit))
    return result


def _text(data) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def summary_line(output: str) -> str:
    """pytest's last non-empty line ('3 passed, 1 skipped in 2.1s')."""
    lines = [line.strip().strip("=").strip() for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def read_junit(path: Path) -> dict:
    """Counts and the failing tests (name: first line of the message) from a JUnit XML report."""
    if not path.is_file():
        return {"junit": "no report (pytest did not finish)"}
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        return {"junit": f"unreadable report: {exc}"}
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failing, first_failure = [], None
    for suite in suites:
        for key in counts:
            counts[key] += int(suite.get(key, 0))
        for case in suite.iter("testcase"):
            for kind in ("failure", "error"):
                problem = case.find(kind)
                if problem is not None:
                    message = (problem.get("message") or problem.text or "").strip().splitlines()
                    name = f"{case.get('classname', '')}::{case.get('name', '')}"
                    failing.append(f"{name}: {message[0] if message else kind}")
                    if first_failure is None:
                        first_failure = f"{name}\n{(problem.text or '').strip()}"[:FIRST_FAILURE_CHARS]
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {**counts, "failing": failing, "first_failure": first_failure}


def describe(result: dict) -> str:
    """One line for the report."""
    if not result.get("ran"):
        return f"GPU tests: not run ({result.get('why', 'asked not to')})"
    if "tests" not in result:
        return f"GPU tests: {result.get('error') or result.get('junit')}; pytest said: {result['summary']}"
    text = (f"GPU tests: {result['passed']} passed, {result['failures']} failed, {result['errors']} errors, "
            f"{result['skipped']} skipped in {result['seconds']:g} s")
    return text + (f" ({result['error']})" if result.get("error") else "")
