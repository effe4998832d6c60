"""@fill_sms: per launch shape, the tile constants that keep every SM busy.

A kernel annotated ``@fill_sms(BM, BN)`` names the ``<...>`` constants that size its block
loop's tiles. Its default values suit large problems; when a launch has too few tiles for the
GPU's SMs (the gemm at M = 128: 128×256 tiles give N/256 CTAs for 132 SMs, each running the whole
K loop), the kernel object launches a variant compiled with smaller tiles instead. The choice
is made on the first call with a given set of argument shapes, logged in the decision log
(pass ``fill-sms``) and kept in a dict keyed by those shapes, so later calls cost one lookup.

The model (``choose``):

* candidates: each named constant that sizes a tile takes its default or the default halved,
  again and again, while it stays a positive multiple of ``FLOOR`` (64: one wgmma M slab, a
  128-byte bf16 row); a constant whose default is below ``FLOOR`` is a count (the gemm's SPLIT:
  CTAs sharing a tile's K loop) and takes its default doubled, up to ``MAX_COUNT``. A constant the
  caller set (``constants=``) is a pin and keeps its value. For the gemm:
  BM ∈ {128, 64} × BN ∈ {256, 128, 64} × SPLIT ∈ {1, 2}.
* tiles(c): the candidate's launch-grid expression with an unbounded SM count (its CTA count).
* When the default's tiles fill the SMs (tiles ≥ SMs) the default stays: smaller tiles only add
  per-tile work (epilogues, refetched operands) and lower the math per byte loaded. Two
  exceptions for a GEMM, both launching the half-width tile (128x128 for 128x256), whose
  consumers ping-pong: a short K loop (``SHORT_K_TRIPS``: the epilogue is a large share of each
  tile; a costlier epilogue than the plain GEMM's -- a fused activation -- lengthens what counts as
  short in proportion, ``PLAIN_EPILOGUE``), and a badly filled last round (``LAST_WAVE_GAIN``: the half tile's rounds leave the
  busiest SM at least 10% less tile area, ``wave_gain``).
* Otherwise the candidate with the least work on the busiest SM wins. For a GEMM variant (its
  metadata says its tile, split and K trips) the time is bandwidth-bound at these sizes (fewer
  tiles than SMs; ncu, 2026-11-21: M = 128 GEMMs at 12% SM throughput), so it is the larger of
  - the arguments' bytes over the DRAM bandwidth (each read or written once), and
  - ceil(CTAs / SMs) rounds of the bytes one CTA streams -- (BM + BN)·BK·2 × ceil(T / S), plus
    2·(S − 1)/S·BM·BN·4 of partials when split -- over what one SM pulls (``SM_BANDWIDTH``).
  Ties (all at the DRAM bound) go to fewer rounds, then more CTAs in flight, then the smaller
  split, then the larger tile. Other kernels: ceil(tiles / SMs) × tile size (the product of the named constants), ties
  to the larger tile. Either way, then to the earlier candidate.

Variants are ordinary kernel objects (``tkjit.compile`` with the chosen constants; the disk cache
holds their binaries); only the chosen one is assembled. The default is compiled first, and when
its tiles fill the SMs no other candidate is compiled at all. Each choice is also kept in the disk
cache (``ChoiceStore``: keyed by the kernel's own cache key, the dims and the SM count), so a new
process at a known shape compiles only the chosen variant instead of every candidate's PTX (about
0.1 s each on the CI machine).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from .errors import TkError
from .frozen import Frozen

if TYPE_CHECKING:
    from .kernel import CompiledKernel

FLOOR = 64
"""Halving stops before a constant falls below this or stops being a multiple of it."""
PASS = "fill-sms"
"""The decision log's name for these choices."""
MAX_COUNT = 2
"""A count constant (default below FLOOR: the gemm's SPLIT) doubles up to this. A split tile is a
cluster: pairs (one TPC) always fit at once, but clusters of 4 measured 0.6x of cuBLAS where the
same tiles in pairs gave 0.87-1.02x (H200, 2026-11-21, benchmarks/results/
2026-11-21-nvidia-h200-split-candidates.json): not every GPC holds as many 4-SM clusters as the
CTA count needs, so they ran in two rounds."""
DRAM_BANDWIDTH = 4.2e12
"""Bytes/s: the H200's measured device-to-device copy (4245 GB/s, docs/benchmarks.md)."""
SM_BANDWIDTH = 1.0e11
"""Bytes/s one SM's CTA streams through its TMA ring: 128x64 tiles over all of K = 4096 at
M = 128 (64 CTAs, 1.57 MB each) ran in 15.7 us on the H200 (2026-11-21)."""


@dataclass(unsafe_hash=True)
class Candidate(Frozen):
    """One variant of a ``@fill_sms`` kernel's tile constants, at one launch shape."""

    constants: tuple[tuple[str, int], ...]
    """(name, value) of every named constant, in the annotation's order."""
    tiles: int
    gemm: dict | None = None
    """For a GEMM variant: {"tile": [BM, BN, BK], "split": S, "trips": T} at this launch shape."""

    @property
    def size(self) -> int:
        """The tile size the model weighs (the product of the named size constants)."""
        if self.gemm is not None:
            bm, bn, _ = self.gemm["tile"]
            return bm * bn
        size = 1
        for _, value in self.constants:
            size *= value if value >= FLOOR else 1
        return size

    @property
    def split(self) -> int:
        return self.gemm["split"] if self.gemm is not None else 1

    def seconds(self, num_sms: int) -> float:
        """The GEMM model's time (module docstring)."""
        dram = self.gemm.get("tensor_bytes", 0) / DRAM_BANDWIDTH
        return max(dram, waves(self, num_sms) * self.streamed_bytes() / SM_BANDWIDTH)

    def streamed_bytes(self) -> int:
        """Bytes one CTA of a GEMM variant streams: its A and B tiles over its share of the K
        loop, and (split) the partials it sends and the ones it adds."""
        bm, bn, bk = self.gemm["tile"]
        s, trips = self.gemm["split"], self.gemm["trips"]
        loads = (bm + bn) * bk * 2 * -(-trips // s)
        return loads + (2 * (s - 1) * bm * bn * 4 // s if s > 1 else 0)

    def text(self) -> str:
        return ", ".join(f"{name} = {value}" for name, value in self.constants)


def halvings(value: int) -> list[int]:
    """``value``, then its halves while they stay positive multiples of FLOOR; a count (below
    FLOOR), then its doubles up to MAX_COUNT."""
    out = [value]
    if 0 < value < FLOOR:
        while out[-1] * 2 <= MAX_COUNT:
            out.append(out[-1] * 2)
        return out
    while out[-1] % (2 * FLOOR) == 0:
        out.append(out[-1] // 2)
    return out


def candidate_constants(defaults: dict[str, int], pinned: set[str]) -> list[tuple[tuple[str, int], ...]]:
    """Every combination of the named constants' values, the defaults first, larger values
    first (the earlier name varies slowest)."""
    choices = [[(name, v) for v in ([value] if name in pinned else halvings(value))]
               for name, value in defaults.items()]
    return [tuple(combo) for combo in itertools.product(*choices)]


def waves(c: Candidate, num_sms: int) -> int:
    return -(-c.tiles // num_sms)


def choose(candidates: list[Candidate], num_sms: int) -> tuple[Candidate, str]:
    """The model above: (the chosen candidate, why). ``candidates[0]`` is the default."""
    default = candidates[0]
    if default.tiles >= num_sms:
        return default, (f"the default tiles fill the GPU: {default.tiles} tiles for {num_sms} SMs")

    if all(c.gemm is not None for c in candidates):
        def work(c: Candidate) -> tuple:
            return (round(c.seconds(num_sms) * 1e9), waves(c, num_sms), -min(c.tiles, num_sms), c.split,
                    -c.size)
        weighed = "; ".join(f"{c.text()}: {c.tiles} CTAs, {waves(c, num_sms)} x {c.streamed_bytes()} B, "
                            f"{c.seconds(num_sms) * 1e6:.1f} us" for c in candidates)
        rule = (f"the larger of the arguments' bytes at {DRAM_BANDWIDTH / 1e12:.1f} TB/s and "
                f"ceil(CTAs / SMs) x the bytes a CTA streams (A and B tiles over its share of K, "
                f"partials when split) at {SM_BANDWIDTH / 1e9:.0f} GB/s per SM; ties to fewer rounds, "
                "then more CTAs, then the smaller split, then the larger tile")
    else:
        def work(c: Candidate) -> tuple:
            return (waves(c, num_sms) * c.size, -c.size)
        weighed = "; ".join(f"{c.text()}: {c.tiles} tiles, {waves(c, num_sms)} x {c.size}"
                            for c in candidates)
        rule = "ceil(tiles / SMs) x tile size, ties to the larger tile"
    best = min(candidates, key=work)  # min keeps the earliest of equals
    why = (f"the default ({default.text()}) gives {default.tiles} tiles for {num_sms} SMs; the least "
           f"work on the busiest SM is {rule} ({weighed})")
    return best, why


SHORT_K_TRIPS = 16
"""A GEMM whose K loop has at most this many trips (K <= 1024 at BK = 64) takes the half-width
tile (128x128 instead of 128x256) when the default fills the SMs, because that tile runs with
ping-pong consumers (one's epilogue under the other's K loop) and a short K loop makes the epilogue
a large share of each tile. H200, 2026-11-21, benchmarks/run.py's harness, two interleaved runs
each (benchmarks/results/2026-11-21-nvidia-h200-tile-ab.json), ratio to cuBLAS, 128x256
cooperative vs 128x128 ping-pong: M = N = 4096, K = 64..1024: 1.04-1.09 vs 1.05-1.16; but at
K = 4096 and up the wide tile wins (4096^3 1.07/1.03 vs 0.98/0.99, K = 14336 1.01-1.03 vs
0.94-0.97), so it stays the default there."""


PLAIN_EPILOGUE = 1.0
"""The plain GEMM's epilogue (conversion and store) in the units of the metadata's ``epilogue``
(passes/epilogue_cost.py): a kernel whose tile does more after its K loop takes the half-width
ping-pong tile up to SHORT_K_TRIPS x epilogue / PLAIN_EPILOGUE trips, where its epilogue is as
large a share of the tile as the plain GEMM's at SHORT_K_TRIPS (bias + erf gelu, ~17.5: up to 280
trips, K <= 17920 at BK = 64). Measured (H200, 2026-11-27, benchmarks/epilogue_variants.py,
one process, ratio to cuBLAS's plain matmul, 128x256 cooperative -> 128x128 ping-pong, 4096^3 /
8192^3): bias + gelu 0.946 -> 0.991 / 1.020 -> 1.063, bias + silu (~14.5) 0.978 -> 1.022 /
1.032 -> 1.067; bias + relu (~3.5: up to 56 trips) keeps the wide tile at both (64 and 128 trips),
where the half tile measured 1.018 -> 1.055 / 1.061 -> 1.092 too; the plain GEMM (1.0) keeps the
rule as it was (1.023 -> 1.037 / 1.083 -> 1.073 in that run). A lower threshold wants a same-run
sweep over K first."""


LAST_WAVE_GAIN = 0.10
"""A GEMM whose default tile fills the SMs also takes the half-width ping-pong tile (as for
SHORT_K_TRIPS) when that leaves the busiest SM at least this much less tile area to compute:
ceil(2T / SMs) half tiles against ceil(T / SMs) whole ones (``wave_gain``), i.e. when the
default's last round leaves many SMs idle and the half tile fills them. At equal rounds the two
tiles are within a few percent of each other either way, depending on the harness (H200,
2026-11-21: ping-pong 128x128 up to 7% behind 128x256 cooperative in benchmarks/run.py's
harness, 1024x4096x14336 0.94-0.97 vs 1.01-1.03, benchmarks/results/2026-11-21-nvidia-h200-
tile-ab.json; -1..+2% in gemm_variants.py's), so the rounds must save more than that. At
1024x14336x4096 (448 tiles for 132 SMs: the last round holds 52, 4 rounds against 7 of the half
tile, 12.5% less) the half tile measured 0.953/0.961 -> 1.112/1.120x cuBLAS in two same-run
batches (benchmarks/results/2026-11-21-nvidia-h200-issue6-variants.jsonl; 1.08-1.10 in run.py's
harness), and with this rule the default launched it at 1.111/1.121x against 0.955/0.964 for the
pinned 128x256 (...-issue6-confirm.jsonl); the other listed shapes save 0-1.8% (8192x14336x4096
1.8%: +3..6% in gemm_variants.py's harness, -1% in run.py's) and keep the default."""


def wave_gain(tiles: int, half_tiles: int, num_sms: int) -> float:
    """The share of the busiest SM's tile area that ``half_tiles`` tiles of half the size save
    over ``tiles`` whole ones on ``num_sms`` SMs (rounds of a persistent grid)."""
    whole = 2 * -(-tiles // num_sms)
    return 1 - -(-half_tiles // num_sms) / whole


class ShapeDispatch:
    """A @fill_sms kernel's GPU entry point: ``dispatch(*args, stream=None)`` launches the variant
    chosen for these argument shapes (choosing it on the first call with them)."""

    def __init__(self, kernel: "CompiledKernel", num_sms: int, make_variant: Callable[[dict[str, int]], "CompiledKernel"],
                 fallback: Callable, store: "ChoiceStore | None" = None):
        self._kernel = kernel
        self._store = store
        """Where choices outlive the process (None: they do not)."""
        self._num_sms = num_sms
        self._make_variant = make_variant
        self._fallback = fallback
        """Where arguments without shapes go (the default kernel's own checks name the problem)."""
        self._variants: dict[tuple, "CompiledKernel"] = {}
        """By constants: each variant compiled once."""
        self._by_shape: dict[tuple, "CompiledKernel"] = {}

    def __call__(self, *args: Any, stream: Any = None, **named: Any) -> None:
        if named:  # by name: the kernel binds them and calls again by position
            return self._kernel._refused(args, stream, False, named)
        key = tuple(getattr(a, "shape", None) for a in args)  # a scalar parameter's: None
        if all(k is None for k in key):
            return self._fallback(*args, stream=stream)
        variant = self._by_shape.get(key)
        if variant is None:
            variant = self._by_shape[key] = self._choose(args)
        return variant(*args, stream=stream)

    def _choose(self, args: tuple) -> "CompiledKernel":
        dims = bind_dims(self._kernel.metadata.get("params", []), args)
        if dims is None:  # a wrong rank: the default's launcher reports it
            return self._variant(self._defaults())
        shape = " ".join(f"{name}={value}" for name, value in dims.items())
        stored = self._store.get(dims, self._num_sms, self._defaults()) if self._store else None
        if stored is not None:
            constants, tiles, why = stored
            self._log(shape, constants, tiles, f"{why} (chosen by an earlier process at this shape; "
                                               "read from the disk cache)")
            return self._variant(constants)
        best, why = self._weigh(args, dims)
        constants = dict(best.constants)
        self._log(shape, constants, best.tiles, why)
        if self._store:
            self._store.put(dims, self._num_sms, constants, best.tiles, why)
        return self._variant(constants)

    def _weigh(self, args: tuple, dims: dict[str, int]) -> tuple[Candidate, str]:
        """The model's choice. The default is compiled first: when its tiles fill the SMs it stays
        (``choose``'s first rule) and no other candidate is compiled."""
        candidates, dropped = [], []
        for constants in candidate_constants(self._defaults(), self._pinned()):
            try:
                variant = self._variant(dict(constants))
            except TkError as e:
                dropped.append(f"{', '.join(f'{n} = {v}' for n, v in constants)}: {e.message}")
                continue
            candidates.append(measured(constants, variant.metadata, dims, args))
            if len(candidates) == 1 and not dropped and candidates[0].tiles >= self._num_sms:
                break
        if not candidates:
            raise TkError(f"@fill_sms: no variant of kernel '{self._kernel.name}' compiles: "
                          f"{'; '.join(dropped)}")
        if len(candidates) == 1 and candidates[0].tiles >= self._num_sms:
            half = self._half_width_tile(candidates[0], args, dims)
            if half is not None:
                return half
        best, why = choose(candidates, self._num_sms)
        if dropped:
            why += f"; not compiled: {'; '.join(dropped)}"
        return best, why

    def _half_width_tile(self, default: Candidate, args: tuple, dims: dict[str, int]
                         ) -> tuple[Candidate, str] | None:
        """The half-width ping-pong variant of a GEMM whose default fills the SMs, where
        SHORT_K_TRIPS or LAST_WAVE_GAIN says to launch it; None where neither applies."""
        if default.gemm is None or default.split != 1:
            return None
        epilogue = float(default.gemm.get("epilogue", PLAIN_EPILOGUE))
        short = default.gemm["trips"] <= SHORT_K_TRIPS * epilogue / PLAIN_EPILOGUE
        # first with twice the default's tiles (an upper bound on the half tile's count, so a lower
        # bound on the gain): the half variant is compiled only where it may be launched, and
        # counted exactly below
        if not short and wave_gain(default.tiles, 2 * default.tiles, self._num_sms) < LAST_WAVE_GAIN:
            return None
        bm, bn, bk = default.gemm["tile"]
        defaults = self._defaults()
        for constants in candidate_constants(defaults, self._pinned()):
            changed = [(n, v) for n, v in constants if v != defaults[n]]
            if len(changed) != 1 or changed[0][1] * 2 != defaults[changed[0][0]]:
                continue  # only one size constant halved
            try:
                variant = self._variant(dict(constants))
            except TkError:
                continue
            gemm = variant.metadata.get("gemm") or {}
            if gemm.get("tile") != [bm, bn // 2, bk] or gemm.get("split") != 1 or not gemm.get("pingpong"):
                continue
            c = measured(constants, variant.metadata, dims, args)
            if c.tiles < self._num_sms:
                return None
            fills = (f"the default ({default.text()}) fills the GPU ({default.tiles} tiles for "
                     f"{self._num_sms} SMs) but ")
            if short and epilogue > PLAIN_EPILOGUE:
                limit = SHORT_K_TRIPS * epilogue / PLAIN_EPILOGUE
                return c, (fills + f"its epilogue (~{epilogue:g} warp cycles per element against the plain "
                           f"GEMM's {PLAIN_EPILOGUE:g}: the warp-spec log) is as large a share of each tile as "
                           f"a plain GEMM's at {SHORT_K_TRIPS} trips or fewer ({default.gemm['trips']} <= "
                           f"{SHORT_K_TRIPS} x {epilogue:g} = {limit:g} trips), so the {bm}x{bn // 2} tile "
                           f"with ping-pong consumers runs it beside the other consumer's K loop (measured "
                           f"bias + gelu 4096^3 0.95 -> 0.99x, 8192^3 1.02 -> 1.06x cuBLAS's plain matmul "
                           f"on the H200; fill_sms.SHORT_K_TRIPS)")
            if short:
                return c, (fills + f"its K loop is short ({default.gemm['trips']} <= {SHORT_K_TRIPS} "
                           f"trips), so the {bm}x{bn // 2} tile with ping-pong consumers hides each "
                           f"tile's epilogue under the other consumer's K loop (measured +1..9% at "
                           f"K <= 1024 on the H200; fill_sms.SHORT_K_TRIPS)")
            gain = wave_gain(default.tiles, c.tiles, self._num_sms)
            if gain < LAST_WAVE_GAIN:
                return None
            rounds, half_rounds = waves(default, self._num_sms), waves(c, self._num_sms)
            last = default.tiles - (rounds - 1) * self._num_sms
            return c, (fills + f"its last round holds {last} tiles for {self._num_sms} SMs: {rounds} "
                       f"rounds of {bm}x{bn} tiles on the busiest SM against {half_rounds} of "
                       f"{bm}x{bn // 2} ({c.tiles} tiles) with ping-pong consumers, {gain:.1%} less "
                       f"tile area per SM (at least {LAST_WAVE_GAIN:.0%}: fill_sms.LAST_WAVE_GAIN; "
                       f"measured 1024x14336x4096 0.95 -> 1.11x cuBLAS on the H200)")
        return None

    def _log(self, shape: str, constants: dict[str, int], tiles: int, why: str) -> None:
        text = ", ".join(f"{name} = {value}" for name, value in constants.items())
        self._kernel.decisions.record(PASS, f"@{self._kernel.name} at {shape}", text, why,
                                      constants=constants, tiles=tiles, num_sms=self._num_sms)

    def _defaults(self) -> dict[str, int]:
        return dict(self._kernel.metadata["fill_sms"])

    def _pinned(self) -> set[str]:
        return {name for name, _ in self._kernel.options.constants}

    def _variant(self, constants: dict[str, int]) -> "CompiledKernel":
        key = tuple(sorted(constants.items()))
        variant = self._variants.get(key)
        if variant is None:
            variant = self._variants[key] = self._make_variant(constants)
        return variant


def bind_dims(params: list[dict], args: tuple) -> dict[str, int] | None:
    """The named dimensions the arguments' shapes give (None when a rank does not match)."""
    dims: dict[str, int] = {}
    for p, a in zip(params, args):
        if p.get("kind") != "global":
            continue
        shape = getattr(a, "shape", None)
        if shape is None or len(shape) != len(p["dims"]):  # not a tensor: the launcher says so
            return None
        for d, size in zip(p["dims"], shape):
            if isinstance(d, str):
                dims.setdefault(d, int(size))
    return dims


def measured(constants: tuple, metadata: dict, dims: dict[str, int], args: tuple) -> Candidate:
    """A compiled variant as the model sees it at these dims: its tiles and, for a GEMM, its shape."""
    return Candidate(constants, tile_count(metadata["grid"], dims), gemm_shape(metadata, dims, tensor_bytes(args)))


def tile_count(grid: list, dims: dict[str, int]) -> int:
    """A launch grid (architecture.md, "Grid") evaluated with an unbounded SM count: the number
    of tiles."""
    from .runtime.launcher import compile_grid
    x, y, z = compile_grid(grid, tuple(dims), num_sms=UNBOUNDED)(**dims)
    return x * y * z


def gemm_shape(metadata: dict, dims: dict[str, int], nbytes: int = 0) -> dict | None:
    """A Hopper GEMM variant's tile, split and K-loop trips at these dims, the arguments' bytes
    and, where its metadata has it, its epilogue's cost (None for other kernels)."""
    gemm = metadata.get("gemm")
    if not gemm:
        return None
    trips = tile_count([gemm["k_trips"]], dims)
    shape = {"tile": list(gemm["tile"]), "split": int(gemm["split"]), "trips": trips, "tensor_bytes": nbytes}
    if "epilogue" in gemm:
        shape["epilogue"] = float(gemm["epilogue"])
    return shape


def tensor_bytes(args: tuple) -> int:
    """The bytes of the tensor arguments (torch tensors or numpy arrays)."""
    total = 0
    for a in args:
        size = getattr(a, "nbytes", None)
        if size is None and hasattr(a, "element_size"):
            size = a.numel() * a.element_size()
        total += int(size or 0)
    return total


UNBOUNDED = 1 << 62
"""An SM count that bounds no persistent grid."""


def constants_of(attr: str) -> dict[str, int]:
    """The kernel attribute ``fill_sms = "BM=128 BN=256"`` (written by the front end) as a dict."""
    constants: dict[str, int] = {}
    for item in attr.split():
        name, _, value = item.partition("=")
        constants[name] = int(value)
    return constants


class ChoiceStore:
    """The choices made at each shape, kept in the disk cache so that a new process does not
    compile every candidate again (only the chosen variant is ever assembled, so the candidates'
    metadata is not in the cache). One entry per (the kernel's cache key, the named dims, the SM
    count); the kernel's key covers its text, options, the assembler and tkjit's own source, so a
    change to this model is a new key. An entry that does not hold a valid choice is a miss."""

    VERSION = 1

    def __init__(self, cache, kernel_key: str, kernel_name: str):
        self._cache = cache
        self._kernel_key = kernel_key
        self._name = kernel_name

    def _key(self, dims: dict[str, int], num_sms: int) -> str:
        import hashlib
        import json
        what = [PASS, self.VERSION, self._kernel_key, sorted(dims.items()), num_sms]
        return hashlib.sha256(json.dumps(what, separators=(",", ":")).encode()).hexdigest()

    def get(self, dims: dict[str, int], num_sms: int, defaults: dict[str, int]
            ) -> tuple[dict[str, int], int, str] | None:
        key = self._key(dims, num_sms)
        entry = self._cache.get(key)
        if entry is None:
            return None
        meta = entry.metadata
        constants, tiles, why = meta.get("constants"), meta.get("tiles"), meta.get("why")
        if not (isinstance(constants, dict) and constants.keys() == defaults.keys()
                and all(type(v) is int and v > 0 for v in constants.values())
                and type(tiles) is int and isinstance(why, str)):
            self._cache.discard(key)  # so that the choice made now replaces it
            return None
        return constants, tiles, why

    def put(self, dims: dict[str, int], num_sms: int, constants: dict[str, int], tiles: int, why: str) -> None:
        try:
            shape = " ".join(f"{name}={value}" for name, value in dims.items())
            self._cache.put(self._key(dims, num_sms), {}, {
                "name": f"{self._name} @fill_sms choice at {shape}", "constants": constants,
                "tiles": tiles, "why": why})
        except OSError:
            pass  # a read-only or full cache: the choice is simply made again next time
