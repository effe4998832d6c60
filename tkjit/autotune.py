"""A measured autotuner: ``tuned = kernel.autotune({"BM": [64, 128], "BN": [128, 256]})``.

``@fill_sms`` picks tile constants from a model, at no cost; this times candidates instead, the
way ``triton.autotune`` does, for kernels where the model is not enough.

* **Space.** The product of the values given for ``<...>`` constants (the kernel's other
  constants keep their values). Annotations are tuned through constants they are written with
  (``@stages(S)``, ``@consumers(BM / 64)``, ``@regs(P, C)``).
* **Pruning.** Each candidate is compiled to PTX first (``tkjit.compile`` with its constants: the
  disk cache keeps each): one the passes or the code generator refuse (shared memory over the
  limit, registers, a TMA box, a shape the kernel's text does not allow) is dropped with its
  reason, without launching anything.
* **Timing.** On the GPU, with the call's real arguments: each survivor is launched a few times
  and then timed with CUDA events on torch's current stream (a ``stream=`` given to the call is
  used for the call's own launch; tune outside a CUDA graph capture) (``cuda_event_timer``: the best of
  ``rounds`` means over ``reps`` launches). Tensors the kernel writes are saved before and
  restored after, so a kernel that reads its output (``C += A·B``) gives the right answer; the
  call itself then runs the winner once. A line per candidate on standard error while it tunes.
* **Shape buckets.** Choices are per bucket of the named dimensions (each rounded up to a power
  of two: ``M=1000`` tunes for ``M=1024``), in a dict for the process and in the disk cache for
  the next one, keyed by the kernel's own cache key (its text, options, tkjit's source and
  version, ptxas), the space, the bucket and the device (GPU name, driver version): a second
  process at a known bucket compiles only the winner and times nothing.
* ``tuned.explain()`` is the kernel's log plus a table per bucket: each candidate, its time or
  why it was dropped, and the winner.

CPU tensors run the kernel with its default constants on the interpreter (there is nothing to
time there). The timer and the device's identity can be given (``timer=``, ``device=``); the
tests do, to exercise the whole path on the CPU.
"""
from __future__ import annotations

import itertools
import math
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from .errors import TkError, user_facing

if TYPE_CHECKING:
    from .kernel import CompiledKernel

Timer = Callable[[Callable[[], None]], float]
"""Runs the launch it is given as often as it likes; the time of one launch in milliseconds."""


@dataclass
class Trial:
    """One candidate at one bucket: its constants, its time (ms) or why it was dropped."""

    constants: dict[str, Any]
    ms: float | None = None
    dropped: str | None = None

    def label(self) -> str:
        return " ".join(f"{n}={v}" for n, v in self.constants.items())


@dataclass
class Tuning:
    """A bucket's outcome."""

    bucket: dict[str, int]
    winner: dict[str, Any]
    trials: list[Trial] = field(default_factory=list)
    from_disk: bool = False
    seconds: float = 0.0


def bucket_of(dims: Mapping[str, int]) -> dict[str, int]:
    """Each dimension rounded up to a power of two (0 and 1 stay)."""
    return {n: (v if v <= 1 else 1 << (int(v) - 1).bit_length()) for n, v in dims.items()}


def cuda_event_timer(warmup: int = 3, reps: int = 10, rounds: int = 3) -> Timer:
    """Times a launch on torch's current stream with CUDA events: ``warmup`` launches, then the
    best of ``rounds`` means over ``reps`` launches each."""
    def time(launch: Callable[[], None]) -> float:
        import torch
        for _ in range(warmup):
            launch()
        best = math.inf
        for _ in range(rounds):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                launch()
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) / reps)
        return best
    return time


def gpu_identity() -> str:
    """The device part of a choice's key: the GPU's name and the driver's version."""
    import torch
    from .runtime import driver
    version = driver.check(driver.cu().cuDriverGetVersion(), "cuDriverGetVersion")
    return f"{torch.cuda.get_device_name()} / CUDA driver {version}"


class AutotunedKernel:
    """``kernel.autotune(space)``: call it like the kernel; ``explain()`` shows the tuning."""

    def __init__(self, kernel: "CompiledKernel", space: Mapping[str, Sequence[Any]], *,
                 timer: Timer | None = None, device: Callable[[], str] | None = None,
                 progress: bool = True, store: bool = True):
        self.kernel = kernel
        self.space = _check_space(kernel, space)
        self._timer = timer
        self._device = device
        self._progress = progress
        self._store = store
        self._tunings: dict[tuple, Tuning] = {}
        self._variants: dict[tuple, "CompiledKernel"] = {}
        self._by_bucket: dict[tuple, "CompiledKernel"] = {}
        self._by_shapes: dict[tuple, "CompiledKernel"] = {}
        """The arguments' shapes -> the variant their bucket chose: a launch's whole lookup."""
        self._names = [p.hint or f"arg{i}" for i, p in enumerate(kernel.ir.params)]

    @property
    def name(self) -> str:
        return self.kernel.name

    def __repr__(self) -> str:
        return f"<tkjit autotuned kernel {self.kernel.name} over {', '.join(self.space)}>"

    # -- calling -------------------------------------------------------------------------
    @user_facing
    def __call__(self, *args: Any, stream: Any = None, **named: Any) -> None:
        if named:
            from .arguments import bind_by_name
            args = bind_by_name(self.name, self._names, args, named)
        gpu = self._timer is not None or any(getattr(a, "is_cuda", False) for a in args)
        if not gpu:
            return self.kernel(*args, stream=stream)  # the interpreter: nothing to time
        # Shapes seen before skip the dims and the bucket (3-4 us of Python a launch, which at a
        # 13 us GEMM made the tuned kernel 10% slower than the kernel it picked: test_autotune_gpu)
        shapes = tuple(getattr(a, "shape", None) for a in args)
        variant = self._by_shapes.get(shapes)
        if variant is not None:
            return variant(*args, stream=stream)
        dims = self._dims(args)
        if dims is None:  # a wrong rank: the kernel's own checks name it
            return self.kernel(*args, stream=stream)
        bucket = bucket_of(dims)
        key = tuple(sorted(bucket.items()))
        variant = self._by_bucket.get(key)
        if variant is None:
            variant = self._by_bucket[key] = self._tune(bucket, args)
        if len(self._by_shapes) >= 4096:  # many shapes: keep the lookup table bounded
            self._by_shapes.clear()
        self._by_shapes[shapes] = variant
        return variant(*args, stream=stream)

    def _dims(self, args: tuple) -> dict[str, int] | None:
        from .ir.types import GlobalType
        dims: dict[str, int] = {}
        for p, a in zip(self.kernel.ir.params, args):
            if not isinstance(p.type, GlobalType):
                continue
            shape = tuple(getattr(a, "shape", ()))
            if len(shape) != len(p.type.dims):
                return None
            for d, size in zip(p.type.dims, shape):
                if isinstance(d, str):
                    dims.setdefault(d, int(size))
        return dims

    # -- tuning --------------------------------------------------------------------------
    def _variant(self, constants: dict[str, Any]) -> "CompiledKernel":
        key = tuple(sorted(constants.items()))
        made = self._variants.get(key)
        if made is None:
            merged = {**dict(self.kernel.options.constants), **constants}
            made = self.kernel._recompiled(constants=tuple(sorted(merged.items())))
            made.asm["ptx"]  # noqa: B018 - the code generator's refusals prune here, before a launch
            self._variants[key] = made
        return made

    def _candidates(self) -> list[dict[str, Any]]:
        names = list(self.space)
        return [dict(zip(names, values)) for values in itertools.product(*self.space.values())]

    def _tune(self, bucket: dict[str, int], args: tuple) -> "CompiledKernel":
        import time
        key = tuple(sorted(bucket.items()))
        device = (self._device or gpu_identity)()
        store = self._disk(device)
        stored = store.get(bucket) if store is not None else None
        if stored is not None:
            try:
                variant = self._variant(stored["winner"])
            except TkError:
                variant = None
            if variant is not None:
                trials = [Trial(t["constants"], t.get("ms"), t.get("dropped")) for t in stored.get("trials", [])]
                self._tunings[key] = Tuning(bucket, stored["winner"], trials, from_disk=True,
                                            seconds=stored.get("seconds", 0.0))
                return variant
        begin = time.perf_counter()
        timer = self._timer or cuda_event_timer()
        saved = self._save_outputs(args)
        trials: list[Trial] = []
        candidates = self._candidates()
        for n, constants in enumerate(candidates, 1):
            trial = Trial(constants)
            trials.append(trial)
            try:
                variant = self._variant(constants)
                trial.ms = float(timer(lambda v=variant: v(*args)))  # torch's current stream, as the events
            except TkError as e:
                trial.dropped = e.message.splitlines()[0]
            self._say(f"tkjit autotune {self.name} [{_shape(bucket)}] {n}/{len(candidates)} {trial.label()}: "
                      + (f"{trial.ms:.4f} ms" if trial.ms is not None else f"dropped ({trial.dropped})"))
        self._restore_outputs(args, saved)
        timed = [t for t in trials if t.ms is not None]
        if not timed:
            reasons = "; ".join(f"{t.label()}: {t.dropped}" for t in trials)
            raise TkError(f"autotune: no candidate of kernel '{self.name}' runs at {_shape(bucket)}: {reasons}")
        best = min(timed, key=lambda t: t.ms)
        tuning = Tuning(bucket, best.constants, trials, seconds=time.perf_counter() - begin)
        self._tunings[key] = tuning
        self._say(f"tkjit autotune {self.name} [{_shape(bucket)}]: {best.label()} in {tuning.seconds:.1f} s")
        if store is not None:
            store.put(bucket, tuning)
        return self._variant(best.constants)

    def _save_outputs(self, args: tuple) -> list:
        """Copies of the tensors the kernel writes (timing launches overwrite them)."""
        from .ir.ops import Store
        written = {id(op.operands[0]) for op in self.kernel.ir.walk() if isinstance(op, Store)}
        return [(a, a.clone()) for p, a in zip(self.kernel.ir.params, args)
                if id(p) in written and hasattr(a, "clone") and hasattr(a, "copy_")]

    @staticmethod
    def _restore_outputs(args: tuple, saved: list) -> None:
        for tensor, copy in saved:
            tensor.copy_(copy)

    def _say(self, line: str) -> None:
        if self._progress:
            print(line, file=sys.stderr, flush=True)

    def _disk(self, device: str) -> "_Store | None":
        if not self._store:
            return None
        opts = self.kernel.options
        if not opts.cache or opts.debug or opts.dump_dir is not None:
            return None
        from . import compiler
        key = self.kernel._result.key or compiler.cache_key_of(self.kernel._result)
        if key is None:
            return None
        from .cache import DiskCache
        return _Store(DiskCache.default(), key, self.name, self.space, device)

    # -- reading -------------------------------------------------------------------------
    @property
    def tunings(self) -> list[Tuning]:
        return list(self._tunings.values())

    @user_facing
    def explain(self):
        """The kernel's decision log, then a table of candidates and times for every bucket tuned
        (or read from the disk cache) in this process."""
        from .explanation import Explanation
        base = self.kernel.explain()
        lines = []
        for t in self._tunings.values():
            origin = "read from the disk cache (timed by an earlier process)" if t.from_disk else "timed now"
            lines.append(f"autotune [{_shape(t.bucket)}]: {' '.join(f'{n}={v}' for n, v in t.winner.items())}, "
                         f"{origin}, tuning took {t.seconds:.1f} s")
            width = max((len(tr.label()) for tr in t.trials), default=0)
            for tr in t.trials:
                mark = "*" if tr.constants == t.winner else " "
                what = f"{tr.ms:.4f} ms" if tr.ms is not None else f"dropped: {tr.dropped}"
                lines.append(f"  {mark} {tr.label():<{width}}  {what}")
        text = str(base) + "".join(line + "\n" for line in lines)
        return Explanation(text, kernel=base.kernel, pipeline=base.pipeline, decisions=base.decisions,
                           notes=base.notes + lines)


class _Store:
    """A bucket's choice in the disk cache (an entry without files: its metadata is the choice)."""

    VERSION = 1

    def __init__(self, cache, kernel_key: str, name: str, space: dict, device: str):
        self._cache, self._kernel_key, self._name, self._space, self._device = cache, kernel_key, name, space, device

    def _key(self, bucket: dict[str, int]) -> str:
        import hashlib
        import json
        what = ["autotune", self.VERSION, self._kernel_key, sorted(self._space.items()), sorted(bucket.items()),
                self._device]
        return hashlib.sha256(json.dumps(what, separators=(",", ":"), default=str).encode()).hexdigest()

    def get(self, bucket: dict[str, int]) -> dict | None:
        entry = self._cache.get(self._key(bucket))
        if entry is None:
            return None
        winner = entry.metadata.get("winner")
        if not (isinstance(winner, dict) and winner.keys() == self._space.keys()):
            return None
        return entry.metadata

    def put(self, bucket: dict[str, int], tuning: Tuning) -> None:
        try:
            self._cache.put(self._key(bucket), {}, {
                "name": f"{self._name} autotune choice at {_shape(bucket)}", "constants": tuning.winner,
                "winner": tuning.winner, "seconds": tuning.seconds, "device": self._device,
                "trials": [{"constants": t.constants, "ms": t.ms, "dropped": t.dropped} for t in tuning.trials]})
        except OSError:
            pass  # a read-only cache: the next process tunes again


def _shape(bucket: Mapping[str, int]) -> str:
    return " ".join(f"{n}={v}" for n, v in bucket.items())


def _check_space(kernel: "CompiledKernel", space: Mapping[str, Sequence[Any]]) -> dict[str, list]:
    if not isinstance(space, Mapping) or not space:
        raise TkError("autotune: give the space as a dict of constant name to the values to try, "
                      "e.g. {'BM': [64, 128]}")
    out = {}
    for name, values in space.items():
        values = list(values) if isinstance(values, (list, tuple, range)) else None
        if not values:
            raise TkError(f"autotune: {name}: give a non-empty list of values to try")
        out[name] = values
    from .frontend import parse
    declared = [c.name for c in parse(kernel._result.source, kernel._result.filename).consts]
    unknown = [n for n in out if n not in declared]
    if unknown:
        raise TkError(f"autotune: {', '.join(unknown)} {'is not a constant' if len(unknown) == 1 else 'are not constants'} "
                      f"of kernel '{kernel.name}' (its constants: {', '.join(declared) or 'none'})")
    return out
