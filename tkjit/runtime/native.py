"""The native launch path: fastlaunch.c, built once with the system's C compiler and cached.

``module()`` returns the compiled extension ``tkjit_fastlaunch`` or None. The first call in a
process looks for it in tkjit's disk cache under a key made of the C source, the compile
flags and Python's ABI (version, extension suffix, machine); on a miss it compiles
fastlaunch.c with sysconfig's ``CC`` (CPython's headers only: no torch or CUDA headers) into
the cache, so an installation compiles it once (about 0.3 s). Where there is no compiler, no
``Python.h`` or the build fails, ``module()`` is None and ``status()`` says why in one line:
launchers then use the Python fast path, which checks the same things (launcher.py), and
``explain()`` shows that line. ``TKJIT_NATIVE_LAUNCH=0`` turns the native path off.

``launch_spec()`` turns a Launcher's prepared pieces into the plain data ``Launch(spec)``
takes; ``grid_program()`` compiles a grid expression into the postfix program fastlaunch.c
evaluates (with overflow checks: a result that does not fit in 64 bits is computed by Python).
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import os
import sys
import threading
from pathlib import Path

SOURCE = Path(__file__).with_name("fastlaunch.c")
NAME = "tkjit_fastlaunch"
FILE = NAME + importlib.machinery.EXTENSION_SUFFIXES[0]
"""The extension's file name: this interpreter's own suffix (``.cpython-312-x86_64-linux-gnu.so``)."""
CFLAGS = ("-O2", "-fPIC", "-shared", "-fno-strict-aliasing", "-Wall")
BUILD_TIMEOUT_S = 120

_lock = threading.Lock()
_state: dict = {}
"""``module`` (the extension or None) and ``status`` (one line), once looked up."""

# Opcodes of fastlaunch.c's grid programs.
G_CONST, G_DIM, G_NUM_SMS, G_CDIV, G_MUL, G_ADD, G_MIN, G_MAX = range(8)
_BINARY = {"cdiv": G_CDIV, "mul": G_MUL, "add": G_ADD, "min": G_MIN, "max": G_MAX}
P_TENSOR, P_F32, P_I32 = 0, 1, 2


def module():
    """The extension, built or found in the cache on first use; None where it cannot be."""
    if "module" not in _state:
        with _lock:
            if "module" not in _state:
                _state["module"], _state["status"] = _find_or_build()
    return _state["module"]


def status() -> str:
    """One line: which launch path launchers take here, and why."""
    module()
    return _state["status"]


def compiler_command() -> list[str] | None:
    """sysconfig's ``CC`` (e.g. ``gcc -pthread``) when its program is on PATH, else ``cc``; None if neither."""
    import shlex
    import shutil
    import sysconfig
    cc = shlex.split(sysconfig.get_config_var("CC") or "")
    if cc and shutil.which(cc[0]):
        return cc
    return ["cc"] if shutil.which("cc") else None


def build_key(source: bytes, flags: tuple[str, ...] = CFLAGS) -> str:
    """The cache key: the C source, the flags and the Python ABI the binary is built for (the
    interpreter's version and build, its extension suffix, the machine)."""
    h = hashlib.sha256(b"tkjit native launch path\0")
    for part in (source, " ".join(flags).encode(), sys.version.encode(), FILE.encode(),
                 f"{sys.platform} {os.uname().machine}".encode(), sys.implementation.cache_tag.encode()):
        h.update(len(part).to_bytes(8, "little") + part)
    return h.hexdigest()


def _find_or_build():
    from ..config import get_config
    config = get_config()
    if not config.native_launch:
        return None, "Python launch path: the native one is turned off (TKJIT_NATIVE_LAUNCH=0)"
    if os.name != "posix":
        return None, f"Python launch path: the native one is built on POSIX systems only (this is {os.name})"
    try:
        path = _cached_binary(config, build_key(SOURCE.read_bytes()), _compile)
        return _load(path), f"native launch path (C: {path})"
    except _BuildError as e:
        return None, f"Python launch path: {e}"
    except (OSError, ImportError) as e:
        return None, f"Python launch path: the native one could not be loaded: {e}"


class _BuildError(Exception):
    pass


def _compile() -> bytes:
    """Compile fastlaunch.c into an extension; its bytes. _BuildError says why it cannot be."""
    import shlex
    import subprocess  # only when building: imports a process that finds it cached skips
    import sysconfig
    import tempfile
    cc = compiler_command()
    if cc is None:
        raise _BuildError("no C compiler here (sysconfig CC or cc) to build the native one")
    include = sysconfig.get_paths().get("include", "")
    if not os.path.isfile(os.path.join(include, "Python.h")):
        raise _BuildError(f"no Python.h in {include or '(no include dir)'} to build the native one")
    with tempfile.TemporaryDirectory(prefix="tkjit-native-") as tmp:
        out = os.path.join(tmp, FILE)
        cmd = [*cc, *CFLAGS, f"-I{include}", str(SOURCE), "-o", out]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as e:
            raise _BuildError(f"building the native one failed: {shlex.join(cmd)}: {e}") from None
        if proc.returncode != 0:
            first = next((line for line in proc.stderr.splitlines() if "error" in line), proc.stderr.strip())
            raise _BuildError(f"building the native one failed: {shlex.join(cmd)} exited with status "
                              f"{proc.returncode}: {first[:300]}")
        with open(out, "rb") as f:
            return f.read()


def _cached_binary(config, key: str, build) -> str:
    """The extension's path: in the disk cache (verified), else built and put there. With the
    cache off (TKJIT_NO_CACHE), built into a private directory for this process."""
    if config.no_cache:
        import tempfile
        directory = tempfile.mkdtemp(prefix="tkjit-native-")
        path = os.path.join(directory, FILE)
        with open(path, "wb") as f:
            f.write(build())
        return path
    from ..cache import DiskCache
    cache = DiskCache(config.cache_dir)
    entry = cache.get(key)
    if entry is None or FILE not in entry.files:
        entry = cache.put(key, {FILE: build()}, {"name": f"{NAME} (native launch path)",
                                                 "python": sys.version.split()[0]})
    return str(entry.path / FILE)


def _load(path: str):
    import importlib.util
    loader = importlib.machinery.ExtensionFileLoader(NAME, path)
    spec = importlib.util.spec_from_file_location(NAME, path, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------- specs

def grid_program(expr, names: tuple[str, ...]) -> tuple[int, ...]:
    """A grid expression (already validated by launcher.grid_expr_source) as a postfix program."""
    if isinstance(expr, int):
        return (G_CONST, expr)
    op, *operands = expr
    if op == "dim":
        return (G_DIM, names.index(operands[0]))
    if op == "num_sms":
        return (G_NUM_SMS,)
    a, b = (grid_program(x, names) for x in operands)
    return (*a, *b, _BINARY[op])


def launch_spec(*, launch: int, function: int, params, dims: tuple[str, ...], dtypes: dict, grid_exprs,
                block, smem: int, device: int | None, num_sms: int | None, maps, callbacks: dict) -> dict:
    """The dict ``Launch(spec)`` takes (fastlaunch.c, Launch_init)."""
    entries = []
    for p in params:
        if p.is_tensor:
            codes = tuple(d if isinstance(d, int) else -1 - dims.index(d) for d in p.dims)
            entries.append((P_TENSOR, dtypes[p.dtype], codes))
        else:
            entries.append((P_F32 if p.dtype == "f32" else P_I32, None, ()))
    exprs = list(grid_exprs) + [1] * (3 - len(grid_exprs))
    return {"launch": launch, "function": function, "params": entries, "ndims": len(dims),
            "grid": tuple(grid_program(e, dims) for e in exprs), "block": tuple(block), "smem": smem,
            "device": device, "num_sms": num_sms if num_sms is not None else 0,
            "maps": list(maps), "map_params": tuple(m.spec.param for m in maps), **callbacks}
