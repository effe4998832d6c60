"""How fast the JIT itself is: a cold compile stage by stage, and a cached load in a fresh process.

``measure_cold_compile(path)`` compiles a ``.tk``/``.tkir`` file from text to a cubin in fresh
processes with the cubin cache off and times each stage (import, front end, passes, codegen,
ptxas; cuobjdump is not run). ``measure_fresh_process_load(path)`` warms a cache directory, then
starts fresh processes that import tkjit and load the kernel from that cache, timing
``import tkjit``, the load (text → a kernel ready to launch: the cubin in hand), what the load had
to import, and, given shapes and a GPU, the first launch (module load, launcher) and a second one.
Both return dicts (benchmarks/run.py prints them); each uses a private cache directory and keeps
Python's bytecode as an installed package does. ``python -m tkjit.runtime.bench_jit FILE`` prints
both as JSON.

Design targets (docs: design.md): cold compile of the GEMM ≤ 0.25 s; cached load ≤ 10 ms after
import. Measured on an H200 host (2026-11-21, examples/gemm.tk, the Hopper pipeline, session 3's
final code): cold compile 0.206 s (import 5 ms, front end 40 ms, passes 26 ms, codegen 10 ms,
ptxas 131 ms; it was 0.33 s, then 0.27 s, before the GEMM left its unaligned-rows fallback to an
on-demand variant and the checker's state machine and the register-tile backend left this
path); cached load 8.4 ms after import, nothing heavy imported. The Python stages are mostly
imports (creating 112 dataclasses alone took 47 ms on the CI CPU).

On the CPU of the machine without a GPU that this was tuned on (2 slow cores, 2026-11-21; its
timings swing by ±20% from run to run, so medians of 25 paired fresh processes, and callgrind's
instruction counts, which do not move): before -> after the AST classes stopped generating
frozen-dataclass methods, difflib and the syntax-error messages moved to the diagnostics that need
them, the cached load found ptxas without importing toolchain.py and the cache's records became
NamedTuples, the Python stages of the cold compile went 84 -> 77 ms (-8%; 604M -> 550M
instructions) and the cached load 11.1 -> 5.5 ms (65M -> 29M instructions); ptxas is 145-175 ms
either way, and this module's own best-of-3 read cold 0.23-0.26 s and cached load 9.3-14.3 ms
before, 0.23-0.28 s and 4.5-6.4 ms after. Of the 550M instructions, lark's import (and what it
imports) is about 94M, loading its parser tables 66M, the dataclasses of passes/sync_protocol.py
about 81M and the stages' own work 96M; the rest is tkjit's other imports.

Then (same machine, 2026-11-21): tkjit's immutable records took frozen=True's guards from a mixin
(tkjit/frozen.py) instead of generating them per class, every dataclass got a docstring (else
``dataclasses`` calls ``inspect.signature`` to write one), and the pass manager held printed IR
instead of copies of the IR for the tentative Hopper passes. A fresh process compiling
examples/gemm.tk to PTX went 618M -> 537M instructions beyond Python's own startup (-13%;
sync_protocol.py's 26 classes 8.9 -> 4.6 ms); this module's best of 3 runs read import 9.0 -> 7.7
ms, front end 39.3 -> 35.6 ms, passes 25.7 -> 18.8 ms, codegen 10.2 -> 8.1 ms (84 -> 70 ms).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from operator import itemgetter
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parents[2]

_COLD = r"""
import json, sys, time
t0 = time.perf_counter()
import tkjit
from tkjit import compiler
from tkjit.options import CompileOptions
t1 = time.perf_counter()
path = sys.argv[1]
text = open(path).read()
result = compiler.CompileResult(text, path, CompileOptions.resolve(cache=False))
stages = {}
for stage in ("tkir", "opt", "ptx", "cubin"):
    start = time.perf_counter()
    compiler.advance(result, stage)
    stages[stage] = time.perf_counter() - start
print(json.dumps({"import_s": t1 - t0, "stages_s": stages, "cubin_bytes": len(result.binary)}))
"""

_FRESH = r"""
import json, sys, time
heavy = ("torch", "lark", "numpy", "cuda.bindings", "tkjit.frontend", "tkjit.passes", "tkjit.codegen",
         "tkjit.runtime.toolchain", "subprocess")
launch = sys.argv[2] == "launch"
if launch:
    import torch  # a user has torch before any kernel: not the JIT's cost
t0 = time.perf_counter()
import tkjit
t1 = time.perf_counter()
before = set(sys.modules)
kernel = tkjit.load(sys.argv[1])
binary = kernel.binary
t2 = time.perf_counter()
out = {"import_s": t1 - t0, "load_s": t2 - t1, "from_cache": getattr(kernel._result, "from_cache", None),
       "cubin_bytes": len(binary),
       "imported_by_load": sorted(m for m in heavy if m in sys.modules and m not in before)}
if launch:
    shapes = json.loads(sys.argv[3])
    args = [torch.randn(*shape, device="cuda").to(getattr(torch, dtype)) for shape, dtype in shapes]
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    kernel(*args)
    torch.cuda.synchronize()
    t4 = time.perf_counter()
    kernel(*args)
    torch.cuda.synchronize()
    t5 = time.perf_counter()
    out.update(first_launch_s=t4 - t3, second_launch_s=t5 - t4)
print(json.dumps(out))
"""


def _python(code: str, args: list[str], env: dict[str, str]) -> dict:
    """Run ``code`` in a fresh interpreter that imports this tkjit, with exactly the environment
    ``env`` (see ``_environment``); its last stdout line is JSON."""
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO_ROOT), env.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          cwd=_REPO_ROOT, timeout=600)  # ``python -c`` imports from its cwd first
    if proc.returncode != 0:
        raise RuntimeError(f"the benchmark process failed (exit status {proc.returncode}):\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _environment(tmp: str) -> dict[str, str]:
    """A private cache directory, and Python's bytecode kept (in ``tmp``) as an installed package
    has it, even where PYTHONDONTWRITEBYTECODE is set."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "TKJIT_NO_CACHE")}
    return {**env, "TKJIT_CACHE_DIR": os.path.join(tmp, "cache"),
            "PYTHONPYCACHEPREFIX": os.path.join(tmp, "pycache")}


def _total(run: dict) -> float:
    return sum(run["stages_s"].values())


def measure_cold_compile(path: str | Path, repeats: int = 3) -> dict:
    """Text → cubin with the cubin cache off, in fresh processes: every import and every stage is
    counted. The first process of a new installation also compiles Python's bytecode and builds
    the parser tables (``first_run_s``); the others find both (as every later process of an
    installation does) and the best of them by total is reported, in seconds per stage."""
    names = {"tkir": "front_end_s", "opt": "passes_s", "ptx": "codegen_s", "cubin": "ptxas_s"}
    with tempfile.TemporaryDirectory(prefix="tkjit-bench-") as tmp:
        env = _environment(tmp)
        path = str(Path(path).resolve())
        first = _python(_COLD, [path], env)
        runs = [_python(_COLD, [path], env) for _ in range(repeats)]
    best = min(runs, key=_total)
    return {"kernel": str(path), "import_s": best["import_s"],
            **{names[stage]: seconds for stage, seconds in best["stages_s"].items()},
            "compile_s": _total(best), "first_run_s": first["import_s"] + _total(first),
            "cubin_bytes": best["cubin_bytes"], "repeats": repeats, "target_compile_s": 0.25}


def measure_fresh_process_load(path: str | Path, launch_shapes: list | None = None, repeats: int = 3) -> dict:
    """A cached load in fresh processes: one process compiles ``path`` into a new cache, then each
    run imports tkjit and loads it from there. ``launch_shapes`` (``[[shape, dtype], ...]`` for the
    kernel's tensor arguments, e.g. ``[[[256, 64], "bfloat16"], ...]``) adds the first and second
    launch on the GPU. Seconds; the best of ``repeats`` runs by load time."""
    mode = ["launch", json.dumps(launch_shapes)] if launch_shapes else ["load", "[]"]
    path = str(Path(path).resolve())
    with tempfile.TemporaryDirectory(prefix="tkjit-bench-") as tmp:
        env = _environment(tmp)
        warm = _python(_FRESH, [path, "load", "[]"], env)
        runs = [_python(_FRESH, [path, *mode], env) for _ in range(repeats)]
    best = min(runs, key=itemgetter("load_s"))
    return {"kernel": str(path), "warming_load_s": warm["load_s"], **best, "repeats": repeats,
            "target_load_s": 0.010}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    path = argv[0] if argv else str(_REPO_ROOT / "examples" / "gemm.tk")
    print(json.dumps({"cold_compile": measure_cold_compile(path),
                      "fresh_process_load": measure_fresh_process_load(path)}, indent=2))


if __name__ == "__main__":
    main()
