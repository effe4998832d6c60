"""compute-sanitizer's memcheck, racecheck and synccheck over every example (one process each:
tests/gpu/examples_sanitize.py) and over the general lowering's corpus (tests/gpu/general_sanitize.py),
on a GPU; prints one line per tool and target with the error / hazard counts, and a JSON summary.

    python3 benchmarks/sanitize.py [--json OUT.json] [--timeout S]
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"examples": ROOT / "tests" / "gpu" / "examples_sanitize.py",
           "corpus": ROOT / "tests" / "gpu" / "general_sanitize.py"}
TOOLS = ("memcheck", "racecheck", "synccheck")
# cuda-bindings looks driver symbols up with cuGetProcAddress and some lookups fail at start-up
# (CUDA_ERROR_INVALID_VALUE): memcheck reports those as API errors on every run, kernels or not
IGNORED_API = re.compile(r"cuGetProcAddress")


def summary(tool: str, output: str) -> dict:
    errors = re.search(r"ERROR SUMMARY: (\d+) error", output)
    hazards = re.search(r"RACECHECK SUMMARY: (\d+) hazard", output)
    api = len(re.findall(r"Program hit .*?on CUDA API call to (\w+)", output))
    ignored = len([m for m in re.findall(r"on CUDA API call to (\w+)", output) if IGNORED_API.search(m)])
    kernel_errors = len(re.findall(r"^=========\s+(Invalid|Race|Barrier|Out-of-range|Misaligned)", output, re.M))
    return {"tool": tool, "errors": int(errors.group(1)) if errors else None,
            "hazards": int(hazards.group(1)) if hazards else None,
            "api_errors": api, "api_errors_ignored": ignored, "kernel_errors": kernel_errors,
            "checks_ok": "WRONG" not in output and "Traceback" not in output}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--timeout", type=float, default=240)
    args = ap.parse_args()
    rows = []
    for target, script in TARGETS.items():
        for tool in TOOLS:
            try:
                run = subprocess.run(["compute-sanitizer", "--tool", tool, sys.executable, str(script)],
                                     capture_output=True, text=True, timeout=args.timeout, cwd=ROOT)
                out = run.stdout + run.stderr
            except subprocess.TimeoutExpired as e:
                out = f"timeout after {args.timeout} s\n{e.stdout or ''}"
            row = {"target": target, **summary(tool, out)}
            rows.append(row)
            print(f"{target:9} {tool:10} errors={row['errors']} hazards={row['hazards']} "
                  f"kernel_errors={row['kernel_errors']} api_errors={row['api_errors']} "
                  f"(cuGetProcAddress: {row['api_errors_ignored']}) checks_ok={row['checks_ok']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    bad = [r for r in rows if r["kernel_errors"] or (r["hazards"] or 0) or not r["checks_ok"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
