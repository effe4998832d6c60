"""The errors tkjit raises. Every user-facing failure is a TkError with a clear message."""
from __future__ import annotations

from .source import Span


class TkError(Exception):
    """Base of all tkjit errors. ``span`` (optional) points into the kernel source."""

    def __init__(self, message: str, span: Span | None = None, notes: list[str] | None = None):
        super().__init__(message)
        self.message = message
        self.span = span
        self.notes = list(notes or [])

    def render(self) -> str:
        text = self.span.render(self.message) if self.span is not None else f"error: {self.message}"
        for note in self.notes:
            text += f"\nnote: {note}"
        return text

    def __str__(self) -> str:
        return self.render()


class DiagnosticError(TkError):
    """A malformed kernel or malformed IR text: syntax, names, shapes, dtypes."""


class VerifyError(DiagnosticError):
    """IR that breaks an op's or the kernel's invariants."""


class PassError(TkError):
    """A pass could not do its job (e.g. shared memory over the limit)."""


class LaunchError(TkError):
    """A bad launch, refused on the host before the GPU sees it."""


class RowsNotAligned(LaunchError):
    """A tensor whose rows TMA cannot address (not a multiple of 16 bytes), passed to a kernel
    compiled without the copying fallback for them. A kernel object compiled so only because it
    assumed aligned rows (metadata ``assumes_aligned_rows``) compiles the variant that has the
    fallback instead of raising this."""


class StridedArgument(LaunchError):
    """A strided view (last dimension contiguous) that this compiled kernel cannot address as it
    is: a tensor it reads by pointer without stride parameters, or one whose strides or base TMA
    cannot take. A kernel object takes its variant with stride parameters (option ``strided``)
    or copies the view around the launch instead of raising this (runtime/strides.py).
    ``copy_only``: no variant would take it either (TMA refuses its strides or base)."""

    def __init__(self, message: str, copy_only: bool = False):
        super().__init__(message)
        self.copy_only = copy_only


class ToolchainError(TkError):
    """ptxas / cuobjdump / nvdisasm missing or failing."""


class InterpreterError(TkError):
    """A runtime error in an interpreted kernel (reported against its source line)."""


class CheckError(InterpreterError):
    """Checked mode: a GPU launch's run-time check failed (runtime/device_checks.py). The same
    message, at the same line:col, as the interpreter's error for that op."""


class NotAvailableError(TkError):
    """A stage or backend that does not exist (yet) or cannot run here."""


def user_facing(fn):
    """Decorates the API's entry points (``tkjit.compile``, ``tkjit.load``, calling a kernel...):
    a TkError leaves them with its traceback cut at the entry point, so that the user sees their
    own line and the diagnostic rather than tkjit's internals. TKJIT_DEBUG=1 keeps the whole
    traceback."""
    import functools

    @functools.wraps(fn)
    def entry_point(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TkError as e:
            from .config import get_config
            if get_config().debug:
                raise
            raise e.with_traceback(None)  # tkjit's own frames are cut here: TKJIT_DEBUG=1 shows them
    return entry_point
