"""by_trips: per launch shape, the persistent binary or the one compiled with one CTA per tile.

The grid pass compiles a tile loop persistent with ``by_trips`` where tiles differ in work (a
ring loop's trip count grows with a block index, as in causal attention) and load a tile once per
tile (passes/grid.py). A persistent CTA pays off only for short tiles: it overlaps a tile's start
(its one-shot load, its first product) with the previous tile's work. Past ``by_trips`` trips the
hardware's assignment of CTAs to SMs as they free up balances the uneven tiles better, so such a
launch runs one CTA per tile. The persistent binary can run that way (its grid expression says
so), but it still carries what only a persistent loop needs: the second slot of the one-shot
tiles (fewer ring stages beside it), the tile loop and its phase bookkeeping. Which binary runs a
one-CTA-per-tile launch faster was measured (H200, 2026-11-27, same run,
benchmarks/probes/by_trips_binaries.py): up to 16 trips the persistent binary (causal D = 64 at
N = 2048: +1.8% with L, +2.2% without), past that, for the kernel without L at D = 128, the other
(-1.9/-3.5/-4.5% at 32/64/128 trips; ncu at 8192: 1.547 M against 1.496 M SM-active cycles).

So the kernel object picks the binary, not only the grid: on the first call with a set of
argument shapes it evaluates the longest loop's trip count (the metadata's ``by_trips``: the
grid pass's ``trips_bound`` expression and its bounds ``short`` and ``long``) and launches

* up to ``short`` trips, this kernel compiled with ``mbarrier{release=early}`` (min(tiles, SMs)
  persistent CTAs; the next tile's Q loads under this tile's epilogue: ``EARLY_MEASURED``; not
  where the pipeline pins a release of its own),
* this kernel where the trips are at most ``long`` (its grid expression: one CTA per tile past
  ``short``), or
* the variant compiled under the same pipeline with ``grid{overlap=-1}`` past ``long`` (one CTA
  per tile: what the grid pass chooses for tiles loaded once per tile without the cross-tile
  overlap), compiled (or loaded from the disk cache) at the first launch that needs it.

The choice is logged in the decision log (pass ``grid``, subject ``@kernel at <dims>``) and kept
in a dict keyed by the shapes, so later calls cost one lookup."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

from .errors import TkError

if TYPE_CHECKING:
    from .kernel import CompiledKernel

PASS = "grid"


def one_cta_per_tile(pipeline: str | None) -> str:
    """``pipeline`` (None: the default one) with the grid pass keeping one CTA per tile for tiles
    loaded once per tile (``grid{overlap=-1}``), as a canonical pipeline string."""
    return _with_option(_parsed(pipeline), "grid", overlap=-1)


def early_release(pipeline: str | None) -> str | None:
    """``pipeline`` with the mbarrier pass releasing a one-slot tile loaded once per tile right
    after its last product (``mbarrier{release=early}``): the binary for loops of at most
    ``short`` trips, which run persistent. None where the pipeline pins a release of its own."""
    parsed = _parsed(pipeline)
    mine = [p for p in parsed if p.name == "mbarrier"]
    if not mine or mine[0].release != "auto":
        return None
    return _with_option(parsed, "mbarrier", release="early")


def _parsed(pipeline: str | None):
    from .passes import DEFAULT_PIPELINE
    from .passes.manager import Pipeline
    return Pipeline.parse(pipeline or DEFAULT_PIPELINE)


def _with_option(parsed, name: str, **option) -> str:
    """The parsed pipeline with the pass ``name``'s ``option`` set, as a canonical string."""
    return str(type(parsed)(tuple(replace(p, **option) if p.name == name else p for p in parsed)))


def long_trips(by_trips: dict, dims: dict[str, int]) -> tuple[int, bool] | None:
    """The longest loop's trip count at these dims and whether it is past the binary's bound
    (``long``; None where the expression cannot be evaluated from them)."""
    from .fill_sms import UNBOUNDED
    from .runtime.launcher import compile_grid
    try:
        trips = compile_grid([by_trips["trips"]], tuple(dims), num_sms=UNBOUNDED)(**dims)[0]
    except (KeyError, TypeError, NameError, ValueError, ZeroDivisionError, TkError):
        return None
    return int(trips), int(trips) > int(by_trips.get("long", by_trips["short"]))


class TripDispatch:
    """A ``by_trips`` kernel's GPU entry point: ``dispatch(*args, stream=None)`` launches, for these
    argument shapes, the early-release persistent variant (at most ``short`` trips), this
    persistent binary (up to ``long``) or the one-CTA-per-tile variant (past ``long``)."""

    def __init__(self, kernel: "CompiledKernel", own: "CompiledKernel",
                 make_variant: Callable[[], "CompiledKernel"],
                 make_short: "Callable[[], CompiledKernel] | None" = None):
        self._kernel = kernel
        self._own = own
        self._makers: dict[str, "Callable[[], CompiledKernel] | None"] = {"long": make_variant, "short": make_short}
        """Compile each regime's variant (None: none, or it failed: this persistent binary runs)."""
        self._made: dict[str, "CompiledKernel"] = {}
        self._by_shape: dict[tuple, "CompiledKernel"] = {}

    def __call__(self, *args: Any, stream: Any = None, **named: Any) -> None:
        if named:  # by name: the kernel binds them and calls again by position
            return self._kernel._refused(args, stream, False, named)
        key = tuple(getattr(a, "shape", None) for a in args)  # scalars: None
        chosen = self._by_shape.get(key)
        if chosen is None:
            chosen = self._by_shape[key] = self._choose(args)
        return chosen(*args, stream=stream)

    def _choose(self, args: tuple) -> "CompiledKernel":
        from .fill_sms import bind_dims
        meta = self._kernel.metadata
        dims = bind_dims(meta.get("params", []), args)
        got = long_trips(meta["by_trips"], dims) if dims is not None else None
        if got is None:  # a wrong rank or a missing dim: the persistent kernel's checks say which
            return self._own
        trips, long = got
        shape = " ".join(f"{name}={value}" for name, value in dims.items())
        short = meta["by_trips"]["short"]
        bound = meta["by_trips"].get("long", short)
        if long:
            return self._variant("long", shape, f"the longest loop runs {trips} trips (more than {bound})",
                                 "the binary compiled with one CTA per tile (grid{overlap=-1})",
                                 "passes/grid.py LONG_TRIPS: the hardware hands CTAs to SMs as they free "
                                 "up, which balances uneven tiles better, and the binary without a "
                                 "persistent loop keeps the rings' full depth (tkjit/trip_dispatch.py)")
        if trips <= short:
            return self._variant("short", shape, f"the longest loop runs {trips} trips (at most {short})",
                                 "the persistent binary with Q released early (mbarrier{release=early})",
                                 "min(tiles, SMs) persistent CTAs, each short tile's start overlapping "
                                 "the previous tile's work, the next tile's Q loaded under this one's "
                                 f"epilogue; {EARLY_MEASURED}")
        self._log(shape, "the persistent binary",
                  f"the longest loop runs {trips} trips (more than {short}, at most {bound}): one CTA "
                  "per tile, each running this binary's tile loop once (measured faster there than "
                  "the binary without it: passes/grid.py LONG_TRIPS; and than Q released early, "
                  f"{EARLY_MEASURED})")
        return self._own

    def _variant(self, regime: str, shape: str, trips: str, what: str, why: str) -> "CompiledKernel":
        """This regime's variant (compiled on first use), or this persistent binary where there is
        none: a pinned option asked otherwise, or it did not compile (never expected; the
        persistent binary is right at any N)."""
        made = self._made.get(regime)
        if made is not None:
            self._log(shape, what, f"{trips}: {why}")
            return made
        maker = self._makers.get(regime)
        if maker is not None:
            try:
                made = self._made[regime] = maker()
            except TkError as e:
                self._makers[regime] = None
                self._log(shape, "the persistent binary", f"{trips}, but {what} did not compile: {e.message}")
                return self._own
            self._log(shape, what, f"{trips}: {why}")
            return made
        self._log(shape, "the persistent binary", f"{trips}; no variant for it ({what}: a pinned "
                  "option, or it did not compile)")
        return self._own

    def _log(self, shape: str, what: str, why: str) -> None:
        self._kernel.decisions.record(PASS, f"@{self._kernel.name} at {shape}", what, why)


EARLY_MEASURED = ("measured, H200, 2026-11-27, same run, causal examples/attention.tk, Q released "
                  "early against at the tile's end: D = 128 N = 1024 (8 trips, persistent) +7.8% / "
                  "+5.1%, N = 2048 (16 trips, one CTA per tile) -1.4% / -1.6%, D = 64 0.0% "
                  "(benchmarks/results/2026-11-27-nvidia-h200-s15-early-bytrips.json)")
