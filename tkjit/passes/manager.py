"""Passes, their registry, pipeline strings, and the PassManager that runs them.

A pass is a small frozen dataclass: a ``name``, typed options as fields, and
``run(kernel, ctx) -> Kernel`` (it may mutate the kernel or build a new one; it keeps no state
between runs). Pipelines are strings that parse and print back:

    canonicalize,layout,pipeline{stages=4}

Options go in braces, separated by spaces (commas are accepted too); an option ``max_depth``
may be written ``max-depth``, which is how it prints.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Protocol

from ..errors import PassError, TkError, VerifyError
from ..frozen import Frozen
from ..ir.core import Kernel
from ..ir.printer import print_kernel
from ..ir.verify import verify_kernel
from ..source import Source, Span
from .decisions import DecisionLog

if typing.TYPE_CHECKING:
    from ..options import CompileOptions


@dataclass(frozen=True)
class Pass:
    """Base of every pass. Subclasses set ``name`` and declare options as dataclass fields."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    """One line: what the pass does (shown when listing passes)."""
    target_specific: ClassVar[bool] = False
    """True for passes that commit to Hopper (layouts, warp roles, barriers...): the CPU
    interpreter runs the IR as it was before the first of them."""

    def run(self, kernel: Kernel, ctx: "PassContext") -> Kernel:
        raise NotImplementedError(f"pass '{self.name}' does not implement run()")

    def __str__(self) -> str:
        changed = [f"{_option_text(f.name)}={_format_value(getattr(self, f.name))}"
                   for f in dataclasses.fields(self) if getattr(self, f.name) != f.default]
        return self.name + ("{" + " ".join(changed) + "}" if changed else "")


@dataclass
class PassContext:
    """What a pass may use besides the kernel: the options, the target, the decision log."""

    options: "CompileOptions"
    log: DecisionLog = dataclasses.field(default_factory=DecisionLog)
    current_pass: str = ""

    @property
    def arch(self) -> str:
        return self.options.arch

    def decide(self, subject: str, decision: str, reason: str = "", **data: Any) -> None:
        """Record a decision of the running pass (see ``decisions.subject_of`` for subjects)."""
        self.log.record(self.current_pass, subject, decision, reason, **data)


# ---------------------------------------------------------------- the registry

_REGISTRY: dict[str, type[Pass]] = {}


def register_pass(cls: type[Pass]) -> type[Pass]:
    """Class decorator: make a pass available to pipelines under ``cls.name``."""
    if not cls.name:
        raise TypeError(f"{cls.__name__} has no name")
    params = cls.__dict__.get("__dataclass_params__")  # its own, not inherited from Pass
    if params is None or not params.frozen:
        raise TypeError(f"pass {cls.name} must be a frozen dataclass (@dataclass(frozen=True))")
    existing = _REGISTRY.get(cls.name)
    if existing is not None and existing.__qualname__ != cls.__qualname__:
        raise TypeError(f"two passes are named '{cls.name}': {existing.__qualname__} and {cls.__qualname__}")
    _REGISTRY[cls.name] = cls
    return cls


def unregister_pass(name: str) -> None:
    """Forget a pass (for tests that register throwaway passes)."""
    _REGISTRY.pop(name, None)


def registered_passes() -> dict[str, type[Pass]]:
    return dict(sorted(_REGISTRY.items()))


def get_pass(name: str, span: Span | None = None) -> type[Pass]:
    cls = _REGISTRY.get(name)
    if cls is None:
        import difflib  # only for the error: not worth its import on every compile
        close = difflib.get_close_matches(name, list(_REGISTRY), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise TkError(f"unknown pass '{name}'{hint}", span,
                      notes=[f"the passes are: {', '.join(sorted(_REGISTRY))}"])
    return cls


# ---------------------------------------------------------------- options

def _option_text(field_name: str) -> str:
    return field_name.replace("_", "-")


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _default_text(f: dataclasses.Field) -> str:
    if f.default is dataclasses.MISSING:
        return "required"
    return f"default {_format_value(f.default)}"


def _option_types(cls: type[Pass]) -> dict[str, type]:
    """Each option's Python type; ``int | None`` counts as int (None is only a default)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        args = [a for a in typing.get_args(t) if a is not type(None)]
        out[f.name] = args[0] if args else t
    return out


def describe_options(cls: type[Pass]) -> str:
    fields = dataclasses.fields(cls)
    if not fields:
        return f"pass '{cls.name}' takes no options"
    types = _option_types(cls)
    listed = ", ".join(f"{_option_text(f.name)} ({types[f.name].__name__}, {_default_text(f)})"
                       for f in fields)
    return f"the options of '{cls.name}' are: {listed}"


def _convert(cls: type[Pass], key: str, text: str, span: Span) -> tuple[str, Any]:
    field_name = key.replace("-", "_")
    types = _option_types(cls)
    if field_name not in types:
        raise TkError(f"pass '{cls.name}' has no option '{key}'", span, notes=[describe_options(cls)])
    want = types[field_name]
    if want is bool and text in ("true", "false", "1", "0"):
        return field_name, text in ("true", "1")
    try:
        if want is int and text.lstrip("-").isdigit():
            return field_name, int(text)
        if want is float:
            return field_name, float(text)
        if want is str and text:
            return field_name, text
    except ValueError:
        pass
    noun = {bool: "true or false", int: "an integer", float: "a number", str: "a word"}.get(want, want.__name__)
    raise TkError(f"option '{key}' of pass '{cls.name}' expects {noun}, got '{text}'", span)


# ---------------------------------------------------------------- pipeline strings

@dataclass(unsafe_hash=True)
class Pipeline(Frozen):
    """Passes in the order they run (``Pipeline.parse`` reads a pipeline string)."""

    passes: tuple[Pass, ...] = ()

    @staticmethod
    def parse(text: str) -> "Pipeline":
        return Pipeline(tuple(_PipelineParser(text).parse()))

    def __str__(self) -> str:
        return ",".join(str(p) for p in self.passes)

    def __len__(self) -> int:
        return len(self.passes)

    def __iter__(self):
        return iter(self.passes)


_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


class _PipelineParser:
    """``name{key=value key=value},name,...`` read left to right, errors pointing at a column."""

    def __init__(self, text: str):
        self.text = text
        self.src = Source(text, "<pipeline>")
        self.pos = 0

    def fail(self, message: str, start: int | None = None, end: int | None = None) -> TkError:
        start = self.pos if start is None else start
        return TkError(message, self.src.span(start, end if end is not None else start + 1))

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def word(self, what: str) -> tuple[str, int]:
        self.skip_space()
        start = self.pos
        while self.peek() and self.peek() in _NAME_CHARS:
            self.pos += 1
        if self.pos == start:
            found = f"'{self.peek()}'" if self.peek() else "the end"
            raise self.fail(f"expected {what}, found {found}")
        return self.text[start:self.pos], start

    def parse(self) -> list[Pass]:
        passes: list[Pass] = []
        self.skip_space()
        if not self.peek():
            return passes
        while True:
            passes.append(self.one_pass())
            self.skip_space()
            if not self.peek():
                return passes
            if self.peek() != ",":
                raise self.fail(f"expected ',' between passes, found '{self.peek()}'")
            self.pos += 1

    def one_pass(self) -> Pass:
        name, start = self.word("a pass name")
        cls = get_pass(name, self.src.span(start, self.pos))
        values: dict[str, Any] = {}
        self.skip_space()
        if self.peek() == "{":
            self.pos += 1
            values = self.options(cls)
        for f in dataclasses.fields(cls):
            if f.name not in values and f.default is dataclasses.MISSING:
                raise TkError(f"pass '{name}' needs option '{_option_text(f.name)}'",
                              self.src.span(start, self.pos), notes=[describe_options(cls)])
        return cls(**values)

    def options(self, cls: type[Pass]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        while True:
            self.skip_space()
            if self.peek() == "}":
                self.pos += 1
                return values
            key, key_start = self.word(f"an option of '{cls.name}' or '}}'")
            self.skip_space()
            if self.peek() != "=":
                raise self.fail(f"expected '=' after option '{key}'")
            self.pos += 1
            self.skip_space()
            value_start = self.pos
            while self.peek() and not self.peek().isspace() and self.peek() not in ",}{":
                self.pos += 1
            value = self.text[value_start:self.pos]
            span = self.src.span(key_start, max(self.pos, key_start + 1))
            field_name, converted = _convert(cls, key, value, span)
            if field_name in values:
                raise TkError(f"option '{key}' of pass '{cls.name}' is given twice", span)
            values[field_name] = converted
            self.skip_space()
            if self.peek() == ",":
                self.pos += 1
            elif not self.peek():
                raise self.fail(f"unclosed '{{' in the options of '{cls.name}'")


# ---------------------------------------------------------------- running passes

class Instrument(Protocol):
    """Called after every pass. An instrument that only prints the IR may also have
    ``after_pass_text(index, pass_, text)``, given the printed IR instead: for the passes run
    tentatively, the manager then holds that text until they are kept, not a copy of the IR."""

    def after_pass(self, index: int, pass_: Pass, kernel: Kernel) -> None: ...


class IRSnapshots:
    """An instrument that keeps the printed IR after every pass (print-IR-after-all)."""

    def __init__(self, on_snapshot: Callable[[str, str], None] | None = None):
        self.snapshots: list[tuple[str, str]] = []
        """(label, text): the label is ``after:<pass>``, ``after:<pass>#2`` for a repeat."""
        self.on_snapshot = on_snapshot

    def after_pass(self, index: int, pass_: Pass, kernel: Kernel) -> None:
        self.after_pass_text(index, pass_, print_kernel(kernel))

    def after_pass_text(self, index: int, pass_: Pass, text: str) -> None:
        seen = sum(1 for label, _ in self.snapshots if label.split("#")[0] == f"after:{pass_.name}")
        label = f"after:{pass_.name}" + (f"#{seen + 1}" if seen else "")
        self.snapshots.append((label, text))
        if self.on_snapshot is not None:
            self.on_snapshot(label, text)


BUG_NOTE = "this is a bug in tkjit"


class PassManager:
    """Runs a pipeline over a kernel; verifies after every pass when ``verify_each``.

    ``tentative_target``: the target-specific passes (from the first one on) apply as a whole or
    not at all. When one of them refuses the kernel (a PassError that is not a crash), what they
    did is dropped -- their IR snapshots and decisions -- the refusal is recorded as that pass's
    decision, and the kernel goes on as it was before them (the backend that needs no schedule
    compiles it). The default pipeline runs this way; a pipeline the user names does not.
    """

    def __init__(self, pipeline: Pipeline | str, verify_each: bool = False,
                 instruments: list[Instrument] | tuple[Instrument, ...] = (),
                 tentative_target: bool = False):
        self.pipeline = Pipeline.parse(pipeline) if isinstance(pipeline, str) else pipeline
        self.verify_each = verify_each
        self.instruments = list(instruments)
        self.tentative_target = tentative_target

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        passes = list(self.pipeline)
        first = next((i for i, p in enumerate(passes) if p.target_specific), len(passes))
        if not self.tentative_target:
            first = len(passes)
        for index in range(first):
            kernel = self._step(index, passes[index], kernel, ctx, self.instruments)
        if first < len(passes):
            kernel = self._run_tentatively(passes, first, kernel, ctx)
        ctx.current_pass = ""
        return kernel

    def _step(self, index: int, p: Pass, kernel: Kernel, ctx: PassContext, instruments) -> Kernel:
        before = print_kernel(kernel) if self.verify_each else None
        ctx.current_pass = p.name
        kernel = self._run_one(p, kernel, ctx, before)
        if self.verify_each:
            self._verify_after(p, kernel, before)
        for instrument in instruments:
            instrument.after_pass(index, p, kernel)
        return kernel

    def _run_tentatively(self, passes: list[Pass], first: int, kernel: Kernel, ctx: PassContext) -> Kernel:
        from .rewrite import clone_kernel
        untouched, outer, tentative = clone_kernel(kernel), ctx.log, DecisionLog()
        held = _Held(self.instruments)
        ctx.log = tentative
        index = first
        try:
            for index in range(first, len(passes)):
                kernel = self._step(index, passes[index], kernel, ctx, [held])
        except PassError as e:
            if BUG_NOTE in e.notes or isinstance(e.__cause__, VerifyError):
                raise  # a crash or invalid IR is a bug in a pass, not a refusal
            ctx.log = outer
            self._record_refusal(passes, first, index, untouched, e, ctx)
            return untouched
        finally:
            ctx.log = outer
        held.replay()
        for d in tentative:
            outer.record(d.pass_name, d.subject, d.decision, d.reason, **d.data)
        return kernel

    @staticmethod
    def _record_refusal(passes: list[Pass], first: int, index: int, kernel: Kernel, e: PassError,
                        ctx: PassContext) -> None:
        where = f" (at {e.span.location()})" if e.span is not None else ""
        before = f"'{passes[first - 1].name}'" if first else "the front end"
        ctx.current_pass = passes[index].name
        ctx.decide(f"@{kernel.name}", f"not scheduled: {e.message}{where}",
                   f"the passes from '{passes[first].name}' on apply to the whole kernel or not at "
                   f"all, so their work is dropped and the kernel goes on as it was after {before}, "
                   "for the backend that needs no schedule", refused=True)

    def _run_one(self, p: Pass, kernel: Kernel, ctx: PassContext, before: str | None) -> Kernel:
        try:
            out = p.run(kernel, ctx)
        except TkError as e:
            if not any(note.startswith("in pass") for note in e.notes):
                e.notes.append(f"in pass '{p}'")
            raise
        except Exception as e:
            raise PassError(f"pass '{p.name}' crashed: {type(e).__name__}: {e}",
                            notes=[BUG_NOTE] + _reproducer(p, before)) from e
        if not isinstance(out, Kernel):
            raise PassError(f"pass '{p.name}' returned {type(out).__name__}, not a Kernel")
        return out

    def _verify_after(self, p: Pass, kernel: Kernel, before: str | None) -> None:
        try:
            verify_kernel(kernel, show_ir=True)
        except VerifyError as e:
            raise PassError(f"the IR is invalid after pass '{p}': {e.message}", e.span,
                            notes=e.notes + _reproducer(p, before)) from e


class _Held:
    """An instrument that holds what ``instruments`` are owed after each pass until the passes are
    kept (``replay``): the printed IR when they all take text (``after_pass_text``, as IRSnapshots
    does), else a copy of the IR; nothing when there are none. (Copying the IR after each of the
    Hopper passes only to print it later was about 2 ms of a cold compile.)"""

    def __init__(self, instruments: list[Instrument]) -> None:
        self.instruments = instruments
        self.as_text = all(hasattr(i, "after_pass_text") for i in instruments)
        self.calls: list[tuple[int, Pass, Kernel | str]] = []

    def after_pass(self, index: int, pass_: Pass, kernel: Kernel) -> None:
        if not self.instruments:
            return
        if self.as_text:
            self.calls.append((index, pass_, print_kernel(kernel)))
        else:
            from .rewrite import clone_kernel
            self.calls.append((index, pass_, clone_kernel(kernel)))

    def replay(self) -> None:
        for index, p, snapshot in self.calls:
            for instrument in self.instruments:
                if self.as_text:
                    instrument.after_pass_text(index, p, snapshot)
                else:
                    instrument.after_pass(index, p, snapshot)


def _reproducer(p: Pass, before: str | None) -> list[str]:
    if before is None:
        return ["set TKJIT_DEBUG=1 to verify the IR after every pass and see the IR before this one"]
    return [f"reproduce with `tkjit opt before.tkir -p '{p}' --verify-each` on this IR:\n{before}"]
