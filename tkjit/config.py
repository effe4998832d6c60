"""Every environment switch tkjit honours, read once into one object."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .frozen import Frozen


TOOL_VARIABLES = ("TKJIT_PTXAS", "TKJIT_CUOBJDUMP", "TKJIT_NVDISASM")


def _flag(env: dict[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


@dataclass(unsafe_hash=True)
class Config(Frozen):
    """The environment's switches, read once (``Config.from_env()``; ``get_config()`` keeps one)."""

    cache_dir: Path
    """TKJIT_CACHE_DIR, else the platform's user cache directory."""
    dump_dir: Path | None = None
    """TKJIT_DUMP=<dir>: write every stage, every pass's IR and the decision log there."""
    debug: bool = False
    """TKJIT_DEBUG=1: verify the IR after every pass."""
    no_cache: bool = False
    """TKJIT_NO_CACHE=1: bypass the disk cache (neither read nor written)."""
    backend: str | None = None
    """TKJIT_BACKEND=gpu|interpret: force a backend (default: gpu when one is present)."""
    arch: str = "sm_90a"
    """TKJIT_ARCH: the target architecture."""
    native_launch: bool = True
    """TKJIT_NATIVE_LAUNCH=0: launch through the Python fast path, never the C one (runtime/native.py)."""
    native_torch: str = "auto"
    """Whether the native path reads tensors through torch's C++ API (runtime/native.py):
    ``auto`` (default) where that variant is in the disk cache, else the C one while it is built
    in the background for the next process; ``build`` (TKJIT_NATIVE_LAUNCH=torch) builds it now,
    before the first launch; ``no`` (TKJIT_NATIVE_LAUNCH=c) keeps to the C one."""
    lowering: str = "auto"
    """TKJIT_LOWERING=auto|general: how the Hopper backend lowers kernels (options.LOWERINGS)."""
    require_hopper: bool = False
    """TKJIT_REQUIRE_HOPPER=1: a kernel the Hopper path cannot lower is an error, not a warning."""
    checked: bool = False
    """TKJIT_CHECKED=1 (or TKJIT_DEBUG=1 unless TKJIT_CHECKED=0): checked mode, run-time checks of
    coordinates, divisions and loop steps in GPU launches too (passes/checks.py)."""
    tools: tuple[tuple[str, str], ...] = ()
    """TKJIT_PTXAS / TKJIT_CUOBJDUMP / TKJIT_NVDISASM: explicit paths of NVIDIA's tools, as
    (variable, path) pairs; tools not named here are looked for in the CUDA wheels, then PATH."""

    @staticmethod
    def from_env(env: dict[str, str] | None = None) -> "Config":
        env = dict(os.environ if env is None else env)
        cache = env.get("TKJIT_CACHE_DIR")
        if not cache:
            import platformdirs
            cache = platformdirs.user_cache_dir("tkjit", appauthor=False)
        dump = env.get("TKJIT_DUMP") or None
        cache_dir = Path(cache).expanduser()
        no_cache = _flag(env, "TKJIT_NO_CACHE")
        problem = None if no_cache else cache_dir_problem(cache_dir)
        if problem is not None:
            import warnings
            warnings.warn(f"tkjit: {problem}; the disk cache is off (set TKJIT_CACHE_DIR to a "
                          "directory of your own)", RuntimeWarning, stacklevel=2)
            no_cache = True
        return Config(
            cache_dir=cache_dir,
            dump_dir=Path(dump).expanduser() if dump else None,
            debug=_flag(env, "TKJIT_DEBUG"),
            no_cache=no_cache,
            backend=(env.get("TKJIT_BACKEND") or None),
            arch=env.get("TKJIT_ARCH") or "sm_90a",
            native_launch=env.get("TKJIT_NATIVE_LAUNCH", "1").strip().lower() not in ("0", "false", "no", "off"),
            native_torch={"torch": "build", "c": "no"}.get(env.get("TKJIT_NATIVE_LAUNCH", "").strip().lower(), "auto"),
            lowering=(env.get("TKJIT_LOWERING") or "auto").strip().lower(),
            require_hopper=_flag(env, "TKJIT_REQUIRE_HOPPER"),
            checked=_flag(env, "TKJIT_CHECKED") if env.get("TKJIT_CHECKED", "").strip() else _flag(env, "TKJIT_DEBUG"),
            tools=tuple((var, env[var]) for var in TOOL_VARIABLES if env.get(var)),
        )


def cache_dir_problem(path: Path) -> str | None:
    """Why an existing cache directory cannot be trusted, or None (a missing one is made 0700):
    not a directory, another user's, or writable by everyone -- anyone who can write there can
    plant a binary that tkjit would launch (pip and ccache refuse such a directory too).
    Group-writable is allowed: a umask of 002 makes every directory so."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"the cache directory {path} cannot be read ({e.strerror})"
    import stat
    if not stat.S_ISDIR(st.st_mode):
        return f"the cache directory {path} is not a directory"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"the cache directory {path} belongs to another user (uid {st.st_uid})"
    if st.st_mode & stat.S_IWOTH:
        return f"the cache directory {path} is writable by every user (mode {stat.S_IMODE(st.st_mode):o})"
    return None


_current: Config | None = None


def get_config() -> Config:
    """The process's configuration, read from the environment on first use."""
    global _current
    if _current is None:
        _current = Config.from_env()
    return _current


def reset_config() -> None:
    """Forget the cached configuration (tests that change the environment call this)."""
    global _current
    _current = None
