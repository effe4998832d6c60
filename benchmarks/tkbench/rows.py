"""One result row (``Row``) and the statuses it can have.

A row compares tkjit with one reference on one shape. Whatever fails is written into the row —
``error`` for tkjit, ``ref_error`` for the reference, each the exception's first line — so a
kernel that does not compile, or a backend that cannot run it yet, is a row and not a crash.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

OK = "ok"                     # tkjit ran and matched the float64 reference
WRONG = "WRONG"               # tkjit ran, but its output is off (or left unwritten: NaN)
ERROR = "error"               # tkjit raised (compile, launch, or the check itself)
UNSUPPORTED = "unsupported"   # tkjit said the backend cannot do this (yet): NotAvailableError
NOT_AVAILABLE = "n/a"         # nothing to run: a tool or module that is not here
MEASURED = "measured"         # a measurement with no correctness check (copy bandwidth, JIT times)
TIMEOUT = "timeout"           # the case ran past its time limit; the worker was stopped
CRASHED = "crashed"           # the worker process died during the case
SKIPPED = "skipped"           # not run: the run's time budget was spent

FAILURES = (WRONG, ERROR, TIMEOUT, CRASHED)


@dataclass
class Row:
    family: str
    what: str
    shape: str
    ref_name: str = ""
    params: dict = field(default_factory=dict)
    status: str = OK
    error: str | None = None
    ref_error: str | None = None
    tkjit_ms: float | None = None
    ref_ms: float | None = None
    tkjit_timing: dict | None = None
    ref_timing: dict | None = None
    ratio: float | None = None          # ref_ms / tkjit_ms: above 1, tkjit is faster
    flops: float | None = None
    bytes: float | None = None
    tkjit_tflops: float | None = None
    ref_tflops: float | None = None
    tkjit_gbps: float | None = None
    ref_gbps: float | None = None
    frac_of_copy: float | None = None
    ref_frac_of_copy: float | None = None
    rel_err: float | None = None        # ‖out − ref64‖ / ‖ref64‖ of tkjit's output
    ref_rel_err: float | None = None    # the same for the reference library's output
    tol: float | None = None
    unwritten: int | None = None        # output elements still NaN (poison) after the call
    compile_s: float | None = None
    rotation_sets: int | None = None
    target: str | None = None
    meets_target: bool | None = None
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)

    def fail(self, exc: BaseException) -> None:
        """tkjit's side raised: the row says so (first line), with the status the error calls for."""
        self.status = UNSUPPORTED if is_unsupported(exc) else ERROR
        self.error = first_line(exc)

    def finish(self) -> "Row":
        """Fill in what follows from the measurements: the ratio and the rates."""
        if self.tkjit_ms and self.ref_ms:
            self.ratio = self.ref_ms / self.tkjit_ms
        if self.flops:
            self.tkjit_tflops = _rate(self.flops, self.tkjit_ms, 1e9)
            self.ref_tflops = _rate(self.flops, self.ref_ms, 1e9)
        if self.bytes:
            self.tkjit_gbps = _rate(self.bytes, self.tkjit_ms, 1e6)
            self.ref_gbps = _rate(self.bytes, self.ref_ms, 1e6)
        return self


def _rate(amount: float, ms: float | None, per: float) -> float | None:
    """amount / (ms · 1e-3) / 1e12 for TFLOPS (per = 1e9), / 1e9 for GB/s (per = 1e6)."""
    return amount / ms / per if ms else None


def first_line(exc: BaseException) -> str:
    """``Type: the first line of the message`` (a tkjit error's rendered diagnostic)."""
    render = getattr(exc, "render", None)
    text = render() if callable(render) else str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else '(no message)'}"


def is_unsupported(exc: BaseException) -> bool:
    try:
        from tkjit.errors import NotAvailableError
    except ImportError:
        return False
    return isinstance(exc, NotAvailableError)
