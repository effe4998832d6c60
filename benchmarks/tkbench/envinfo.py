"""What the results were measured on: nvidia-smi's view (driver, clocks, power, temperature),
the repository's commit, and — from inside the worker — torch's view of the device and the
versions of everything that matters."""
from __future__ import annotations

import platform
import shutil
import subprocess
import sys

from .context import REPO
from .timing import PAIR_ROUNDS

SMI_FIELDS = ("name", "driver_version", "pstate", "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem",
              "power.draw", "power.limit", "temperature.gpu", "memory.total", "memory.used")
SMI_ESSENTIAL = SMI_FIELDS[:7]
"""Asked for alone when a driver refuses one of the other fields."""


def nvidia_smi() -> dict:
    """The first GPU's SMI_FIELDS (clocks in MHz, power in W, memory in MiB), or why there are none."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"error": "nvidia-smi is not on PATH"}
    found = _query(smi, SMI_FIELDS)
    return _query(smi, SMI_ESSENTIAL) if "error" in found else found


def _query(smi: str, fields: tuple[str, ...]) -> dict:
    try:
        proc = subprocess.run([smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"nvidia-smi: {exc}"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        text = (proc.stderr or proc.stdout).strip()[:200]
        return {"error": f"nvidia-smi exited with status {proc.returncode}: {text}"}
    values = [value.strip() for value in lines[0].split(",")]
    if len(values) != len(fields):
        return {"error": f"nvidia-smi gave {len(values)} fields for {len(fields)}", "raw": lines[0]}
    return dict(zip(fields, values))


def git_info() -> dict:
    """The checkout's commit and whether tracked files differ from it (empty without git)."""
    git = shutil.which("git")
    if git is None or not (REPO / ".git").exists():
        return {}
    try:
        head = subprocess.run([git, "rev-parse", "--verify", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=30)
        status = subprocess.run([git, "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    commit = head.stdout.strip()
    if head.returncode != 0 or len(commit) != 40 or status.returncode != 0:
        return {}   # a copy of the tree without its history (as on a lent GPU machine)
    return {"commit": commit, "dirty": bool(status.stdout.strip())}


def source_info() -> dict:
    """What identifies the code that ran where git cannot: the sha256 of tkjit's .py and .lark
    files (``tkjit.cache.tkjit_source_hash``, the disk cache's own key), which a checkout
    reproduces with ``python -c "from tkjit.cache import tkjit_source_hash as h; print(h())"``.
    A lent GPU machine's copy of the tree may carry a stale ``.git``, so its commit can mislead."""
    try:
        from tkjit.cache import tkjit_source_hash
        return {"tkjit_sources_sha256": tkjit_source_hash()}
    except Exception:  # noqa: BLE001 - provenance is best effort
        return {}


def torch_environment(ctx) -> dict:
    """Inside the worker: the device as torch sees it, and the versions."""
    import torch
    env = {"device": ctx.device, "python": sys.version.split()[0], "platform": platform.platform(),
           "torch": torch.__version__, "torch_cuda": torch.version.cuda, "l2_bytes": ctx.l2_bytes,
           "timing": ("triton.testing.do_bench" if ctx.cuda and ctx.have_triton else
                      ("torch.cuda.Event" if ctx.cuda else "host clock (CPU dry run)"))
           + (f", tkjit and the reference alternated in {PAIR_ROUNDS} rounds" if ctx.cuda else "")}
    env.update(_versions())
    if ctx.cuda:
        props = torch.cuda.get_device_properties(0)
        env.update({"gpu": props.name, "capability": f"{props.major}.{props.minor}",
                    "sms": props.multi_processor_count, "memory_bytes": props.total_memory,
                    "cudnn": torch.backends.cudnn.version()})
    else:
        env["gpu"] = "cpu"
    return env


def _versions() -> dict:
    out = {}
    try:
        import tkjit
        out["tkjit"] = tkjit.__version__
    except Exception as exc:  # noqa: BLE001
        out["tkjit"] = f"not importable: {exc}"
    try:
        from tkjit.runtime.toolchain import ptxas_version
        out["ptxas"] = ptxas_version()
    except Exception as exc:  # noqa: BLE001
        out["ptxas"] = f"not found: {str(exc).splitlines()[0]}"
    try:
        import triton
        out["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        out["triton"] = None
    return out
