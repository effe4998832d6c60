#!/usr/bin/env python3
"""Turn a results JSON of benchmarks/run.py into the markdown for docs/benchmarks.md: a heading
with the date and the GPU, the machine and the GPU tests in a few lines, then one table per
family (every number as measured; ratio = reference time / tkjit time, above 1 tkjit is faster).

    python benchmarks/summarize.py benchmarks/results/2026-11-21-nvidia-h100-80gb-hbm3.json [-o FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tkbench import gpu_tests  # noqa: E402
from tkbench.table import fmt_err, fmt_ratio, fmt_time  # noqa: E402


def _tflops(value: float | None) -> str:
    return "-" if not value else f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def _gbps(value: float | None, share: float | None) -> str:
    if not value:
        return "-"
    return f"{value:.0f}" + (f" ({share:.0%})" if share else "")


def _status(row: dict) -> str:
    text = row["status"]
    if row.get("error"):
        text += f": {row['error']}"
    if row.get("ref_error"):
        text += f"; reference: {row['ref_error']}"
    return text.replace("|", "\\|")


def _target(row: dict) -> str:
    if not row.get("target"):
        return ""
    met = row.get("meets_target")
    return f"{row['target']} {'✓' if met else '✗' if met is False else '?'}"


def _compute_table(rows: list[dict]) -> list[str]:
    lines = ["| what | shape | tkjit | reference | ratio | TFLOPS tkjit / ref | rel err tkjit / ref | target "
             "| status |", "|---|---|---:|---:|---:|---:|---:|---|---|"]
    for row in rows:
        lines.append(f"| {row['what']} | {row['shape']} | {fmt_time(row.get('tkjit_ms'))} | "
                     f"{fmt_time(row.get('ref_ms'))} | {fmt_ratio(row.get('ratio'))} | "
                     f"{_tflops(row.get('tkjit_tflops'))} / {_tflops(row.get('ref_tflops'))} | "
                     f"{fmt_err(row.get('rel_err'))} / {fmt_err(row.get('ref_rel_err'))} | {_target(row)} | "
                     f"{_status(row)} |")
    return lines


def _memory_table(rows: list[dict]) -> list[str]:
    lines = ["| what | shape | tkjit | reference | ratio | GB/s tkjit (of copy) | GB/s ref (of copy) | rel err | "
             "target | status |", "|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for row in rows:
        lines.append(f"| {row['what']} | {row['shape']} | {fmt_time(row.get('tkjit_ms'))} | "
                     f"{fmt_time(row.get('ref_ms'))} | {fmt_ratio(row.get('ratio'))} | "
                     f"{_gbps(row.get('tkjit_gbps'), row.get('frac_of_copy'))} | "
                     f"{_gbps(row.get('ref_gbps'), row.get('ref_frac_of_copy'))} | {fmt_err(row.get('rel_err'))} | "
                     f"{_target(row)} | {_status(row)} |")
    return lines


def _jit_table(rows: list[dict]) -> list[str]:
    lines = ["| what | shape | tkjit | reference | ratio | target | status |", "|---|---|---:|---:|---:|---|---|"]
    for row in rows:
        lines.append(f"| {row['what']} | {row['shape']} | {fmt_time(row.get('tkjit_ms'))} | "
                     f"{fmt_time(row.get('ref_ms'))} | {fmt_ratio(row.get('ratio'))} | {_target(row)} | "
                     f"{_status(row)} |")
    return lines


def _generality_table(rows: list[dict]) -> list[str]:
    """The examples written as a new user would: which backend each took, and its ratio."""
    lines = ["| kernel | shape | backend | reference | tkjit | reference time | ratio | rate | rel err | target "
             "| status |", "|---|---|---|---|---:|---:|---:|---:|---:|---|---|"]
    for row in rows:
        extra = row.get("extra") or {}
        rate = _tflops(row.get("tkjit_tflops")) if row.get("flops") else \
            _gbps(row.get("tkjit_gbps"), row.get("frac_of_copy"))
        lines.append(f"| {extra.get('kernel', row['what'])} | {row['shape']} | {extra.get('backend', '?')} | "
                     f"{row['ref_name']} | {fmt_time(row.get('tkjit_ms'))} | {fmt_time(row.get('ref_ms'))} | "
                     f"{fmt_ratio(row.get('ratio'))} | {rate} | {fmt_err(row.get('rel_err'))} | {_target(row)} | "
                     f"{_status(row)} |")
    return lines


SECTIONS = (("bf16 GEMM vs torch.matmul (cuBLAS)", ("gemm",), _compute_table),
            ("Attention forward vs PyTorch SDPA", ("attention",), _compute_table),
            ("Memory-bound kernels vs eager PyTorch", ("copy", "layernorm", "softmax", "rotary"), _memory_table),
            ("Generality: examples written as a new user would, and the backend each took", ("generality",),
             _generality_table),
            ("JIT costs", ("jit",), _jit_table),
            ("Self-test rows (dry run)", ("selftest",), _jit_table))
"""(heading, the families it holds, the table maker), in the order they are written."""


def heading(report: dict) -> list[str]:
    env, smi = report.get("environment", {}), report.get("nvidia_smi", {})
    after = smi.get("after") or smi.get("before") or {}
    gpu = env.get("gpu") or after.get("name") or "unknown GPU"
    mode = " (quick)" if report["mode"].get("quick") else " (dry run)" if report["mode"].get("dry_run") else ""
    git = report.get("git", {})
    known = len(git.get("commit", "")) == 40
    commit = f"{git['commit'][:10]}{' (modified)' if git.get('dirty') else ''}" if known else "an unrecorded commit"
    lines = [f"## {report['date'][:10]} — {gpu}{mode}", ""]
    facts = [f"driver {after.get('driver_version', '?')}",
             f"torch {env.get('torch', '?')} (CUDA {env.get('torch_cuda')})", f"cuDNN {env.get('cudnn', '?')}",
             f"triton {env.get('triton') or 'absent'}", f"ptxas {env.get('ptxas', '?')}",
             f"tkjit {env.get('tkjit', '?')} at {commit}"
             + (f" (sources sha256 {report['sources']['tkjit_sources_sha256'][:12]})"
                if report.get("sources", {}).get("tkjit_sources_sha256") else "")]
    lines.append("Measured on " + ", ".join(facts) + ".")
    if "clocks.sm" in after:
        lines.append(f"Clocks after the run: SM {after['clocks.sm']} MHz (max {after['clocks.max.sm']}), memory "
                     f"{after['clocks.mem']} MHz (max {after['clocks.max.mem']}); power limit "
                     f"{after.get('power.limit', '?')} W.")
    lines.append(f"Timing: {env.get('timing', '?')}, median; inputs rotated past the L2 "
                 f"({env.get('l2_bytes', 0) / 2**20:.0f} MiB). Run took {report.get('elapsed_s', '?')} s.")
    lines.append(gpu_tests.describe(report.get("tests", {"ran": False})) + ".")
    return lines


def to_markdown(report: dict) -> str:
    lines = heading(report)
    for title, members, make_table in SECTIONS:
        rows = [row for row in report.get("rows", []) if row["family"] in members]
        if rows:
            lines += ["", f"### {title}", ""] + make_table(rows)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a JSON file written by benchmarks/run.py")
    parser.add_argument("-o", "--output", type=Path, help="write the markdown here instead of standard output")
    args = parser.parse_args(argv)
    try:
        report = json.loads(args.results.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        print(f"summarize: cannot read {args.results}: {exc}", file=sys.stderr)
        return 1
    if not isinstance(report, dict) or "rows" not in report or "mode" not in report:
        print(f"summarize: {args.results} is not a results file of benchmarks/run.py (no 'rows')", file=sys.stderr)
        return 1
    text = to_markdown(report)
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
