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

* this kernel where the trips are at most ``long`` (its grid expression: min(tiles, SMs)
  persistent CTAs up to ``short`` trips, one CTA per tile past that), or
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
    from .passes import DEFAULT_PIPELINE
    from .passes.manager import Pipeline
    parsed = Pipeline.parse(pipeline or DEFAULT_PIPELINE)
    passes = tuple(replace(p, overlap=-1) if p.name == "grid" else p for p in parsed)
    return str(type(parsed)(passes))


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
    """A ``by_trips`` kernel's GPU entry point: ``dispatch(*args, stream=None)`` launches the
    persistent binary or the one-CTA-per-tile variant chosen for these argument shapes."""

    def __init__(self, kernel: "CompiledKernel", own: "CompiledKernel",
                 make_variant: Callable[[], "CompiledKernel"]):
        self._kernel = kernel
        self._own = own
        self._make_variant: "Callable[[], CompiledKernel] | None" = make_variant
        """Compiles the one-CTA-per-tile variant (None once it failed: the persistent binary runs)."""
        self._variant: "CompiledKernel | None" = None
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
        if not long:
            grid = (f"at most {short}: min(tiles, SMs) persistent CTAs, each short tile's start "
                    "overlapping the previous tile's work" if trips <= short else
                    f"more than {short}, at most {bound}: one CTA per tile, each running this "
                    "binary's tile loop once (measured faster there than the binary without it: "
                    "passes/grid.py LONG_TRIPS)")
            self._log(shape, "the persistent binary", f"the longest loop runs {trips} trips ({grid})")
            return self._own
        if self._variant is None:
            if self._make_variant is None:  # it failed before: logged then
                return self._own
            try:
                self._variant = self._make_variant()
            except TkError as e:  # never expected; the persistent binary is right at any N
                self._log(shape, "the persistent binary",
                          f"the longest loop runs {trips} trips (more than {bound}), but the "
                          f"one-CTA-per-tile variant did not compile: {e.message}")
                self._make_variant = None
                return self._own
        self._log(shape, "the binary compiled with one CTA per tile (grid{overlap=-1})",
                  f"the longest loop runs {trips} trips (more than {bound}, passes/grid.py "
                  "LONG_TRIPS): the hardware hands "
                  "CTAs to SMs as they free up, which balances uneven tiles better, and the binary "
                  "without a persistent loop keeps the rings' full depth (tkjit/trip_dispatch.py)")
        return self._variant

    def _log(self, shape: str, what: str, why: str) -> None:
        self._kernel.decisions.record(PASS, f"@{self._kernel.name} at {shape}", what, why)
