"""Arguments by parameter name: ``kernel(X=x, Y=y)``, or ``kernel(x, Y=y)``, bound to the
kernel's parameter order before anything else looks at them. The GPU fast paths hand a call
with names to the kernel (or the launcher), which binds them here and calls again by position."""
from __future__ import annotations

from typing import Any, Sequence

from .errors import LaunchError


def bind_by_name(kernel: str, names: Sequence[str], args: tuple, named: dict[str, Any]) -> tuple:
    """``args`` then ``named`` in parameter order, or a LaunchError that says what does not fit."""
    listed = ", ".join(names)
    if len(args) > len(names):
        raise LaunchError(f"kernel '{kernel}' takes {len(names)} arguments ({listed}), got {len(args)} "
                          f"by position and {len(named)} by name")
    unknown = [n for n in named if n not in names]
    if unknown:
        raise LaunchError(f"kernel '{kernel}' has no parameter {', '.join(repr(n) for n in unknown)} "
                          f"(its parameters: {listed})")
    twice = [n for n in names[:len(args)] if n in named]
    if twice:
        raise LaunchError(f"kernel '{kernel}': {', '.join(twice)} given both by position and by name")
    missing = [n for n in names[len(args):] if n not in named]
    if missing:
        raise LaunchError(f"kernel '{kernel}': missing {', '.join(missing)} (its parameters: {listed})")
    return (*args, *(named[n] for n in names[len(args):]))
