"""The JIT's own costs, each against raw CUDA or Triton where Triton is importable:

* launch: a tkjit Launcher call vs the fastest raw ``cuLaunchKernel`` of the same cubin that
  Python can make (cuda-python's, ctypes', or from C through tkjit's native extension:
  ``tkjit.runtime.bench_launch.measure_launch_overhead``, ``raw_best_us``), and vs launching a
  trivial Triton kernel, timed the same way (batches of host-timed launches, the median per launch);
* cold compile: ``tkjit.runtime.bench_jit.measure_cold_compile(gemm.tk)`` vs the first call of the
  trivial Triton kernel in a fresh process with an empty cache;
* fresh-process load: ``measure_fresh_process_load(gemm.tk)`` vs that first call with a warm cache.

A piece that is not here (bench_jit not written yet, no Triton, no GPU) is a row that says so.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .context import EXAMPLES
from .rows import MEASURED, NOT_AVAILABLE, Row, first_line

NAME = "jit"
PROBE = Path(__file__).resolve().parent / "triton_add.py"
PROBE_TIMEOUT_S = 180
GEMM = EXAMPLES / "gemm.tk"
TIME_KEYS = (("compile_s", 1.0), ("load_s", 1.0), ("median_s", 1.0), ("seconds", 1.0), ("total_s", 1.0),
             ("median_ms", 1e-3), ("ms", 1e-3), ("total_ms", 1e-3))
"""Where the time is read from a bench_jit result (a dict); a bare number is taken as seconds."""


def cases(mode) -> list[dict]:
    return [{"kind": "launch"}, {"kind": "cold-compile"}, {"kind": "fresh-load"}]


def run(p: dict, ctx, kernels) -> list[Row]:
    return KINDS[p["kind"]](p, ctx)


# ---------------------------------------------------------------- launch overhead

def launch(p: dict, ctx) -> list[Row]:
    from tkjit.runtime import bench_launch
    if ctx.cuda:
        what, raw_name = "launch vs raw cuLaunchKernel", "fastest raw cuLaunchKernel"
    else:
        what, raw_name = "launch vs no-op (host only)", "a no-op launch function (host only, dry run)"
    raw = Row(NAME, what, "add_f32 n=4096", ref_name=raw_name, params=p, status=MEASURED)
    vs_triton = Row(NAME, "launch vs triton", "add_f32 n=4096", ref_name="triton", params=p, status=MEASURED)
    try:
        if ctx.cuda:
            result = bench_launch.measure_launch_overhead()
            raw.ref_ms = result.get("raw_best_us", result["raw_us"]) / 1000
        else:
            result = bench_launch.measure_host_overhead()
            native = "native_launcher_us" in result  # the path a GPU launch would take here
            result["launcher_python_us"] = result["launcher_us"]
            raw.ref_ms = result["native_raw_us" if native else "fake_raw_us"] / 1000
            result["launcher_us"] = result["native_launcher_us" if native else "launcher_us"]
        raw.extra = result
        raw.tkjit_ms = vs_triton.tkjit_ms = result["launcher_us"] / 1000
    except Exception as exc:  # noqa: BLE001
        raw.fail(exc)
        vs_triton.fail(exc)
    why_not = _why_no_triton(ctx)
    if why_not:
        vs_triton.ref_error = why_not
    else:
        try:
            vs_triton.ref_ms = _triton_launch_us(bench_launch) / 1000
        except Exception as exc:  # noqa: BLE001
            vs_triton.ref_error = first_line(exc)
    return [raw.finish(), vs_triton.finish()]


def _triton_launch_us(bench_launch, batches: int = 50, per_batch: int = 100) -> float:
    """The trivial Triton kernel's launch, timed as bench_launch times tkjit's (the same helper)."""
    import torch

    from . import triton_add
    x, y = torch.randn(triton_add.N, device="cuda"), torch.randn(triton_add.N, device="cuda")
    out = torch.full_like(x, float("nan"))
    triton_add.launch(x, y, out)
    torch.cuda.synchronize()
    if not torch.equal(out, x + y):
        raise RuntimeError("the Triton add kernel gave a wrong result")
    times = bench_launch._median_us({"triton_us": lambda: triton_add.launch(x, y, out)}, batches, per_batch,
                                    torch.cuda.synchronize)
    return times["triton_us"]


# ---------------------------------------------------------------- compile and load

def cold_compile(p: dict, ctx) -> list[Row]:
    row = Row(NAME, "cold compile vs triton", "gemm.tk vs triton add", ref_name="triton first call, empty cache",
              params=p, status=MEASURED)
    _tkjit_side(row, "measure_cold_compile")
    _triton_side(row, ctx, warm=False)
    return [row.finish()]


def fresh_load(p: dict, ctx) -> list[Row]:
    row = Row(NAME, "fresh-process load vs triton", "gemm.tk vs triton add", ref_name="triton first call, warm cache",
              params=p, status=MEASURED)
    _tkjit_side(row, "measure_fresh_process_load")
    _triton_side(row, ctx, warm=True)
    return [row.finish()]


def _tkjit_side(row: Row, function: str) -> None:
    try:
        from tkjit.runtime import bench_jit
        measure = getattr(bench_jit, function)
    except (ImportError, AttributeError) as exc:
        row.status = NOT_AVAILABLE
        row.error = f"not available: tkjit.runtime.bench_jit.{function} ({type(exc).__name__})"
        return
    try:
        result = measure(GEMM)
    except Exception as exc:  # noqa: BLE001
        row.fail(exc)
        return
    row.extra["tkjit"] = result if isinstance(result, (dict, int, float)) else repr(result)
    seconds = seconds_of(result)
    if seconds is None:
        row.error = f"bench_jit.{function} gave no time under {', '.join(k for k, _ in TIME_KEYS)} (see JSON)"
    else:
        row.tkjit_ms = seconds * 1000


def seconds_of(result) -> float | None:
    if isinstance(result, (int, float)) and not isinstance(result, bool):
        return float(result)
    if isinstance(result, dict):
        for key, scale in TIME_KEYS:
            value = result.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value) * scale
    return None


def _triton_side(row: Row, ctx, warm: bool) -> None:
    why_not = _why_no_triton(ctx)
    if why_not:
        row.ref_error = why_not
        return
    try:
        with tempfile.TemporaryDirectory(prefix="tkbench-triton-") as cache:
            first = _probe(cache)
            result = _probe(cache) if warm else first
        row.extra["triton"] = result
        row.ref_ms = result["first_call_s"] * 1000
    except Exception as exc:  # noqa: BLE001
        row.ref_error = first_line(exc)


def _probe(cache_dir: str) -> dict:
    """Run triton_add.py in a fresh process with this Triton cache; its JSON line."""
    env = dict(os.environ, TRITON_CACHE_DIR=cache_dir)
    proc = subprocess.run([sys.executable, str(PROBE)], capture_output=True, text=True, env=env,
                          timeout=PROBE_TIMEOUT_S)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        tail = [line for line in proc.stderr.splitlines() if line.strip()][-1:] or ["(no output)"]
        raise RuntimeError(f"the Triton probe exited with status {proc.returncode}: {tail[0]}")
    return json.loads(lines[-1])


def _why_no_triton(ctx) -> str | None:
    if not ctx.cuda:
        return "n/a: Triton needs a GPU (dry run)"
    if not ctx.have_triton:
        return "n/a: triton is not importable here"
    return None


KINDS = {"launch": launch, "cold-compile": cold_compile, "fresh-load": fresh_load}
