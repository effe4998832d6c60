"""compile(): the ordered stages from kernel text to a cubin. Pure: no driver calls, no GPU.

    source ─front end─▶ tkir ─passes─▶ opt ─codegen─▶ ptx ─ptxas─▶ cubin ─cuobjdump─▶ sass

Textual IR is also a valid input (a ``.tkir`` file name, or text that starts with
``kernel @``): it enters at ``tkir``. Each stage's text lands in ``CompileResult.asm``
(``tkir``, ``after:<pass>`` for every pass, ``opt``, ``ptx``, ``sass``); ``compile(until=...)``
stops after a stage and ``advance()`` runs the later ones on demand. A stage whose piece of
tkjit is missing raises NotAvailableError saying so.

The binary stages (ptx, cubin and their metadata together) go through the disk cache unless
``options.cache`` is off. The key is made from the input itself (the text as given, the file
name, the options, the arch, tkjit's source hash and the ptxas version), so ``load_or_compile``
(what ``tkjit.compile`` uses) looks the entry up before the front end runs: on a hit the result
has its binary stages, metadata and decision log from the entry, and the IR stages are made only
when something asks for them. Heavy modules (the IR parser, the passes, lark, numpy) are
imported only by the stages that need them.
"""
from __future__ import annotations

import importlib
import threading
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from .errors import NotAvailableError, PassError, TkError, ToolchainError, VerifyError
from .options import CompileOptions

if TYPE_CHECKING:
    from .ir.core import Kernel
    from .passes import DecisionLog, PassManager

_LAZY_STAGES_LOCK = threading.RLock()

STAGES = ("tkir", "opt", "ptx", "cubin", "sass")
"""In order. ``after:<pass>`` texts are made by the ``opt`` stage."""
BINARY_STAGES = ("cubin",)


class StageNotAvailableError(NotAvailableError, KeyError):
    """A stage that does not exist (an unknown name, or one whose piece of tkjit is missing)."""


@dataclass
class CompileResult:
    """One compilation's stages so far: the texts in ``asm``, the cubin, its metadata and decisions."""

    source: str
    filename: str
    options: CompileOptions
    name: str = ""
    asm: dict[str, str] = field(default_factory=dict)
    binary: bytes | None = None
    """The cubin."""
    metadata: dict = field(default_factory=dict)
    done: list[str] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)
    """Stage → why it could not run."""
    dump: "_Dumper | None" = None
    key: str | None = None
    """The disk-cache key, once computed (None: not yet, the cache is off, or there is no ptxas)."""
    from_cache: bool = False
    """The binary stages came from the cache before the front end ran (``load_or_compile``): the
    IR stages are made when first asked for, and the decision log is the cached one."""
    _tkir: "Kernel | None" = field(default=None, repr=False)
    _portable_ir: "Kernel | None" = field(default=None, repr=False)
    _ir: "Kernel | None" = field(default=None, repr=False)
    _async_ir: "Kernel | None" = field(default=None, repr=False)
    _decisions: "DecisionLog | None" = field(default=None, repr=False)
    _cached_log: tuple | None = field(default=None, repr=False)
    """(decisions JSON, ptxas report dict) of a cache hit, made into ``decisions`` on first use."""

    @property
    def tkir(self) -> "Kernel | None":
        """The kernel as the front end (or the IR parser) made it; passes never touch it. (None
        before the stage ran; after a cache hit, asking for it runs the stage.)"""
        if self._tkir is None and self.from_cache:
            self._make_lazily("tkir")
        return self._tkir

    @property
    def portable_ir(self) -> "Kernel | None":
        """The IR before the first target-specific pass: what the CPU interpreter runs."""
        if self._portable_ir is None and self.from_cache:
            self._make_lazily("opt")
        return self._portable_ir

    @property
    def ir(self) -> "Kernel | None":
        """The IR after the whole pipeline (the tile program the emitter reads: with async-schedule,
        the kernel that pass rewrote; ``async_ir`` is its rewrite)."""
        if self._ir is None and self.from_cache:
            self._make_lazily("opt")
        return self._ir

    @property
    def async_ir(self) -> "Kernel | None":
        """The ``async-schedule`` pass's kernel: the roles, rings and protocol steps with the tile
        ops between them (None where the pass did not run). ``ir`` is the kernel it rewrote."""
        if self._ir is None and self.from_cache:
            self._make_lazily("opt")
        return self._async_ir

    def _make_lazily(self, stage: str) -> None:
        """An IR stage of a cache hit, made on first use (once, whichever thread asks first)."""
        with _LAZY_STAGES_LOCK:
            advance(self, stage)

    @property
    def decisions(self) -> "DecisionLog":
        """What the passes, the code generator and ptxas decided (the cached log on a hit)."""
        if self._decisions is None:
            from .passes import DecisionLog
            self._decisions = DecisionLog()
            if self._cached_log is not None:
                logged, ptxas = self._cached_log
                self._decisions = DecisionLog.from_json(logged)
                _record_ptxas_warnings(self, ptxas)
        return self._decisions

    @property
    def pipeline(self) -> str:
        if self.options.pipeline is not None:
            return self.options.pipeline
        from .passes import default_pipeline
        return default_pipeline(self.options.arch, checked=self.options.checked)

    def signature(self) -> list[tuple[str, str]]:
        """(name, type) of every kernel parameter, e.g. ``("A", "gl<f32>[M, 64]")``; from the cache
        entry on a hit (without running the front end)."""
        if self._tkir is None and "signature" in self.metadata:
            return [(str(name), str(type_)) for name, type_ in self.metadata["signature"]]
        return [(p.hint or f"#{i}", str(p.type)) for i, p in enumerate(self.tkir.params)]


# ---------------------------------------------------------------- entry points

def compile(source: str, options: CompileOptions | None = None, *, filename: str = "<string>",
            until: str = "opt") -> CompileResult:
    """Run the stages up to and including ``until`` (a name in STAGES or ``after:<pass>``)."""
    result = CompileResult(source, filename, options or CompileOptions.resolve())
    return advance(result, until)


def load_or_compile(source: str, options: CompileOptions | None = None, *,
                    filename: str = "<string>") -> CompileResult:
    """What a kernel object is made from: the cache entry of this input when there is one (its
    binary stages made, the IR stages made on demand: see ``CompileResult.from_cache``), else the
    front end and the passes now, so that mistakes are reported at once. Dumps and debug
    verification want every stage to run, so with either the cache is not looked at here."""
    result = CompileResult(source, filename, options or CompileOptions.resolve())
    opts = result.options
    if opts.cache and opts.dump_dir is None and not opts.debug:
        result.key = cache_key_of(result)
        if result.key is not None:
            from .cache import DiskCache
            entry = DiskCache.default().get(result.key)
            if entry is not None and _adopt(result, entry.files, entry.metadata):
                return result
    return advance(result, "opt")


def advance(result: CompileResult, until: str) -> CompileResult:
    """Run the stages of ``result`` that have not run yet, up to and including ``until``: those
    after the last one made (after a cache hit, the IR stages do not run for ``sass``)."""
    last = STAGES.index(stage_of(until))
    if STAGES[last] in result.done:
        return result
    first = last
    while first > 0 and STAGES[first - 1] not in result.done:
        first -= 1
    for stage in STAGES[first:last + 1]:
        if stage == "ptx" and last > STAGES.index("ptx") and result.options.cache:
            continue  # the cubin stage takes the PTX from the cache, or emits it on a miss
        _run_stage(result, stage)
    return result


def cache_key_of(result: CompileResult) -> str | None:
    """The disk-cache key of a compilation: everything that changes its output, from the input
    (no stage runs). None when there is no usable ptxas: nothing is cached then. Both of the
    key's costly parts are memoized in the cache directory (see cache.py)."""
    from .cache import DiskCache, assembler_version, cache_key, tkjit_source_hash
    root = DiskCache.default().root
    try:
        version = assembler_version(root)
    except ToolchainError:
        return None
    opts = result.options
    return cache_key(kernel_text=result.source, options=opts.key(), arch=opts.arch,
                     assembler_version=version, extra={"filename": result.filename},
                     source_hash=tkjit_source_hash(root))


_ENTRY_FILES = ("kernel.cubin", "kernel.ptx")
_ENTRY_METADATA = ("name", "signature", "decisions")


def _adopt(result: CompileResult, files: dict[str, bytes], metadata: dict) -> bool:
    """Take a cache entry as this result's binary stages before the front end ran; False (a miss)
    when the entry lacks something a result needs."""
    if any(f not in files for f in _ENTRY_FILES) or any(m not in metadata for m in _ENTRY_METADATA):
        return False
    result.from_cache = True
    result.name = str(metadata["name"])
    result.binary = files["kernel.cubin"]
    result.asm["ptx"] = files["kernel.ptx"].decode()
    result.metadata = dict(metadata)
    result._cached_log = (metadata["decisions"], metadata.get("ptxas", {}))
    result.done += ["ptx", "cubin"]
    return True


def _run_stage(result: CompileResult, stage: str) -> None:
    if stage in result.done:
        return
    if stage in result.unavailable:
        raise NotAvailableError(result.unavailable[stage])
    try:
        _STAGE_FUNCTIONS[stage](result)
    except NotAvailableError as e:
        result.unavailable[stage] = e.message
        raise
    _finish(result, stage)


def stage_of(name: str) -> str:
    """The stage that produces ``name`` (``after:<pass>`` is made by ``opt``)."""
    if name in STAGES:
        return name
    if name.startswith("after:"):
        return "opt"
    raise StageNotAvailableError(f"there is no stage '{name}'; the stages are {', '.join(STAGES)} and "
                                 "after:<pass> for the IR after each pass")


def no_such_stage(result: CompileResult, stage: str) -> StageNotAvailableError:
    """The error for an ``after:<pass>`` text that was not made: the pipeline has no such pass, or
    the schedule declined the kernel (its target passes' work was dropped, so the IR after them
    was never kept; the decision log says why)."""
    name = stage[len("after:"):] if stage.startswith("after:") else stage
    refusal = next((d for d in result.decisions if d.data.get("refused")), None)
    from .passes import Pipeline
    in_pipeline = name in [p.name for p in Pipeline.parse(result.pipeline)]
    if refusal is not None and in_pipeline:
        return StageNotAvailableError(
            f"kernel '{result.name}' has no stage '{stage}': pass '{refusal.pass_name}' declined to "
            f"schedule it ({refusal.decision.removeprefix('not scheduled: ')}), so the target passes' work, '{name}' included, was "
            "dropped and the kernel went on unscheduled; the decision log says why")
    return StageNotAvailableError(f"kernel '{result.name}' has no stage '{stage}': the pipeline "
                                  f"'{result.pipeline}' has no such pass")


def is_ir_text(source: str, filename: str = "") -> bool:
    """Textual tile IR rather than kernel-language source."""
    if filename.endswith(".tkir"):
        return True
    for line in source.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("//"):
            return stripped.startswith("kernel @")
    return False


def optimize_ir_text(text: str, filename: str, pipeline: str, *, options: CompileOptions | None = None,
                     verify_each: bool = False,
                     on_snapshot: Callable[[str, str], None] | None = None) -> tuple[str, "DecisionLog"]:
    """IR text in, IR text out (every kernel of the text through ``pipeline``): ``tkjit opt``."""
    from .ir.parser import parse_ir
    from .ir.printer import print_kernels
    from .passes import DecisionLog, IRSnapshots, PassContext, PassManager, Pipeline
    options = options or CompileOptions.resolve()
    manager = PassManager(Pipeline.parse(pipeline), verify_each=verify_each or options.debug,
                          instruments=[IRSnapshots(on_snapshot)] if on_snapshot else [])
    log = DecisionLog()
    out = []
    for kernel in parse_ir(text, filename):
        out.append(_run_pipeline(manager, kernel, PassContext(options, log)))
    return print_kernels(out), log


def require_module(module: str, what: str):
    """Import ``module``, or NotAvailableError saying that ``what`` is not available yet when it
    (or a module inside it) does not exist. Other import errors are real and propagate."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name == module or (e.name or "").startswith(module + "."):
            raise NotAvailableError(f"{what} is not available yet ({module} is missing)") from None
        raise


def require(module: str, attr: str, what: str):
    """``module.attr``, or NotAvailableError saying that ``what`` is not available yet."""
    entry = getattr(require_module(module, what), attr, None)
    if entry is None:
        raise NotAvailableError(f"{what} is not available yet ({module}.{attr} is missing)")
    return entry


# ---------------------------------------------------------------- the stages

def _front_end(result: CompileResult) -> None:
    from .ir.printer import print_kernel
    from .ir.verify import verify_kernel
    if is_ir_text(result.source, result.filename):
        if result.options.constants:
            names = ", ".join(name for name, _ in result.options.constants)
            raise TkError(f"constants ({names}) apply to kernel source, but {result.filename} is "
                          "textual IR, where constants are already folded")
        from .ir.parser import parse_kernel
        kernel = parse_kernel(result.source, result.filename)
        from .passes.stream_cols import oversized_tile_problem
        problem = oversized_tile_problem(kernel)  # as the front end checks kernel source
        if problem is not None:
            raise problem
    else:
        lower_source = require("tkjit.frontend", "lower_source", "the kernel-language front end")
        kernel = lower_source(result.source, result.filename, dict(result.options.constants))
        verify_kernel(kernel, show_ir=True)
    result._tkir = kernel
    result.name = kernel.name
    result.asm["tkir"] = print_kernel(kernel)
    if result.options.dump_dir is not None:
        result.dump = _Dumper(result.options.dump_dir, dump_folder_name(kernel.name, result.options))
        result.dump.file("options.json", _json(result.options.key()))
        result.dump.stage("tkir", ".tkir", result.asm["tkir"])


class _KeepPortable:
    """Instrument: clones the IR just before the pipeline's first target-specific pass."""

    def __init__(self, result: CompileResult, pipeline):
        self.result = result
        self.first_target = next((i for i, p in enumerate(pipeline) if p.target_specific), None)

    def after_pass(self, index, pass_, kernel: "Kernel") -> None:
        if self.first_target is not None and index == self.first_target - 1:
            from .passes.rewrite import clone_kernel
            self.result._portable_ir = clone_kernel(kernel)

    def after_pass_text(self, index, pass_, text: str) -> None:
        """The manager holds text for the passes it runs tentatively, the target-specific ones:
        they come after the point this instrument keeps, so there is nothing to do."""
        if self.first_target is not None and index == self.first_target - 1:
            raise AssertionError("the IR before the first target-specific pass came as text")


def _optimize(result: CompileResult) -> None:
    from .ir.printer import print_kernel
    from .passes import DecisionLog, IRSnapshots, PassContext, PassManager, Pipeline
    from .passes.rewrite import clone_kernel
    pipeline = Pipeline.parse(result.pipeline)
    dump = result.dump

    def on_snapshot(label: str, text: str) -> None:
        result.asm[label] = text
        if dump is not None:
            dump.stage(label.replace(":", "-").split("#")[0], ".tkir", text)

    keep = _KeepPortable(result, pipeline)
    manager = PassManager(pipeline, verify_each=result.options.debug,
                          instruments=[IRSnapshots(on_snapshot), keep],
                          tentative_target=result.options.pipeline is None)  # see docs/hopper-schedule.md
    # After a cache hit the log is the cached one; the passes' second telling of it is dropped.
    log = DecisionLog() if result.from_cache else result.decisions
    ir = _run_pipeline(manager, clone_kernel(result.tkir), PassContext(result.options, log))
    _check_unrewritten(pipeline, ir, PassContext(result.options, log, "mbarrier"))
    if keep.first_target == 0:
        result._portable_ir = result.tkir
    elif keep.first_target is None:
        result._portable_ir = ir
    result.asm["opt"] = print_kernel(ir)
    if ir.tile_program is not None:  # async-schedule ran: the emitter reads the kernel it rewrote
        result._async_ir, ir = ir, ir.tile_program
    result._ir = ir
    if dump is not None:
        dump.decisions(result.decisions)


def _check_unrewritten(pipeline, ir: "Kernel", ctx) -> None:
    """A pipeline that ran ``mbarrier`` but not ``async-schedule`` (a user's own): the emitter then
    follows the mbarrier pass's protocol object, so that protocol gets the compile-time check the
    async-schedule pass would have given it (its ``check=auto``: quick, full in debug mode; a
    violation is a SyncError naming the ring, stage and step), logged under the mbarrier pass."""
    names = [p.name for p in pipeline]
    if "mbarrier" not in names or "async-schedule" in names or "consumers" not in ir.attrs \
            or ir.tile_program is not None:
        return
    from .passes import sync_at_compile
    from .passes.mbarrier import protocol_of
    sync_at_compile.check(protocol_of(ir), "auto", ctx, "the mbarrier pass's protocol, which the "
                          "emitter follows: the pipeline has no async-schedule pass")


def _run_pipeline(manager: "PassManager", kernel: "Kernel", ctx) -> "Kernel":
    """Run the passes, then verify (always: the verifier is not optional, only how often it runs)."""
    from .ir.verify import verify_kernel
    kernel = manager.run(kernel, ctx)
    if not manager.verify_each:
        try:
            verify_kernel(kernel, show_ir=True)
        except VerifyError as e:
            raise PassError(f"the IR is invalid after the pipeline '{manager.pipeline}': {e.message}",
                            e.span, notes=e.notes + ["set TKJIT_DEBUG=1 (or --verify-each) to find "
                                                     "the pass that broke it"]) from e
    return kernel


def _emit_ptx(result: CompileResult) -> None:
    emit_ptx = require("tkjit.codegen", "emit_ptx", "the PTX backend")
    emit_hopper = getattr(require_module("tkjit.codegen", "the PTX backend"), "emit_hopper_ptx", None)
    declined: list[dict] = []  # why the Hopper path does not apply
    options = {"arch": result.options.arch, "unaligned_rows": result.options.unaligned_rows,
               "lowering": result.options.lowering, **({"strided": True} if result.options.strided else {})}
    if result.options.runs_checks:  # checked mode: the general lowering emits the checks
        options["lowering"], options["asked"] = "general", result.options.lowering
    # the async-schedule pass's kernel where it ran: the consumers' walk comes from it
    hopper = emit_hopper(result.async_ir or result.ir, options, declined) if emit_hopper else None
    if hopper is None:
        _refused_hopper(result, next((d.pop("refusal") for d in declined if "refusal" in d), None), declined)
    # The register-tile backend takes the IR before the Hopper scheduling passes: their
    # decisions (stages, swizzles, ...) are not its own (docs/hopper-schedule.md).
    try:
        ptx, metadata = hopper if hopper is not None else emit_ptx(
            result.portable_ir, {"strided": True} if result.options.strided else {})
    except NotAvailableError as e:  # neither backend: say why the Hopper path did not take it either
        if not declined or not declined[0].get("why"):
            raise
        raise NotAvailableError(f"{e.message}; {declined[0]['why']}", e.span, e.notes) from None
    metadata = dict(metadata)
    for entry in declined + metadata.pop("decisions", []):
        _record_backend_decision(result, entry)
    result.asm["ptx"] = ptx
    result.metadata.update(metadata)
    _registers_for_occupancy(result)
    from .runtime.launch_checks import launch_checks
    checks = launch_checks(result.tkir)
    if checks:  # checked before every launch, as the interpreter checks them
        result.metadata["launch_checks"] = checks
    if result.options.runs_checks:  # checked mode: what the error buffer's check ids stand for
        from .runtime.device_checks import checks_metadata
        device = checks_metadata(result.portable_ir)
        if device:
            result.metadata["device_checks"] = device
    fill_sms = result.tkir.attrs.get("fill_sms")
    if fill_sms:  # @fill_sms: the launch picks these constants per shape (tkjit/fill_sms.py)
        from .fill_sms import constants_of
        result.metadata["fill_sms"] = constants_of(fill_sms)


def _refused_hopper(result: CompileResult, refusal, declined: list[dict]) -> None:
    """No silent cliffs: with ``require_hopper`` (option or ``@require_hopper``) a kernel the
    Hopper path cannot lower is an error at the op that stops it; otherwise a kernel with a
    matrix product gets a warning naming that op (it runs on the register-tile backend)."""
    from .ir.ops import MMA_OPS
    if result.options.arch != "sm_90a":
        return
    why = declined[0]["why"] if declined else "the Hopper path does not apply"
    unscheduled = next((d for d in result.decisions if d.data.get("refused")), None)
    if unscheduled is not None:  # the first reason is the pass that declined the schedule
        why = (f"pass '{unscheduled.pass_name}' declined to schedule it "
               f"({unscheduled.decision.removeprefix('not scheduled: ')}); {why}")
    if declined and "consumers" in result.ir.attrs:  # explain() must not describe a schedule that never runs
        declined.append({"decision": "schedule dropped", "why": "the register-tile backend takes the IR "
                         "from before the Hopper passes: their roles, rings, stages, protocol and "
                         "register split above describe no emitted code"})
    required = result.options.require_hopper or bool(result.ir.attrs.get("require_hopper"))
    if required:
        span = refusal.op.span if refusal is not None and refusal.op is not None else result.ir.span
        raise NotAvailableError(f"kernel '{result.name}' must take the Hopper path (require_hopper), "
                                f"but {why}", span)
    if any(isinstance(op, MMA_OPS) for op in result.ir.walk()):
        warnings.warn(f"tkjit: kernel '{result.name}' runs on the mma.sync register-tile backend, far "
                      f"slower than wgmma: {why}", RuntimeWarning, stacklevel=4)


def _record_backend_decision(result: CompileResult, entry: dict) -> None:
    """The code generator reports ``{"decision", "value", "why"}``; log it as pass "codegen"."""
    what, value = entry.get("decision", "?"), entry.get("value")
    decision = f"{what}: {value}" if value is not None else str(what)
    result.decisions.record("codegen", f"@{result.name}", decision, str(entry.get("why", "")),
                            **({"value": value} if value is not None else {}))


def _assemble(result: CompileResult) -> None:
    toolchain = require_module("tkjit.runtime.toolchain", "the ptxas toolchain")
    _need_tool("ptxas", "assembling a cubin")

    def build() -> tuple[dict[str, bytes], dict]:
        advance(result, "ptx")
        assembled = getattr(result, "_assembled", None)  # (the ptx stage assembled it: occupancy)
        if assembled is not None and assembled[0] == result.asm["ptx"]:
            cubin, report = assembled[1:]
        else:
            cubin, report = toolchain.assemble(result.asm["ptx"], result.options.arch, name=result.name)
        metadata = {"name": result.name, **result.metadata, "ptxas": report.to_dict(),
                    "decisions": result.decisions.to_json(),
                    "signature": [list(param) for param in result.signature()],
                    "options": result.options.key()}  # what `tkjit cache ls` tells entries apart by
        return {"kernel.cubin": cubin, "kernel.ptx": result.asm["ptx"].encode()}, metadata

    if result.options.cache:
        files, metadata = _cached(result, build)
    else:
        files, metadata = build()
    if "ptx" not in result.done:  # another process's entry: the PTX and the backend's decisions
        from .passes import DecisionLog
        result.asm["ptx"] = files["kernel.ptx"].decode()
        backend = [d for d in metadata.get("decisions", []) if d.get("pass") == "codegen"]
        result.decisions.decisions.extend(DecisionLog.from_json(backend))
        _finish(result, "ptx")
    result.binary = files["kernel.cubin"]
    result.metadata = dict(metadata)
    _record_ptxas_warnings(result, metadata.get("ptxas", {}))


def _registers_for_occupancy(result: CompileResult) -> None:
    """A general-lowering kernel whose registers reg-budget left to ptxas: assembled here, and again
    under a ``.maxnreg`` for one CTA an SM more where shared memory holds it
    (codegen/hopper/occupancy.py). The PTX stage's text is the one kept, so the PTX a user reads is
    the PTX that runs; its build is kept for the cubin stage (no second ptxas run). Without ptxas
    the PTX stays as emitted (there is no binary then either)."""
    from .codegen.hopper.occupancy import capped, free_registers
    from .runtime.toolchain import find_tool
    if not free_registers(result.asm["ptx"], result.metadata):
        return
    try:
        find_tool("ptxas")
    except ToolchainError:
        return
    from .runtime import toolchain
    assemble = lambda ptx: toolchain.assemble(ptx, result.options.arch, name=result.name)  # noqa: E731
    try:
        cubin, report = assemble(result.asm["ptx"])
        build, decision = capped(result.asm["ptx"], result.metadata, report, assemble)
    except ToolchainError:  # the cubin stage assembles it again and reports the error there, while
        return              # the PTX stays readable (asm["ptx"]) for the user who asked for it
    if decision is not None:
        _record_backend_decision(result, decision)
    if build is not None:
        result.asm["ptx"], cubin, report = build
    result._assembled = (result.asm["ptx"], cubin, report)


def _record_ptxas_warnings(result: CompileResult, report: dict) -> None:
    from .runtime.toolchain import PtxasReport
    for warning in PtxasReport.from_dict(report).warnings():
        result.decisions.record("ptxas", f"@{result.name}", warning)


def _cached(result: CompileResult, build) -> tuple[dict[str, bytes], dict]:
    from .cache import DiskCache
    cache = DiskCache.default()
    if result.key is None:
        result.key = cache_key_of(result)
        if result.key is None:  # ptxas cannot tell its version: nothing to key the entry by
            return build()
    entry = cache.get(result.key)
    if entry is not None:
        return entry.files, entry.metadata
    files, metadata = build()
    try:
        cache.put(result.key, files, metadata)
    except OSError as e:
        warnings.warn(f"tkjit: could not write the cache entry under {cache.root}: {e}", RuntimeWarning,
                      stacklevel=2)
    return files, metadata


def _disassemble(result: CompileResult) -> None:
    sass = require("tkjit.runtime.toolchain", "sass", "the disassembler")
    try:
        _need_tool("cuobjdump", "disassembling the cubin")
    except NotAvailableError:
        _need_tool("nvdisasm", "disassembling the cubin")
    result.asm["sass"] = sass(result.binary)


def _need_tool(tool: str, what: str) -> None:
    from .runtime.toolchain import find_tool
    try:
        find_tool(tool)
    except ToolchainError as e:
        raise NotAvailableError(f"{what} needs {tool}: {e.message}") from None


_STAGE_FUNCTIONS: dict[str, Callable[[CompileResult], None]] = {
    "tkir": _front_end, "opt": _optimize, "ptx": _emit_ptx, "cubin": _assemble, "sass": _disassemble,
}


def _finish(result: CompileResult, stage: str) -> None:
    if stage in result.done:
        return
    result.done.append(stage)
    dump = result.dump
    if dump is None or stage in ("tkir", "opt"):
        return  # the IR stages were written as they were made
    if stage == "ptx":
        dump.stage("ptx", ".ptx", result.asm["ptx"])
    elif stage == "cubin":
        dump.stage("cubin", ".cubin", result.binary)
        dump.file("metadata.json", _json(result.metadata))
        dump.decisions(result.decisions)
    elif stage == "sass":
        dump.stage("sass", ".sass", result.asm["sass"])


def dump_all(result: CompileResult) -> None:
    """With a dump directory: make every stage that can be made here, so that all are written,
    then write stages.txt (what was made, and why the rest was not)."""
    try:
        advance(result, "sass")
    except NotAvailableError:
        pass  # recorded in result.unavailable; the stages before it are dumped
    if result.dump is not None:
        result.dump.file("stages.txt", stage_status(result))


def stage_status(result: CompileResult) -> str:
    """One line per stage: made, not available (and why), or not asked for."""
    lines = []
    for stage in STAGES:
        if stage in result.done:
            status = "made"
        elif stage in result.unavailable:
            status = f"not available: {result.unavailable[stage]}"
        else:
            status = "not made"
        lines.append(f"{stage:<6} {status}")
    return "\n".join(lines) + "\n"


def _json(obj) -> str:
    import json
    return json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n"


# ---------------------------------------------------------------- dumps

def dump_folder_name(kernel_name: str, options: CompileOptions) -> str:
    """The dump folder of one specialization: ``<kernel>`` with the defaults, else the constants
    and options it was compiled with, ``gemm@BM=64,BN=128`` / ``gemm@unaligned_rows`` /
    ``twice@pipeline-<sha256[:8]>`` (the folder's options.json spells them out)."""
    parts = [f"{name}={value}" for name, value in options.constants]
    if options.pipeline is not None:
        import hashlib
        parts.append(f"pipeline-{hashlib.sha256(options.pipeline.encode()).hexdigest()[:8]}")
    if options.unaligned_rows:
        parts.append("unaligned_rows")
    if getattr(options, "strided", False):
        parts.append("strided")
    if getattr(options, "lowering", "auto") != "auto":
        parts.append(f"lowering={options.lowering}")
    if getattr(options, "require_hopper", False):
        parts.append("require_hopper")
    if getattr(options, "checked", False):
        parts.append("checked")
    return f"{kernel_name}@{','.join(parts)}" if parts else kernel_name


class _Dumper:
    """Writes ``<dir>/<folder>/NN-<stage>.<ext>`` in stage order, plus decisions.txt/.json; the
    folder is the kernel's name, with the constants and options of a specialization
    (``dump_folder_name``)."""

    def __init__(self, root, kernel_name: str):
        from pathlib import Path
        self.dir = Path(root) / kernel_name
        self.index = 0
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            for old in self.dir.iterdir():  # a previous run's numbered stages would mislead
                if old.is_file() and old.name[:2].isdigit() and old.name[2:3] == "-":
                    old.unlink()
        except OSError as e:
            raise TkError(f"cannot write the dump to {self.dir}: {e}") from None

    def stage(self, label: str, suffix: str, content: str | bytes) -> None:
        self.file(f"{self.index:02d}-{label}{suffix}", content)
        self.index += 1

    def file(self, name: str, content: str | bytes) -> None:
        path = self.dir / name
        try:
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
        except OSError as e:
            raise TkError(f"cannot write the dump file {path}: {e}") from None

    def decisions(self, log: DecisionLog) -> None:
        self.file("decisions.txt", log.render())
        self.file("decisions.json", log.to_json_text())
