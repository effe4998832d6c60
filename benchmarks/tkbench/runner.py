"""The parent's side of the measuring: start a worker process on the cases, collect its rows as
they come, and survive it. A case that makes no progress for ``case_timeout_s`` (a hung kernel)
is stopped: its worker is killed, the case becomes a ``timeout`` row, and a fresh worker goes on
with the rest. A worker that dies in a case (a crash, a lost CUDA context) leaves a ``crashed``
row and is replaced the same way. Past the run's deadline the rest are ``skipped`` rows.

A family whose cases hang, crash or lose the CUDA context ``MAX_STRIKES`` times has its remaining
cases skipped: each such case would cost a timeout or a fresh worker, and the budget is shared.
The parent never initializes CUDA itself."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

from .rows import CRASHED, SKIPPED, TIMEOUT, Row

POLL_S = 0.1
CONTEXT_LOST = 3
"""A worker's exit status after a case that left the CUDA context unusable: that case has its
rows, and the next one starts in a fresh worker."""
MAX_STRIKES = 2


@dataclass
class Outcome:
    rows: dict[int, list[dict]] = field(default_factory=dict)     # case id -> its rows
    environment: dict | None = None
    workers: int = 0
    strikes: dict[str, int] = field(default_factory=dict)   # family -> cases that hung or crashed


@dataclass
class Runner:
    """``worker_argv(cases_path, results_path)`` is the command of one worker process."""
    worker_argv: Callable[[str, str], list[str]]
    case_timeout_s: float
    deadline: float                       # time.monotonic() after which nothing new starts
    env: dict | None = None
    echo: TextIO | None = sys.stderr
    describe: Callable[[dict], tuple[str, str]] | None = None   # (what, shape) of a case without rows

    def run(self, cases: list[dict], mode: dict) -> Outcome:
        outcome = Outcome()
        pending = list(cases)
        with tempfile.TemporaryDirectory(prefix="tkbench-") as tmp:
            while pending:
                if time.monotonic() >= self.deadline:
                    for case in pending:
                        outcome.rows[case["id"]] = [self._row(case, SKIPPED, "not run: the run's time budget "
                                                               "was spent")]
                    break
                self._skip_struck(pending, outcome)
                if not pending:
                    break
                outcome.workers += 1
                self._one_worker(Path(tmp), outcome.workers, pending, mode, len(cases), outcome)
        return outcome

    def _one_worker(self, tmp: Path, number: int, pending: list[dict], mode: dict, total: int,
                    outcome: Outcome) -> None:
        """Run one worker over ``pending`` (which shrinks as cases finish) until it ends or is stopped."""
        cases_path, results_path = tmp / f"cases-{number}.json", tmp / f"results-{number}.jsonl"
        log_path = tmp / f"worker-{number}.log"
        cases_path.write_text(json.dumps({"mode": mode, "total": total, "cases": pending}))
        results_path.touch()
        results, log = _Lines(results_path), _Lines(log_path)
        with open(log_path, "w") as log_file:
            proc = subprocess.Popen(self.worker_argv(str(cases_path), str(results_path)), stdout=log_file,
                                    stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        try:
            self._watch(proc, results, log, pending, outcome)
        finally:
            if proc.poll() is None:   # interrupted (Ctrl-C): the worker is in its own session
                _kill(proc)

    def _watch(self, proc: subprocess.Popen, results: "_Lines", log: "_Lines", pending: list[dict],
               outcome: Outcome) -> None:
        started, last_progress, stopped_why = False, time.monotonic(), None
        while True:
            for record in results.new_json():
                started = True
                last_progress = time.monotonic()
                self._take(record, pending, outcome)
            self._echo(log.new_text())
            if proc.poll() is not None:
                break
            now = time.monotonic()
            if now - last_progress > self.case_timeout_s:
                stopped_why = f"stopped after {self.case_timeout_s:g} s without finishing (hung?)"
            elif now >= self.deadline:
                stopped_why = "stopped: the run's time budget was spent"
            if stopped_why:
                _kill(proc)
                break
            time.sleep(POLL_S)
        for record in results.new_json():
            started = True
            self._take(record, pending, outcome)
        self._echo(log.new_text())
        if not pending or (proc.returncode == CONTEXT_LOST and not stopped_why):
            return
        case = pending.pop(0)
        self._strike(case, outcome)
        if stopped_why:
            outcome.rows[case["id"]] = [self._row(case, TIMEOUT, stopped_why)]
            return
        last = log.last_line() or "(no output)"
        why = f"the worker exited with status {proc.returncode} during this case; its last output: {last}"
        outcome.rows[case["id"]] = [self._row(case, CRASHED, why)]
        if not started:  # it died before it could measure anything: every start would
            for rest in pending:
                outcome.rows[rest["id"]] = [self._row(rest, CRASHED, f"not run: the worker could not start: {last}")]
            pending.clear()

    def _skip_struck(self, pending: list[dict], outcome: Outcome) -> None:
        for case in [case for case in pending if outcome.strikes.get(case["family"], 0) >= MAX_STRIKES]:
            why = f"not run: {MAX_STRIKES} earlier cases of this family hung or crashed"
            outcome.rows[case["id"]] = [self._row(case, SKIPPED, why)]
            pending.remove(case)

    def _strike(self, case: dict, outcome: Outcome) -> None:
        outcome.strikes[case["family"]] = outcome.strikes.get(case["family"], 0) + 1

    def _take(self, record: dict, pending: list[dict], outcome: Outcome) -> None:
        if "environment" in record:
            outcome.environment = outcome.environment or record["environment"]
            return
        case = next((c for c in pending if c["id"] == record["case"]), None)
        if record.get("context_lost") and case is not None:
            self._strike(case, outcome)
        outcome.rows[record["case"]] = record["rows"]
        pending[:] = [case for case in pending if case["id"] != record["case"]]

    def _row(self, case: dict, status: str, why: str) -> dict:
        what, shape = self.describe(case) if self.describe else (case["family"], json.dumps(case["params"]))
        return Row(case["family"], what, shape, params=case["params"], status=status, error=why).to_json()

    def _echo(self, text: str) -> None:
        if self.echo is not None and text:
            self.echo.write(text)
            self.echo.flush()


class _Lines:
    """A file another process appends to, read as it grows (whole lines only)."""

    def __init__(self, path: Path):
        self.path = path
        self._offset = 0
        self._last = ""

    def new_text(self) -> str:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return ""
        end = data.rfind(b"\n") + 1
        self._offset += end
        text = data[:end].decode(errors="replace")
        lines = [line for line in text.splitlines() if line.strip()]
        if lines:
            self._last = lines[-1].strip()
        return text

    def new_json(self) -> list[dict]:
        return [json.loads(line) for line in self.new_text().splitlines() if line.strip()]

    def last_line(self) -> str:
        self.new_text()
        return self._last


def _kill(proc: subprocess.Popen) -> None:
    """Kill the worker and what it started (its own process group), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
