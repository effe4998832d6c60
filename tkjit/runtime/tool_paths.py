"""Where ptxas, cuobjdump and nvdisasm are: ``find_tool(name)``.

Apart from ``toolchain.py`` (which runs them and reads ptxas's report) because every cached load
needs ptxas's path for the cache key (cache.py memoizes its version by path, size and mtime):
this module imports nothing that toolchain's subprocess, regexes and report classes would cost.

A tool is looked up in this order: the environment variable ``TKJIT_PTXAS`` / ``TKJIT_CUOBJDUMP``
/ ``TKJIT_NVDISASM``; NVIDIA's wheels (``nvidia/cu13/bin`` from ``nvidia-cuda-nvcc``, and the
CUDA 12 wheel layouts); ``PATH``; ``/usr/local/cuda/bin``.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from ..errors import ToolchainError

_ENV_VARS = {"ptxas": "TKJIT_PTXAS", "cuobjdump": "TKJIT_CUOBJDUMP", "nvdisasm": "TKJIT_NVDISASM"}
_WHEEL_BIN_DIRS = ("cu13/bin", "cuda_nvcc/bin", "cuda_cuobjdump/bin", "cuda_nvdisasm/bin")
_SYSTEM_BIN_DIR = "/usr/local/cuda/bin"


def _wheel_bin_dirs() -> list[Path]:
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    return [Path(root) / sub for root in roots for sub in _WHEEL_BIN_DIRS]


def find_tool(name: str, env: dict[str, str] | None = None) -> str:
    """The path of ``ptxas``, ``cuobjdump`` or ``nvdisasm``; ToolchainError if it is nowhere.
    ``env`` holds the TKJIT_<TOOL> overrides (default: the process's Config)."""
    if env is None:
        from ..config import get_config
        env = dict(get_config().tools)
    override = env.get(_ENV_VARS[name], "")
    if override:
        if os.path.isfile(override) and os.access(override, os.X_OK):
            return override
        raise ToolchainError(f"{_ENV_VARS[name]}={override} is not an executable file")
    for directory in _wheel_bin_dirs():
        candidate = directory / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    on_path = shutil.which(name)
    if on_path:
        return on_path
    candidate = Path(_SYSTEM_BIN_DIR) / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    raise ToolchainError(
        f"cannot find {name}: install NVIDIA's CUDA tool wheels with `pip install tkjit[cuda]`, "
        f"put {name} on PATH, or set {_ENV_VARS[name]}=/path/to/{name}")
