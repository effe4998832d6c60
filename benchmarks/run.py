#!/usr/bin/env python3
"""Run the GPU test suite and the benchmarks in one go (on a Hopper GPU, in under ten minutes),
print a short table last, and write every number to JSON.

    python benchmarks/run.py [--quick] [--only gemm,attention,...] [--kernels NAMES] [--no-tests] [--out PATH]
                             [--plot] [--dry-run] [--budget S] [--case-timeout S]
    tkjit bench [the same options]

The JSON goes to --out, else $OUT/bench.json when $OUT is set, else
benchmarks/results/<date>-<gpu>.json. --dry-run runs tiny shapes on the CPU interpreter to test
this script itself (its numbers mean nothing). See benchmarks/README.md for the method.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _path in (str(REPO), str(HERE)):   # this checkout's tkjit, and the tkbench helpers
    if _path not in sys.path:
        sys.path.insert(0, _path)

from tkbench import envinfo, families, gpu_tests, table, targets  # noqa: E402
from tkbench.context import Mode  # noqa: E402
from tkbench.runner import Runner  # noqa: E402

SCHEMA = 1
BUDGET_S = {"full": 570.0, "quick": 330.0, "dry_run": 300.0}
"""The whole run's time budget by default: past it, the remaining cases are skipped rows."""
CASE_TIMEOUT_S = 60.0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="benchmarks/run.py", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the largest shapes (GEMM 16384³)")
    parser.add_argument("--only", type=_families, default=None, metavar="NAMES",
                        help=f"comma-separated families: {', '.join(families.FAMILIES)}")
    parser.add_argument("--kernels", type=lambda t: tuple(n.strip() for n in t.split(",") if n.strip()), default=(),
                        metavar="NAMES", help="generality: only the rows of these examples (attention_exp,...)")
    parser.add_argument("--no-tests", action="store_true", help="do not run the GPU test suite first")
    parser.add_argument("--out", type=Path, default=None, metavar="PATH", help="where to write the JSON")
    parser.add_argument("--plot", action="store_true", help="also write PNG plots of the ratios (matplotlib)")
    parser.add_argument("--dry-run", action="store_true",
                        help="tiny shapes on the CPU interpreter: tests this script, measures nothing")
    parser.add_argument("--budget", type=float, default=None, metavar="S",
                        help="time budget of the whole run in seconds (default: 570, 330 with --quick)")
    parser.add_argument("--case-timeout", type=float, default=CASE_TIMEOUT_S, metavar="S",
                        help=f"stop a case that runs longer than this (default: {CASE_TIMEOUT_S:g})")
    parser.add_argument("--tests-timeout", type=float, default=None, metavar="S",
                        help="time limit of the GPU test suite (default: 40%% of the budget)")
    return parser.parse_args(argv)


def _families(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in families.FAMILIES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown benchmark family {', '.join(unknown) or '(none)'}; "
                                         f"choose from {', '.join(families.FAMILIES)}")
    return names


def child_env() -> dict:
    """The environment of the workers and of pytest: this checkout first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        from tkbench import worker
        return worker.main(argv[1], argv[2])
    args = parse_args(argv)
    if not args.dry_run and not _gpu_here():  # before anything runs or is written
        print("error: the benchmarks need a CUDA GPU (a Hopper, with a CUDA build of torch) and none is usable "
              "here; --dry-run checks this script on the CPU", file=sys.stderr)
        return 1
    mode = Mode(quick=args.quick, dry_run=args.dry_run, kernels=args.kernels)
    begin = time.monotonic()
    budget = args.budget or BUDGET_S["dry_run" if args.dry_run else "quick" if args.quick else "full"]
    deadline = begin + budget
    env = child_env()
    report = {"schema": SCHEMA, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "argv": argv, "mode": {**mode.to_json(), "only": args.only, "budget_s": budget},
              "git": envinfo.git_info(), "sources": envinfo.source_info(), "nvidia_smi": {"before": envinfo.nvidia_smi()}}

    report["tests"] = _tests(args, env, budget)
    print(gpu_tests.describe(report["tests"]), file=sys.stderr, flush=True)

    cases = families.plan(families.select(args.only), mode)
    runner = Runner(worker_argv=_worker_argv, case_timeout_s=args.case_timeout, deadline=deadline, env=env,
                    describe=families.describe)
    outcome = runner.run(cases, mode.to_json())
    rows = [row for case in cases for row in outcome.rows.get(case["id"], [])]
    finish_rows(rows)
    report["environment"] = outcome.environment or {}
    report["nvidia_smi"]["after"] = envinfo.nvidia_smi()
    report["workers"] = outcome.workers
    report["rows"] = rows
    report["elapsed_s"] = round(time.monotonic() - begin, 1)

    path = output_path(args, report)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, default=repr) + "\n")
    plots = []
    if args.plot:
        from tkbench.plots import write_plots
        plots = write_plots(rows, path)
    from tkbench.generality import generality_table
    general = generality_table(rows)
    if general:  # the README's generality table, before the summary (which ends the output)
        print("generality (kernel, the backend it took, ratio = reference time / tkjit time):\n" + general + "\n")
    print(headline(report, path, plots))
    print(table.render(rows))
    return 0


def _gpu_here() -> bool:
    try:
        from tkjit.runtime.driver import gpu_available
        return gpu_available()
    except Exception:  # noqa: BLE001 - no cuda-python, no torch: no GPU
        return False


def _tests(args, env: dict, budget: float) -> dict:
    if args.no_tests:
        return {"ran": False, "why": "--no-tests"}
    timeout = args.tests_timeout or 0.4 * budget
    return gpu_tests.run_gpu_tests(timeout, env)


def _worker_argv(cases_path: str, results_path: str) -> list[str]:
    return [sys.executable, str(HERE / "run.py"), "--worker", cases_path, results_path]


def finish_rows(rows: list[dict]) -> None:
    """What needs every row: the share of the copy bandwidth, and the design's targets."""
    copy = next((row["ref_gbps"] for row in rows if row["family"] == "copy" and row.get("ref_gbps")), None)
    for row in rows:
        if copy and row["family"] in families.NEEDS_COPY:
            row["frac_of_copy"] = row["tkjit_gbps"] / copy if row.get("tkjit_gbps") else None
            row["ref_frac_of_copy"] = row["ref_gbps"] / copy if row.get("ref_gbps") else None
        targets.attach(row)


def output_path(args, report: dict) -> Path:
    if args.out is not None:
        return args.out
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"]) / "bench.json"
    day = report["date"][:10]
    if args.dry_run:
        return Path(tempfile.gettempdir()) / f"tkbench-{day}-dry-run.json"
    name = report["environment"].get("gpu") or "unknown-gpu"
    slug = "-".join("".join(c if c.isalnum() else " " for c in name.lower()).split())
    path = HERE / "results" / f"{day}-{slug}.json"
    number = 2
    while path.exists():
        path = HERE / "results" / f"{day}-{slug}-{number}.json"
        number += 1
    return path


def headline(report: dict, path: Path, plots: list[str]) -> str:
    env, smi = report["environment"], report["nvidia_smi"]
    after = smi.get("after", {})
    clocks = (f", SM {after['clocks.sm']}/{after['clocks.max.sm']} MHz, mem {after['clocks.mem']} MHz after the run"
              if "clocks.sm" in after else "")
    driver = f", driver {after['driver_version']}" if "driver_version" in after else ""
    mode = " (quick)" if report["mode"]["quick"] else " (dry run)" if report["mode"]["dry_run"] else ""
    lines = [f"tkjit benchmarks{mode}: {env.get('gpu', '?')}{driver}, torch {env.get('torch', '?')}, "
             f"triton {env.get('triton') or 'absent'}{clocks}; {report['date']}; {report['elapsed_s']:g} s",
             gpu_tests.describe(report["tests"]),
             f"rows: {table.counts(report['rows']) or 'none'}; JSON: {path}"]
    lines += [f"plot: {p}" for p in plots]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
