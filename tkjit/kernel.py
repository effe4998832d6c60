"""The user-facing kernel object: ``tkjit.compile(text)`` / ``tkjit.load(path)``.

Compiling looks the kernel up in the disk cache first (``compiler.load_or_compile``): on a hit
the cubin, PTX, metadata and decision log come from the entry and the front end and the passes run
only if the IR is asked for (``kernel.ir``, ``kernel.asm["tkir"]``, the interpreter). On a miss
they run at once, so mistakes are reported at compile time; PTX, the cubin and SASS are then made
the first time they are asked for (``kernel.asm["ptx"]``) or needed (the first launch on a GPU).

Calling the kernel runs it on the GPU when its tensor arguments are CUDA tensors, and on the CPU
interpreter when they are CPU tensors or numpy arrays (or when the backend is forced with
``backend="interpret"`` / ``TKJIT_BACKEND``). After the first GPU launch a call goes straight to
the launcher's generated fast path; whatever that path refuses comes back to the kernel
(``_refused``), which picks the interpreter, another device's launcher, or the launcher's checker.
A launch with strided views the compiled kernel cannot take as they are (a StridedArgument from the
launcher: runtime/strides.py) takes the variant compiled with stride parameters (option
``strided``, made once) where the backend has one, else the views are copied around the launch.
A kernel annotated ``@fill_sms`` launches on the GPU through ``fill_sms.ShapeDispatch`` instead:
per argument shapes, a variant compiled with the tile constants chosen for them. A kernel whose
metadata says ``serial_launches`` (stream-K's workspace is the loaded module's) gets a launcher
that orders its launches across streams (runtime/launcher.py, ``LaunchOrder``); each variant and
each device has a module, hence a launcher and an order, of its own.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from . import compiler
from .compiler import CompileResult, StageNotAvailableError
from .errors import LaunchError, NotAvailableError, RowsNotAligned, StridedArgument, TkError, user_facing
from .options import CompileOptions

if TYPE_CHECKING:
    from .explanation import Explanation
    from .ir.core import Kernel as IRKernel
    from .passes import DecisionLog

_LAZY_STAGES = ("ptx", "sass")
_IR_STAGES = ("tkir", "opt")
"""Made on demand after a cache hit (``after:<pass>`` texts are made by ``opt``)."""


class AsmView(Mapping):
    """Read-only text of every stage: ``tkir``, ``after:<pass>``, ``opt``, ``ptx``, ``sass``, in that
    order. ``ptx`` and ``sass`` are built on first access, and so are the IR stages of a kernel
    that came from the cache (listing the stages makes them too)."""

    def __init__(self, result: CompileResult):
        self._result = result

    @user_facing
    def __getitem__(self, stage: str) -> str:
        asm = self._result.asm
        if stage in asm:
            return asm[stage]
        if stage == "cubin":
            raise StageNotAvailableError("the cubin is binary, not text: use kernel.binary")
        if self._result.from_cache and compiler.stage_of(stage) in _IR_STAGES:
            compiler.advance(self._result, "opt")
            if stage in asm:
                return asm[stage]
        if stage in _LAZY_STAGES:
            try:
                compiler.advance(self._result, stage)
            except NotAvailableError as e:
                raise StageNotAvailableError(f"no '{stage}' for kernel '{self._result.name}': {e.message}",
                                             notes=[self._existing()]) from None
            return asm[stage]
        try:
            compiler.stage_of(stage)
        except StageNotAvailableError as e:
            e.notes.append(self._existing())
            raise
        error = compiler.no_such_stage(self._result, stage)
        error.notes.append(self._existing())
        raise error

    def _existing(self) -> str:
        blocked = bool(self._result.unavailable)  # a missing stage blocks every later one
        later = [] if blocked else [s for s in _LAZY_STAGES if s not in self._result.asm]
        text = f"the stages made so far: {', '.join(self._result.asm)}"
        return text + (f" (built when asked for: {', '.join(later)})" if later else "")

    def _made(self) -> list[str]:
        """The stages made, in stage order (after a cache hit the IR stages are made first)."""
        if self._result.from_cache:
            compiler.advance(self._result, "opt")
        order = {stage: i for i, stage in enumerate(compiler.STAGES)}

        def position(name: str) -> int:
            return order[compiler.stage_of(name)]
        return sorted(self._result.asm, key=position)  # stable: after:<pass> stay in pipeline order

    def __iter__(self) -> Iterator[str]:
        return iter(self._made())

    def __len__(self) -> int:
        return len(self._made())

    def __contains__(self, stage: object) -> bool:
        if stage in self._result.asm:
            return True
        return self._result.from_cache and isinstance(stage, str) and stage in self._made()


class CompiledKernel:
    """A compiled kernel: ``.name``, ``.asm[stage]``, ``.ir``, ``.explain()``, and calling it."""

    def __init__(self, result: CompileResult, *, fill_sms: bool = True):
        self._result = result
        self._fill_sms = fill_sms
        """Whether a @fill_sms kernel picks its tile constants per shape (False for the variants)."""
        self._launchers: dict[int, Any] = {}
        self._gpu_fast = None
        self._general: CompiledKernel | None = None
        """This kernel with the fallback for unaligned rows, once a launch needed it."""
        self._strided: CompiledKernel | None = None
        """This kernel with stride parameters (option ``strided``), once a view needed it."""
        self._copied_warned: set = set()
        """Arguments whose views were copied around a launch (warned about once each)."""
        """The generated fast path of the launcher used last (its refusals come to ``_refused``)."""
        self.asm = AsmView(result)

    @property
    def name(self) -> str:
        return self._result.name

    @property
    def ir(self) -> "IRKernel":
        """The optimized tile IR (after a cache hit, the front end and the passes run now)."""
        return self._result.ir

    @property
    def async_ir(self) -> "IRKernel | None":
        """The schedule as IR (the ``async-schedule`` pass): the rings, the producer's program and
        the consumers', with the tile ops of ``ir`` between their steps. None without a Hopper
        schedule."""
        return self._result.async_ir

    @property
    def options(self) -> CompileOptions:
        return self._result.options

    @property
    @user_facing
    def binary(self) -> bytes:
        """The cubin (assembled on first access)."""
        try:
            compiler.advance(self._result, "cubin")
        except NotAvailableError as e:
            raise StageNotAvailableError(f"no cubin for kernel '{self.name}': {e.message}") from None
        return self._result.binary

    @property
    def metadata(self) -> dict:
        """What the backend says about the kernel (its backend, lowering, parameters, launch
        shape, registers...). Makes the PTX first where it is not made yet, as ``explain()`` does;
        empty where no backend is here to make it."""
        if "ptx" not in self._result.asm:
            try:
                compiler.advance(self._result, "ptx")
            except NotAvailableError:
                pass
        return dict(self._result.metadata)

    @property
    def protocol(self) -> "str | None":
        """The synchronization protocol the general sm_90a lowering walks for this kernel, as text:
        the one read back from the ``async-schedule`` IR (``async_ir``; the mbarrier pass's object
        only where that pass could not write the schedule as IR, which the decision log says), and
        the one the sync checker checked at compile time -- its rings (stages, barrier counts,
        bytes) and the programs of the producer and of each consumer warpgroup (waits, TMA loads,
        products and their waits, releases, epilogue steps, ping-pong turns, cluster steps). The
        PTX prints exactly these steps (``// step:`` comments). None where no code walks one: no
        Hopper schedule, or the kernel took another lowering (the attention template, or the
        register-tile backend). Makes the PTX first, as ``metadata`` does, since only then is the
        lowering known."""
        metadata = self.metadata
        if metadata.get("lowering") != "general":
            return None
        return metadata.get("protocol")

    @property
    def decisions(self) -> "DecisionLog":
        """The decision log itself (``explain()`` renders it)."""
        return self._result.decisions

    @user_facing
    def explain(self) -> "Explanation":
        """Every decision the passes and the code generator made, and why. (Makes the PTX, if
        the backend is here, so that the code generator's decisions are included.) The text, as a
        ``str`` that also prints well at a prompt, renders as a table in a notebook and gives the
        decisions as JSON (``.to_json()``): see tkjit/explanation.py."""
        from .explanation import Explanation
        header = f"kernel '{self.name}', pipeline '{self._result.pipeline}'\n"
        notes = []
        try:
            compiler.advance(self._result, "ptx")
        except TkError as e:
            notes.append(f"(the code generator did not run: {e.message})")
        if self._launchers:  # launched on a GPU: which fast path its calls take
            from .runtime import native
            notes.append(f"launch: {native.status()}")
            if self._result.metadata.get("serial_launches"):
                notes.append("launch: ordered across streams, one at a time (serial_launches: the launches "
                             "share the module's state), through the generated Python function")
        log = self._result.decisions
        text = header + log.render() + "".join(note + "\n" for note in notes)
        return Explanation(text, kernel=self.name, pipeline=str(self._result.pipeline),
                           decisions=log.to_json(), notes=notes)

    @user_facing
    def autotune(self, space: dict, **options: Any):
        """This kernel tuned by measurement over ``space`` (``{"BM": [64, 128], ...}``: values of
        its ``<...>`` constants): per shape bucket, the fastest candidate on the GPU, kept in the
        disk cache. Returns a callable like the kernel; see ``tkjit/autotune.py``."""
        from .autotune import AutotunedKernel
        return AutotunedKernel(self, space, **options)

    @user_facing
    def torch_op(self, name: str, outputs: Any, *, dims: dict | None = None, dim_args: Any = ()):
        """Register this kernel as the PyTorch custom op ``name`` (``"mylib::gemm"``) that takes
        every parameter not in ``outputs`` and returns the outputs, allocated from the ``gl``
        shapes and dtypes; ``torch.compile(fullgraph=True)`` and ``torch.export`` trace through it.
        A dimension of an output that no input binds is fixed by ``dims={"N": 64}`` or made an
        int argument of the op by ``dim_args=["N"]``. See ``tkjit/torch_op.py``."""
        from .torch_op import register
        return register(self, name, outputs, dims=dims, dim_args=dim_args)

    def __repr__(self) -> str:
        params = ", ".join(f"{name}: {type_}" for name, type_ in self._result.signature())
        return f"<tkjit kernel {self.name}({params})>"

    # -- running it ---------------------------------------------------------------------
    @user_facing
    def __call__(self, *args: Any, stream: Any = None, **named: Any) -> None:
        """Run the kernel on its arguments, by position or by parameter name (``k(X=x, Y=y)``);
        ``stream=`` (a torch.cuda.Stream or a raw CUstream handle) for a GPU launch, else torch's
        current stream."""
        if named:
            return self._refused(args, stream, False, named)
        if self.options.runs_checks:
            return self._checked(args, stream)
        fast = self._gpu_fast
        if fast is not None:
            return fast(*args, stream=stream)
        return self._refused(args, stream, False)

    @user_facing  # the GPU fast paths' refusals come here, not through __call__
    def _refused(self, args: tuple, stream: Any, checked: bool, named: dict | None = None) -> None:
        """A call the GPU fast path did not take (or one before it existed): the interpreter for
        host arrays, the current device's launcher (made on first use), or that launcher's
        checker, which says what is wrong with the arguments. A call with arguments by name comes
        here too: bound to positions, it is made again."""
        if named:
            from .arguments import bind_by_name
            names = [name for name, _ in self._result.signature()]
            return self(*bind_by_name(self.name, names, args, named), stream=stream)
        if self.options.runs_checks:  # never a fast path of its own: each launch reads its error buffer
            if not checked:
                return self._checked(args, stream)
            return self._device_launcher().slow(args, stream, True)  # the checker accepted what fast refused
        if self._strided is not None and _has_cuda_view(args):  # views: the variant (its own devices)
            return self._strided(*args, stream=stream)
        backend = self.options.backend or self._backend_for(args)
        if backend == "interpret":
            return self._interpret(args, stream)
        if self._fill_sms:
            dispatch = self._shape_dispatch()
            if dispatch is not None:
                self._use_fast(dispatch)
                return dispatch(*args, stream=stream)
        launcher = self._device_launcher()
        if launcher.fast is not self._gpu_fast:  # the first launch, or another device than last time
            self._use_fast(launcher.fast)
            return launcher.fast(*args, stream=stream)
        try:
            return launcher.slow(args, stream, checked)
        except RowsNotAligned:
            general = self._with_unaligned_rows()
            if general is None:
                raise
        except StridedArgument as e:
            return self._launch_view(launcher, args, stream, e)
        self._use_fast(general)  # from now on: its fast path takes aligned rows as well
        return general(*args, stream=stream)

    @user_facing
    def _checked(self, args: tuple, stream: Any) -> None:
        """Checked mode (runtime/device_checks.py): the interpreter runs its check ops itself; a
        GPU launch passes a zeroed error buffer after the arguments, through the launcher's
        checker (no fast path, no @fill_sms dispatch: the defaults run), then synchronizes the
        device and raises the first failed check's error at its line:col."""
        backend = self.options.backend or self._backend_for(args)
        if backend == "interpret":
            return self._interpret(args, stream)
        from .runtime import device_checks, launch_checks
        launcher = self._device_launcher()
        checks = self._result.metadata.get("device_checks")
        if not checks:  # nothing in this kernel can fail at run time
            return launcher.slow(args, stream)
        own = launcher.params[:-1]
        launch_checks.arity(self.name, [(p.name, p.describe()) for p in own], len(args))
        import torch
        words = torch.zeros(device_checks.CHECK_WORDS, dtype=torch.int32, device=f"cuda:{launcher.device}")
        launcher.slow((*args, words), stream)
        torch.cuda.synchronize(words.device)
        error = device_checks.check_error(words.tolist(), checks, self._result.source, self._result.filename)
        if error is not None:
            raise error

    def _launch_view(self, launcher, args: tuple, stream: Any, refusal: StridedArgument) -> None:
        """A launch with a view this kernel cannot address as it is: the variant with stride
        parameters where the backend has one (compiled at the first such launch), else the views
        copied to contiguous tensors around the launch (outputs copied back into them)."""
        if self._result.metadata.get("strided_variant") and not self.options.strided and not refusal.copy_only:
            if self._strided is None:
                self._strided = self._recompiled(strided=True)
            return self._strided(*args, stream=stream)
        return self._launch_copied(launcher, args, stream, refusal)

    def _launch_copied(self, launcher, args: tuple, stream: Any, refusal: StridedArgument) -> None:
        """The copying fallback: each view the kernel cannot take as it is (all of them, where the
        refusal is the kernel's, not a view's: rows its fallback copies row-major) copied to a
        contiguous tensor on the launch's stream, the kernel launched on those, each written one
        copied back into the caller's view (the launcher checked overlaps on the views themselves
        first). Warns once per refusal, with the reason the copy was needed."""
        import contextlib
        import warnings

        import torch

        from .runtime import strides

        def refused(i: int, a) -> bool:
            shape, raw = tuple(a.shape), tuple(a.stride())
            why = launcher._view_refusal(i, launcher.params[i], shape, strides.effective(shape, raw), raw,
                                         a.data_ptr())
            return why is not None
        views = [i for i, (p, a) in enumerate(zip(launcher.params, args))
                 if p.is_tensor and isinstance(a, torch.Tensor) and not a.is_contiguous()]
        copied = [i for i in views if refused(i, args[i])] or views
        if refusal.message not in self._copied_warned:
            self._copied_warned.add(refusal.message)
            warnings.warn(f"{refusal.message}: copied to a contiguous tensor around the launch "
                          "(outputs copied back; see docs/api.md, 'Strided tensors')", stacklevel=4)
        on = contextlib.nullcontext()
        if stream is not None:
            on = torch.cuda.stream(stream if isinstance(stream, torch.cuda.Stream)
                                   else torch.cuda.ExternalStream(launcher._stream_handle(stream, launcher._current_device())))
        with on:
            fixed, back = list(args), []
            for i in copied:
                fixed[i] = args[i].contiguous()
                if launcher.params[i].writes:
                    back.append((args[i], fixed[i]))
            launcher(*fixed)
            for view, copy in back:
                view.copy_(copy)

    def _with_unaligned_rows(self) -> "CompiledKernel | None":
        """This kernel compiled with the copying fallback for rows TMA cannot address, where it was
        left out only because aligned rows were assumed (the first launch that needs it compiles
        it); None where the kernel has no such fallback to add."""
        self.asm["ptx"]  # noqa: B018 - the metadata: the cache entry's, or made now
        if not self._result.metadata.get("assumes_aligned_rows") or self.options.unaligned_rows:
            return None
        if self._general is None:
            self._general = self._recompiled(unaligned_rows=True)
        return self._general

    def _recompiled(self, **options: Any) -> "CompiledKernel":
        """This kernel's source compiled (or loaded from the cache) with some options changed: a
        variant, which launches as it is (no @fill_sms dispatch of its own)."""
        changed = replace(self.options, **options)
        return CompiledKernel(compiler.load_or_compile(self._result.source, changed, filename=self._result.filename),
                              fill_sms=False)

    def _use_fast(self, fast) -> None:
        """Make ``fast`` this kernel's GPU entry point: ``kernel(*args)`` then calls it directly
        (a one-off subclass whose ``__call__`` is ``fast``: no Python frame of ours per launch,
        about 0.2 µs less). Whatever ``fast`` refuses comes back to ``_refused``."""
        self._gpu_fast = fast
        self.__class__ = _calling(fast)

    def _backend_for(self, args: tuple) -> str:
        names = [name for name, _ in self._result.signature()]
        cuda = [n for n, a in zip(names, args) if getattr(a, "is_cuda", False)]
        host = [n for n, a in zip(names, args) if _is_host_tensor(a)]
        if cuda and host:
            raise LaunchError(f"kernel '{self.name}': {', '.join(cuda)} on the GPU but {', '.join(host)} "
                              "on the CPU; pass all tensors on one device")
        return "gpu" if cuda else "interpret"

    def _interpret(self, args: tuple, stream: Any = None) -> None:
        if stream is not None:
            raise LaunchError(f"kernel '{self.name}': stream= applies to GPU launches, but these arguments "
                              "run on the CPU interpreter")
        run = compiler.require("tkjit.interpreter", "run", "the CPU interpreter")
        run(self._result.portable_ir, list(args))

    def _shape_dispatch(self):
        """For a @fill_sms kernel, or one whose launch picks its binary by trip count (metadata
        ``by_trips``, tkjit/trip_dispatch.py), its GPU entry point that picks a variant per
        argument shapes (made once; None, and never asked again, for other kernels)."""
        self.asm["ptx"]  # noqa: B018 - the metadata: the cache entry's, or made now
        defaults = self._result.metadata.get("fill_sms")
        self._fill_sms = False
        if not defaults:
            return self._trip_dispatch()
        from .fill_sms import ShapeDispatch
        driver = self._gpu_driver()
        own = CompiledKernel(self._result, fill_sms=False)

        def variant(constants: dict) -> CompiledKernel:
            if constants == defaults:
                return own
            merged = {**dict(self.options.constants), **constants}
            made = self._recompiled(constants=tuple(sorted(merged.items())))
            made.asm["ptx"]  # noqa: B018 - its metadata (the grid the choice counts tiles with)
            return made
        return ShapeDispatch(self, driver.num_sms(driver.ensure_context()), variant, own, self._choice_store())

    def _trip_dispatch(self):
        """For a kernel compiled persistent with ``by_trips``, its GPU entry point that launches
        it where the longest loop is short and its one-CTA-per-tile variant past that (None for
        other kernels)."""
        if not self.metadata.get("by_trips"):
            return None
        from .trip_dispatch import TripDispatch, early_release, one_cta_per_tile
        own = CompiledKernel(self._result, fill_sms=False)
        early = early_release(self.options.pipeline)
        return TripDispatch(self, own, lambda: self._recompiled(pipeline=one_cta_per_tile(self.options.pipeline)),
                            (lambda: self._recompiled(pipeline=early)) if early else None)

    def _choice_store(self):
        """Where @fill_sms keeps its per-shape choices across processes: the disk cache, under this
        kernel's own key (None when caching is off or there is no key: no usable ptxas)."""
        opts = self._result.options
        if not opts.cache or opts.dump_dir is not None or opts.debug:
            return None
        key = self._result.key or compiler.cache_key_of(self._result)
        if key is None:
            return None
        from .cache import DiskCache
        from .fill_sms import ChoiceStore
        return ChoiceStore(DiskCache.default(), key, self.name)

    def _gpu_driver(self):
        from .runtime import driver
        if not driver.gpu_available():
            raise NotAvailableError(f"kernel '{self.name}': no CUDA GPU is usable here (cuda-python, the "
                                    "driver, a device and a CUDA build of torch are all needed); pass CPU "
                                    "tensors or compile with backend='interpret' to run on the CPU interpreter")
        return driver

    def _device_launcher(self):
        """The launcher of torch's current device (loading the module there on first use)."""
        driver = self._gpu_driver()
        device = driver.ensure_context()
        launcher = self._launchers.get(device)
        if launcher is None:
            launcher = self._launchers[device] = self._make_launcher(driver)
        return launcher

    def _make_launcher(self, driver):
        """Load the cubin on the current device and prepare the launcher from the metadata."""
        Launcher = compiler.require("tkjit.runtime.launcher", "Launcher", "the GPU launcher")
        binary = self.binary
        meta = self._result.metadata
        missing = [k for k in ("params", "grid", "block") if k not in meta]
        if missing:
            raise NotAvailableError(f"kernel '{self.name}': the backend's metadata has no "
                                    f"{', '.join(missing)}, so it cannot be launched")
        module = driver.Module.load(binary, self._result.asm.get("ptx"))
        function = module.get_function(meta.get("entry", self.name))
        smem = int(meta.get("smem_bytes", 0))
        driver.set_dynamic_smem(function, smem, module.device)
        ctas = 1
        for n in meta.get("cluster", [1]):
            ctas *= int(n)
        if ctas > 8:  # a non-portable cluster size (stream-cols{cluster=16})
            driver.allow_nonportable_cluster(function, ctas)
        return Launcher(function, meta["params"], meta["grid"], meta["block"], smem, name=self.name,
                        device=module.device, on_refusal=self._refused,
                        serial_launches=bool(meta.get("serial_launches")),  # the module's state
                        **({"checks": meta["launch_checks"]} if meta.get("launch_checks") else {}))


def _calling(fast) -> type:
    return type("CompiledKernel", (CompiledKernel,), {"__call__": staticmethod(fast),
                                                      "__module__": CompiledKernel.__module__,
                                                      "__doc__": CompiledKernel.__doc__})


def _has_cuda_view(args: tuple) -> bool:
    """Whether some argument is a CUDA tensor that is not contiguous (a view)."""
    return any(getattr(a, "is_cuda", False) and not a.is_contiguous() for a in args)


def _is_host_tensor(a: Any) -> bool:
    """A CPU torch tensor or a numpy array (without importing either)."""
    device = getattr(a, "device", None)
    if device is not None and getattr(device, "type", None) == "cpu":
        return True
    return type(a).__module__ == "numpy" and hasattr(a, "shape")


# ---------------------------------------------------------------- the API

@user_facing
def compile(source: str, *, constants: dict | None = None, filename: str = "<string>",
            pipeline: str | None = None, debug: bool | None = None, cache: bool | None = None,
            backend: str | None = None, lowering: str | None = None,
            require_hopper: bool | None = None, checked: bool | None = None) -> CompiledKernel:
    """Compile a kernel string (kernel language, or textual tile IR) into a kernel object.

    ``constants`` override the kernel's ``<NAME = default>`` constants; ``pipeline`` replaces the
    default pass pipeline; ``debug`` verifies the IR after every pass; ``cache=False`` bypasses
    the disk cache; ``backend`` is ``"gpu"`` or ``"interpret"``; ``lowering`` is how the Hopper
    backend lowers it (``auto``: the general lowering, except attention, whose template is
    still faster; ``general``; ``template``: the attention template only);
    ``require_hopper=True`` makes a kernel the Hopper path cannot lower an error at the op that stops it; ``checked=True`` is checked mode: GPU launches check
    tile coordinates, integer divisions and loop steps as the interpreter does and raise its error
    at the kernel's line:col (docs/reliability.md). Unset arguments come from the environment
    (TKJIT_DEBUG, TKJIT_NO_CACHE, TKJIT_BACKEND, TKJIT_DUMP, TKJIT_LOWERING, TKJIT_REQUIRE_HOPPER,
    TKJIT_CHECKED)."""
    if not isinstance(source, str):
        hint = "; use tkjit.load(path) for a file" if isinstance(source, Path) else ""
        raise TkError(f"tkjit.compile takes the kernel's text (a str), got {type(source).__name__}{hint}")
    options = CompileOptions.resolve(constants=constants, pipeline=pipeline, debug=debug, cache=cache,
                                     backend=backend, lowering=lowering, require_hopper=require_hopper,
                                     checked=checked)
    result = compiler.load_or_compile(source, options, filename=filename)
    if options.dump_dir is not None:
        compiler.dump_all(result)
    return CompiledKernel(result)


@user_facing
def load(path: str | Path, **options: Any) -> CompiledKernel:
    """Compile the kernel in a file (``.tk`` kernel language, or ``.tkir`` textual IR)."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise TkError(f"cannot read kernel file '{path}': {getattr(e, 'strerror', None) or e}") from None
    return compile(text, filename=str(path), **options)
