"""Fuzz run of issue 20 ("Done when"): mutants of the example kernels (examples/*.tk), of the
golden malformed kernels (tests/golden/diagnostics.txt) and of the examples' textual IR
(``tkjit compile --emit tkir``), each compiled through PTX by the default pipeline with
``tkjit.compile(..., cache=...)``; every other case (``--cubin-every``) goes on through ptxas to
the cubin. Half the cases run with the disk cache on, half with it off.

Counts: tracebacks (any exception that is not a ``TkError``), hangs (a case over ``--timeout``
seconds: the worker process is killed and restarted), and diagnostics about the text without
line:col (a ``TkError`` with no span, other than the toolchain's own). Each finding's mutant is
written under ``--out`` so it can be replayed. One worker process by default (CPU-bound).

    python benchmarks/fuzz_frontend.py --kernels 10000 --ir 5000 --seed 0 --out /tmp/fuzz
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import random
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tkjit.testing.mutate import DEEP_KINDS, KINDS, IR_PIECE, IR_PUNCTUATION, Chooser, Mutator  # noqa: E402


def golden_kernels() -> list[tuple[str, str, dict | None]]:
    """(name, source, constants) of every golden malformed kernel."""
    lines = (ROOT / "tests" / "golden" / "diagnostics.txt").read_text().split("\n")
    cases, i = [], 0
    while i < len(lines) and not lines[i].startswith("=== "):
        i += 1
    while i < len(lines):
        name, _, consts = lines[i][4:].partition(" ")
        i += 1
        src = []
        while lines[i] != "--- expect":
            src.append(lines[i])
            i += 1
        while i < len(lines) and not lines[i].startswith("=== "):
            i += 1
        cases.append((name, "\n".join(src) + "\n", json.loads(consts) if consts else None))
    return cases


def sources() -> tuple[list[tuple[str, str, dict | None]], list[tuple[str, str]]]:
    """The kernel seeds (examples and golden) and the IR seeds (the examples' tkir)."""
    import tkjit
    kernels = [(p.stem, p.read_text(), None) for p in sorted((ROOT / "examples").glob("*.tk"))]
    irs = []
    for name, text, _ in kernels:
        k = tkjit.compile(text, filename=f"{name}.tk", cache=False)
        irs.append((name, k.asm["tkir"]))
    return kernels + golden_kernels(), irs


def run_case(case: dict) -> dict:
    """Compile one mutant; what happened."""
    import tkjit
    from tkjit import compiler
    from tkjit.errors import TkError
    try:
        k = tkjit.compile(case["text"], filename=case["filename"], constants=case["constants"],
                          cache=case["cache"])
        compiler.advance(k._result, "cubin" if case["cubin"] else "ptx")
        return {"outcome": "compiled"}
    except TkError as err:
        if err.span is not None:
            return {"outcome": "diagnostic"}
        return {"outcome": "unlocated", "type": type(err).__name__, "message": err.render()[:500]}
    except Exception as err:  # noqa: BLE001 -- what the run counts
        return {"outcome": "traceback", "type": type(err).__name__, "message": traceback.format_exc()[-3000:]}


def _worker(conn) -> None:
    os.environ.setdefault("TKJIT_CACHE_DIR", "/tmp/tkcache-fuzz")
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 3000))
    while True:
        case = conn.recv()
        if case is None:
            return
        conn.send(run_case(case))


class Pool:
    """One worker process; a case past the timeout kills it (a hang) and starts another."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.ctx = mp.get_context("fork")
        self._start()

    def _start(self) -> None:
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker, args=(child,), daemon=True)
        self.proc.start()

    def run(self, case: dict) -> dict:
        self.conn.send(case)
        if self.conn.poll(self.timeout):
            try:
                return self.conn.recv()
            except EOFError:
                pass
            self.proc.join(1)
            result = {"outcome": "traceback", "type": "worker died", "message": f"exit code {self.proc.exitcode}"}
        else:
            self.proc.kill()
            self.proc.join()
            result = {"outcome": "hang", "message": f"over {self.timeout} s"}
        self._start()
        return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", type=int, default=10000, help="kernel-language mutants")
    ap.add_argument("--ir", type=int, default=5000, help="textual-IR mutants")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per case")
    ap.add_argument("--cubin-every", type=int, default=2, help="every Nth case goes on to the cubin (ptxas)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/tkjit-fuzz"))
    ap.add_argument("--progress", type=int, default=500)
    args = ap.parse_args(argv)
    os.environ.setdefault("TKJIT_CACHE_DIR", "/tmp/tkcache-fuzz")
    args.out.mkdir(parents=True, exist_ok=True)

    kernels, irs = sources()
    n_examples = len(irs)
    kmut = Mutator([t for _, t, _ in kernels])
    imut = Mutator([t for _, t in irs], IR_PIECE, IR_PUNCTUATION)
    rng = random.Random(args.seed)
    choose = Chooser.seeded(rng)
    pool = Pool(args.timeout)
    counts: Counter = Counter()
    findings: list[dict] = []
    start = time.time()
    total = args.kernels + args.ir
    for n in range(total):
        ir = n >= args.kernels
        if ir:
            name, seed = irs[rng.randrange(len(irs))]
            case = {"text": imut.mutate(seed, choose, 2, DEEP_KINDS if rng.random() < 0.5 else KINDS),
                    "filename": f"{name}.tkir", "constants": None}
        else:
            # 60% examples (mostly still valid after 1-2 mutations: they reach the passes and
            # the backends), 40% golden malformed kernels (the diagnostics' own paths)
            # half of them with the mutations that keep a kernel parseable
            name, seed, constants = kernels[rng.randrange(n_examples) if rng.random() < 0.6
                                            else rng.randrange(n_examples, len(kernels))]
            kinds = DEEP_KINDS if rng.random() < 0.5 else KINDS
            case = {"text": kmut.mutate(seed, choose, 2, kinds), "filename": f"{name}.tk", "constants": constants}
        case["cache"] = n % 2 == 0
        case["cubin"] = n % args.cubin_every == 0
        result = pool.run(case)
        kind = "ir" if ir else "kernel"
        counts[kind, result["outcome"]] += 1
        counts[kind, "cache on" if case["cache"] else "cache off"] += 1
        if result["outcome"] in ("traceback", "hang", "unlocated"):
            path = args.out / f"{result['outcome']}-{n:05d}.{'tkir' if ir else 'tk'}"
            path.write_text(case["text"])
            findings.append({"n": n, "kind": kind, "seed": name, "file": str(path), **result,
                             "cache": case["cache"], "cubin": case["cubin"], "constants": case["constants"]})
        if args.progress and (n + 1) % args.progress == 0:
            print(f"{n + 1}/{total} {time.time() - start:.0f}s " + ", ".join(
                f"{k[0]} {k[1]}: {v}" for k, v in sorted(counts.items())), flush=True)
    pool.conn.send(None)
    summary = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "seed": args.seed, "kernel_mutants": args.kernels, "ir_mutants": args.ir,
        "seconds": round(time.time() - start, 1),
        "counts": {f"{k[0]} {k[1]}": v for k, v in sorted(counts.items())},
        "tracebacks": sum(1 for f in findings if f["outcome"] == "traceback"),
        "hangs": sum(1 for f in findings if f["outcome"] == "hang"),
        "unlocated": sum(1 for f in findings if f["outcome"] == "unlocated"),
    }
    (args.out / "findings.json").write_text(json.dumps(findings, indent=1))
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    by = Counter((f["outcome"], f.get("type"), (f.get("message") or "").strip().splitlines()[-1][:160])
                 for f in findings)
    for (outcome, typ, last), c in by.most_common(40):
        print(f"{c:5d} {outcome} {typ}: {last}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
