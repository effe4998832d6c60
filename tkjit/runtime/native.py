"""The native launch path: fastlaunch.c, built once with the system's C compiler and cached.

``module()`` returns the compiled extension ``tkjit_fastlaunch`` or None. The first call in a
process looks for it in tkjit's disk cache under a key made of the C source, the compile
flags and Python's ABI (version, extension suffix, machine); on a miss it compiles
fastlaunch.c with sysconfig's ``CC`` (CPython's headers only: no torch or CUDA headers) into
the cache, so an installation compiles it once (about 0.3 s). Where there is no compiler, no
``Python.h`` or the build fails, ``module()`` is None and ``status()`` says why in one line:
launchers then use the Python fast path, which checks the same things (launcher.py), and
``explain()`` shows that line. ``TKJIT_NATIVE_LAUNCH=0`` turns the native path off.

Where the C one builds, a second variant is preferred: ``tkjit_fastlaunch_torch``, fastlaunch.c
compiled with ``-DTKJIT_TORCH_READER`` and linked with fastlaunch_torch.cpp against torch's headers
and libraries (libc10, libtorch_python; the system C++ compiler, about 13 s once, cached under a
key that adds the C++ source, its flags and torch's version). It reads an exact torch.Tensor's
metadata through torch's C++ API instead of five Python attribute calls (same values, same
refusals): a launch of three tensors costs 3.2 µs against the C one's 3.8 µs and a raw
cuLaunchKernel's 2.9 µs (H200, 2026-11-21). Since its build is too slow for a first launch to wait
on, by default a process takes it only where it is already in the disk cache; otherwise the
process launches through the C one and starts the build in a detached background process
(``python -m tkjit.runtime.native --build-torch``, one at a time per cache), so that the next
process finds it. A build that fails is remembered in the cache and not retried.
``TKJIT_NATIVE_LAUNCH=torch`` builds it now (before the first launch) and ``=c`` keeps to the C one.
``module()`` is the variant launchers take, ``status()`` says which and why, ``c_module()`` and
``torch_module()`` give each (the latter built on demand).

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
TORCH_SOURCE = Path(__file__).with_name("fastlaunch_torch.cpp")
TORCH_NAME = "tkjit_fastlaunch_torch"
TORCH_FILE = TORCH_NAME + importlib.machinery.EXTENSION_SUFFIXES[0]
TORCH_CFLAGS = ("-O2", "-fPIC", "-fno-strict-aliasing", "-Wall", "-DTKJIT_TORCH_READER")
TORCH_CXXFLAGS = ("-O2", "-fPIC", "-std=c++20", "-Wall", "-Wno-unused-function")
BUILD_TIMEOUT_S = 120

_lock = threading.Lock()
_state: dict = {}
"""``module`` (the extension launchers use, or None), ``status`` (one line), ``c_module`` and
``torch_module`` (each variant or None), once looked up."""

# Opcodes of fastlaunch.c's grid programs.
G_CONST, G_DIM, G_NUM_SMS, G_CDIV, G_MUL, G_ADD, G_MIN, G_MAX, G_GT, G_SUB, G_FDIV = range(11)
_BINARY = {"cdiv": G_CDIV, "mul": G_MUL, "add": G_ADD, "min": G_MIN, "max": G_MAX, "gt": G_GT,
           "sub": G_SUB, "fdiv": G_FDIV}
P_TENSOR, P_F32, P_I32 = 0, 1, 2


def module():
    """The extension, built or found in the cache on first use; None where it cannot be."""
    if "module" not in _state:
        with _lock:
            if "module" not in _state:
                from ..config import get_config
                _state["c_module"], c_status = _find_or_build()
                _state["status"] = c_status
                _state["module"] = _state["c_module"]
                mode = get_config().native_torch
                if _state["c_module"] is not None and mode != "no":
                    variant, _state["status"] = (_find_or_build_torch(c_status) if mode == "build"
                                                 else _find_torch_or_build_later(c_status))
                    if variant is not None:
                        _state["torch_module"] = variant
                        _state["module"] = variant
    return _state["module"]


def c_module():
    """The C-only extension (tensor metadata through Python attributes); None where it cannot be built."""
    module()
    return _state["c_module"]


def torch_module():
    """The variant with torch's C++ tensor reads, built now if it is not in the cache (whether or
    not launchers take it); None where it cannot be built."""
    module()
    if "torch_module" not in _state:
        with _lock:
            if "torch_module" not in _state:
                c_status = _state["status"]
                _state["torch_module"] = (_find_or_build_torch(c_status)[0]
                                          if _state["c_module"] is not None else None)
    return _state["torch_module"]


def prepare() -> str:
    """Make this process launch as a warm installation does: build the torch variant now if the
    configuration takes it by default and the cache lacks it, and take it (the benchmarks call
    this, so that a fresh machine's figures are not the C one's). The status line."""
    from ..config import get_config
    module()
    if get_config().native_torch == "auto" and _state["module"] is _state["c_module"] is not None:
        variant = torch_module()
        if variant is not None:
            with _lock:
                _state["module"] = variant
                _state["status"] = _torch_status(variant.__file__)
    return status()


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


def _torch_key(torch) -> tuple[str, tuple[str, ...]]:
    """The torch variant's cache key and compile flags (its sources, flags, torch's version and ABI)."""
    flags = (*TORCH_CFLAGS, *TORCH_CXXFLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}")
    source = SOURCE.read_bytes() + b"\0" + TORCH_SOURCE.read_bytes() + b"\0" + torch.__version__.encode()
    return build_key(source, flags), flags


def _failure_key(key: str) -> str:
    """Where a failed background build of ``key`` is remembered (apart from the build's own entry)."""
    return hashlib.sha256(b"failed build\0" + key.encode()).hexdigest()


FAILED_FILE = "why.txt"


def _find_or_build_torch(c_status: str):
    """(the torch variant or None, the status line): the C one's line says why not where it is None."""
    from ..config import get_config
    try:
        import torch
        key, flags = _torch_key(torch)

        def build():
            import torch.utils.cpp_extension as cpp  # only to build: it imports setuptools
            return _compile_torch(cpp.include_paths(), cpp.library_paths(), flags)
        path = _cached_binary(get_config(), key, build, TORCH_FILE, TORCH_NAME)
        return _load(path, TORCH_NAME), _torch_status(path)
    except _BuildError as e:
        why = str(e)
    except (OSError, ImportError, AttributeError) as e:
        why = f"could not be loaded: {e}"
    return None, f"{c_status}; torch's C++ tensor reads: {why}"


def _torch_status(path) -> str:
    return f"native launch path (C with torch's C++ tensor reads: {path})"


def _find_torch_or_build_later(c_status: str):
    """The default: the torch variant where the disk cache has it; else None, and its build
    started in the background for the next process (or why not, in the status line)."""
    from ..config import get_config
    config = get_config()
    prefix = f"{c_status}; torch's C++ tensor reads"
    if config.no_cache:
        return None, f"{prefix}: not built (the disk cache is off, TKJIT_NO_CACHE; TKJIT_NATIVE_LAUNCH=torch builds it)"
    try:
        import torch
        key, _ = _torch_key(torch)
    except (ImportError, AttributeError) as e:
        return None, f"{prefix}: no usable torch ({e})"
    from ..cache import DiskCache
    cache = DiskCache(config.cache_dir)
    entry = cache.get(key)
    if entry is not None and TORCH_FILE in entry.files:
        path = entry.path / TORCH_FILE
        try:
            return _load(str(path), TORCH_NAME), _torch_status(path)
        except (OSError, ImportError) as e:
            return None, f"{prefix}: could not be loaded: {e}"
    failed = cache.get(_failure_key(key))
    if failed is not None and FAILED_FILE in failed.files:
        why = failed.files[FAILED_FILE].decode(errors="replace")
        return None, f"{prefix}: its build failed ({why}); TKJIT_NATIVE_LAUNCH=torch tries again"
    return None, f"{prefix}: {_start_background_build(config)}"


def _build_lock(config):
    from filelock import FileLock
    config.cache_dir.mkdir(parents=True, mode=0o700, exist_ok=True)
    return FileLock(str(config.cache_dir / "native-torch-build.lock"), timeout=0)


def _start_background_build(config) -> str:
    """Start ``python -m tkjit.runtime.native --build-torch`` detached, unless one is running for
    this cache; what happened, for the status line."""
    import subprocess
    from filelock import Timeout
    try:
        with _build_lock(config):
            pass
    except Timeout:
        return "being built by another process, for the next one"
    except OSError as e:
        return f"not built (the cache's lock: {e})"
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, TKJIT_CACHE_DIR=str(config.cache_dir))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH", "")]))
    # Through a shell that puts the builder in the background and exits at once: the builder is
    # nobody's child here (no zombie, no "still running" ResourceWarning) and outlives this process.
    command = [sys.executable, "-m", "tkjit.runtime.native", "--build-torch"]
    try:
        subprocess.run(["/bin/sh", "-c", '"$@" </dev/null >/dev/null 2>&1 &', "sh", *command], env=env,
                       cwd=package_root, start_new_session=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return f"not built (could not start the background build: {e})"
    _state["builder"] = True  # tests look for it
    return "being built in the background for the next process"


def _build_in_background() -> int:
    """The detached builder: under the cache's build lock, build the torch variant into the
    cache, or remember why it failed."""
    from filelock import Timeout

    from ..cache import DiskCache
    from ..config import get_config
    config = get_config()
    try:
        with _build_lock(config):
            import torch
            key, _ = _torch_key(torch)
            if _find_or_build()[0] is None:
                return 1
            variant, line = _find_or_build_torch("")
            if variant is None:
                why = line.split("torch's C++ tensor reads: ", 1)[-1]
                DiskCache(config.cache_dir).put(_failure_key(key), {FAILED_FILE: why.encode()},
                                                {"name": f"{TORCH_NAME} (a failed build)"})
                return 1
            return 0
    except Timeout:
        return 0


class _BuildError(Exception):
    pass


def _compile() -> bytes:
    """Compile fastlaunch.c into an extension; its bytes. _BuildError says why it cannot be."""
    import tempfile
    cc = compiler_command()
    if cc is None:
        raise _BuildError("no C compiler here (sysconfig CC or cc) to build the native one")
    include = _python_include()
    with tempfile.TemporaryDirectory(prefix="tkjit-native-") as tmp:
        out = os.path.join(tmp, FILE)
        _run([*cc, *CFLAGS, f"-I{include}", str(SOURCE), "-o", out])
        with open(out, "rb") as f:
            return f.read()


def _python_include() -> str:
    import sysconfig
    include = sysconfig.get_paths().get("include", "")
    if not os.path.isfile(os.path.join(include, "Python.h")):
        raise _BuildError(f"no Python.h in {include or '(no include dir)'} to build the native one")
    return include


def _cxx_command() -> list[str] | None:
    """sysconfig's ``CXX`` when its program is on PATH, else ``c++``; None if neither."""
    import shlex
    import shutil
    import sysconfig
    cxx = shlex.split(sysconfig.get_config_var("CXX") or "")
    if cxx and shutil.which(cxx[0]):
        return cxx
    return ["c++"] if shutil.which("c++") else None


def _run(cmd: list[str]) -> None:
    """One compiler command; _BuildError with its first error line when it fails."""
    import shlex
    import subprocess  # only when building: imports a process that finds it cached skips
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as e:
        raise _BuildError(f"building the native one failed: {shlex.join(cmd)}: {e}") from None
    if proc.returncode != 0:
        first = next((line for line in proc.stderr.splitlines() if "error" in line), proc.stderr.strip())
        raise _BuildError(f"building the native one failed: {shlex.join(cmd)} exited with status "
                          f"{proc.returncode}: {first[:300]}")


def _compile_torch(includes: list[str], libraries: list[str], flags: tuple[str, ...]) -> bytes:
    """fastlaunch.c (with -DTKJIT_TORCH_READER) and fastlaunch_torch.cpp, linked against torch's
    libraries (found at run time through an rpath); the extension's bytes."""
    import tempfile
    cc, cxx = compiler_command(), _cxx_command()
    if cc is None or cxx is None:
        raise _BuildError("no C and C++ compiler here to build it")
    include = _python_include()
    abi = flags[len(TORCH_CFLAGS) + len(TORCH_CXXFLAGS):]
    with tempfile.TemporaryDirectory(prefix="tkjit-native-") as tmp:
        c_obj, cxx_obj, out = (os.path.join(tmp, name) for name in ("fastlaunch.o", "torch.o", TORCH_FILE))
        _run([*cc, *TORCH_CFLAGS, f"-I{include}", "-c", str(SOURCE), "-o", c_obj])
        _run([*cxx, *TORCH_CXXFLAGS, *abi, f"-I{include}", *(f"-I{d}" for d in includes), "-c",
              str(TORCH_SOURCE), "-o", cxx_obj])
        _run([*cxx, "-shared", c_obj, cxx_obj, "-o", out, *(f"-L{d}" for d in libraries),
              *(f"-Wl,-rpath,{d}" for d in libraries), "-lc10", "-ltorch_python"])
        with open(out, "rb") as f:
            return f.read()


def _cached_binary(config, key: str, build, file: str = FILE, name: str = NAME) -> str:
    """The extension's path: in the disk cache (verified), else built and put there. With the
    cache off (TKJIT_NO_CACHE), built into a private directory for this process."""
    if config.no_cache:
        import tempfile
        directory = tempfile.mkdtemp(prefix="tkjit-native-")
        path = os.path.join(directory, file)
        with open(path, "wb") as f:
            f.write(build())
        return path
    from ..cache import DiskCache
    cache = DiskCache(config.cache_dir)
    entry = cache.get(key)
    if entry is None or file not in entry.files:
        entry = cache.put(key, {file: build()}, {"name": f"{name} (native launch path)",
                                                 "python": sys.version.split()[0]})
    return str(entry.path / file)


def _load(path: str, name: str = NAME):
    import importlib.util
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
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
                block, smem: int, device: int | None, num_sms: int | None, maps, callbacks: dict,
                row_multiples: dict | None = None, checks=()) -> dict:
    """The dict ``Launch(spec)`` takes (fastlaunch.c, Launch_init)."""
    from .overlap import ITEMSIZE
    entries = []
    for p in params:
        if p.is_tensor:
            codes = tuple(d if isinstance(d, int) else -1 - dims.index(d) for d in p.dims)
            entries.append((P_TENSOR, dtypes[p.dtype], codes, ITEMSIZE[p.dtype], int(p.writes),
                            int(p.strides == "map")))  # a view goes as it is: its maps take its strides
        else:
            entries.append((P_F32 if p.dtype == "f32" else P_I32, None, ()))
    exprs = list(grid_exprs) + [1] * (3 - len(grid_exprs))
    return {"launch": launch, "function": function, "params": entries, "ndims": len(dims),
            "grid": tuple(grid_program(e, dims) for e in exprs), "block": tuple(block), "smem": smem,
            "dim_multiples": tuple((row_multiples or {}).get(d, (1,))[0] for d in dims),
            "device": device, "num_sms": num_sms if num_sms is not None else 0,
            "maps": list(maps), "map_params": tuple(m.spec.param for m in maps),
            "maps_strided": [m.strided for m in maps], "map_fallback": tuple(m.spec.fallback for m in maps),
            "checks": tuple(grid_program(e, dims) for e in checks), **callbacks}


if __name__ == "__main__" and sys.argv[1:] == ["--build-torch"]:
    sys.exit(_build_in_background())
