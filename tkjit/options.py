"""CompileOptions: what one compilation was asked for, resolved once from arguments and Config.

The compiler and the passes read options only from this object (never from the environment);
``key()`` is the part that changes compiled output and therefore goes into the cache key.
"""
from __future__ import annotations

import math

import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from .config import Config, get_config
from .errors import TkError
from .frozen import Frozen

BACKENDS = ("gpu", "interpret")
LOWERINGS = ("auto", "general")
"""How the Hopper backend lowers a kernel: ``general`` (the op-by-op lowering of every tile
program; a kernel it cannot take is refused with the reason) or ``auto`` (the general lowering,
and the register-tile backend for a kernel it does not take; docs/hopper-codegen.md)."""
RETIRED_LOWERINGS = {"template": "the GEMM and attention templates were deleted on 2026-11-27: "
                                 "the general lowering takes every kernel they took "
                                 "(lowering='auto' or 'general')"}
"""Lowerings that existed once, and what replaced them (the error names it)."""
ConstantValue = int | float | bool


@dataclass(unsafe_hash=True)
class CompileOptions(Frozen):
    """What one compilation was asked for (``resolve()`` fills in the rest from ``Config``)."""

    constants: tuple[tuple[str, ConstantValue], ...] = ()
    """Overrides of the kernel's ``<NAME = default>`` constants, sorted by name."""
    pipeline: str | None = None
    """A pass pipeline string; None means the default pipeline."""
    arch: str = "sm_90a"
    debug: bool = False
    """Verify the IR after every pass (and keep tracebacks on the command line)."""
    cache: bool = True
    """Read and write the disk cache for the binary stages."""
    backend: str | None = None
    """``gpu`` or ``interpret`` forces a backend; None picks by where the arguments live."""
    dump_dir: Path | None = None
    """Write every stage, every pass's IR and the decision log under ``dump_dir/<kernel>/``."""
    unaligned_rows: bool = False
    """Also handle tensors whose rows TMA cannot address (not a multiple of 16 bytes) with the
    copying fallback. Off, the Hopper GEMM leaves that fallback out, which makes ptxas about 40%
    faster; a kernel object compiles the variant with it at the first launch that needs it."""
    strided: bool = False
    """Tensors' strides as kernel parameters (``.s64``, after the named dims): the variant that
    takes any view whose last dimension is contiguous, where the kernel addresses a tensor itself
    (the register-tile backend, the general lowering's fragment and vector accesses). Off, a
    kernel takes row-major tensors and views that only its TMA maps read; a kernel object compiles
    this variant at the first launch that needs it (runtime/strides.py)."""
    lowering: str = "auto"
    """``auto`` or ``general`` (``LOWERINGS``)."""
    require_hopper: bool = False
    """A kernel the Hopper path cannot lower is an error at the op that stops it (else a warning
    for a kernel with a matrix product, and the register-tile backend runs it)."""
    checked: bool = False
    """Checked mode (passes/checks.py): run-time checks of tile coordinates, integer divisions
    and loop steps on the GPU too, reported at the kernel's line:col like the interpreter's."""

    @staticmethod
    def resolve(*, constants: Mapping[str, ConstantValue] | None = None, pipeline: str | None = None,
                debug: bool | None = None, cache: bool | None = None, backend: str | None = None,
                lowering: str | None = None, require_hopper: bool | None = None,
                checked: bool | None = None, config: Config | None = None) -> "CompileOptions":
        """Explicit arguments win; what is left unsaid comes from ``config`` (the environment)."""
        config = config or get_config()
        backend = backend if backend is not None else config.backend
        if backend is not None and backend not in BACKENDS:
            raise TkError(f"unknown backend '{backend}' (expected {' or '.join(BACKENDS)})")
        lowering = lowering if lowering is not None else config.lowering
        if lowering in RETIRED_LOWERINGS:
            raise TkError(f"lowering '{lowering}' is gone: {RETIRED_LOWERINGS[lowering]}")
        if lowering not in LOWERINGS:
            raise TkError(f"unknown lowering '{lowering}' (expected {', '.join(LOWERINGS)})")
        if pipeline is not None:
            from .passes import Pipeline
            pipeline = str(Pipeline.parse(pipeline))  # refuse a bad pipeline now, keep it canonical
        return CompileOptions(
            constants=_check_constants(constants or {}),
            pipeline=pipeline,
            arch=config.arch,
            debug=config.debug if debug is None else bool(debug),
            cache=(not config.no_cache) if cache is None else bool(cache),
            backend=backend,
            dump_dir=config.dump_dir,
            lowering=lowering,
            require_hopper=config.require_hopper if require_hopper is None else bool(require_hopper),
            checked=config.checked if checked is None else bool(checked),
        )

    @property
    def runs_checks(self) -> bool:
        """Checked mode, or a pipeline of one's own that names the ``checks`` pass: the kernel has
        check ops, its PTX the error buffer parameter."""
        if self.checked:
            return True
        return self.pipeline is not None and "checks" in [p.split("{")[0].strip() for p in self.pipeline.split(",")]

    def key(self) -> dict:
        """The options that change compiled output, as JSON (arch is keyed separately). The default
        pipeline is keyed as null: what it is is tkjit source, which the key hashes anyway (and so
        the key needs no import of the passes)."""
        key = {"constants": [[name, _keyable(value)] for name, value in self.constants],
               "pipeline": self.pipeline}
        if self.unaligned_rows:
            key["unaligned_rows"] = True
        if self.strided:
            key["strided"] = True
        if self.lowering != "auto":
            key["lowering"] = self.lowering
        if self.require_hopper:
            key["require_hopper"] = True
        if self.checked:
            key["checked"] = True
        return key


def _keyable(value: ConstantValue):
    """JSON has no NaN or infinity: such a float is keyed by its repr (the front end refuses it,
    with a location; the key must only not crash first)."""
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": repr(value)}
    return value


def _check_constants(constants: Mapping[str, ConstantValue]) -> tuple[tuple[str, ConstantValue], ...]:
    if not isinstance(constants, Mapping):
        raise TkError(f"constants must be a dict of name to value, got {type(constants).__name__}")
    checked = {}
    for name, value in constants.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise TkError(f"constant name {name!r} is not a valid name")
        checked[name] = _constant_value(name, value)
    return tuple(sorted(checked.items()))


def _constant_value(name: str, value: object) -> ConstantValue:
    """Plain Python bool, int or float (numpy scalars are accepted and converted)."""
    numpy_kind = getattr(getattr(value, "dtype", None), "kind", None)  # numpy scalars, without numpy
    if isinstance(value, bool) or (numpy_kind == "b" and getattr(value, "ndim", None) == 0):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise TkError(f"constant '{name}' must be an int, float or bool, got {type(value).__name__} {value!r}")
