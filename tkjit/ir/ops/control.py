"""Structured control flow: the block loop, sequential loops with carried values, if, yield."""
from __future__ import annotations

from ..core import Op
from ..types import BOOL, I32, ScalarType, describe

MAX_CLUSTER_CTAS = 16
"""The most CTAs a cluster may hold on Hopper: 8 is the portable size (hopper-ptx-facts.md section 7);
up to 16 run where the function allows non-portable sizes, which the launcher sets for such a
kernel (runtime/driver.allow_nonportable_cluster)."""

I32_T, BOOL_T = ScalarType(I32), ScalarType(BOOL)


def _need_i32(op: Op, values, what: str) -> None:
    for v in values:
        if v.type != I32_T:
            raise op.error(f"{what} expected i32, got {describe(v.type)}")


class Yield(Op):
    """``yield %a, %b`` — ends a loop body or if branch, giving the region's results."""

    NAME = "yield"
    OPERANDS = ("values*",)
    NUM_RESULTS = 0
    IS_TERMINATOR = True

    def infer(self):
        return []


class Blocks(Op):
    """``blocks %nm, %nn {schedule = "persistent", group = 8} { ^(%m: i32, %n: i32): ... }``

    One program instance per point of the 1-3-D block grid. ``schedule``: ``grid`` (one CTA per
    block) or ``persistent`` (CTAs loop over blocks); ``group``: blocks of rows visited together
    for L2 reuse; ``split``: how many CTAs share each block's reduction loop (split-K: a cluster
    of that many CTAs, each taking a slice of the loop, their partial sums added on chip);
    ``heavy``: the position of the index visited descending, heaviest tiles first (the grid
    pass); ``resident`` (persistent only): CTAs launched per SM, min(blocks, resident x SMs), so
    that at most that many blocks per SM are in flight at once (stream-cols bounds the bytes
    between a chunk's first read and its re-read with it); ``cluster``: k CTAs, one cluster, per
    block, each running the body with its own ``cluster_rank`` (stream-cols{cluster=k} gives each
    a column slice of the block's rows, ops/cluster.py); ``by_trips`` (persistent only, the grid
    pass): the launch takes min(blocks, SMs) CTAs where the longest ring loop has at most that
    many trips, one CTA per block past that (passes/grid.py ``trips_bound``)."""

    NAME = "blocks"
    OPERANDS = ("counts*",)
    ATTRS = {"schedule": str, "group": int, "split": int, "heavy": int, "resident": int, "cluster": int,
             "by_trips": int}
    OPTIONAL_ATTRS = frozenset({"schedule", "group", "split", "heavy", "resident", "cluster", "by_trips"})
    NUM_RESULTS = 0
    NUM_REGIONS = 1

    def infer(self):
        counts = self.variadic()
        if not 1 <= len(counts) <= 3:
            raise self.error(f"expected 1 to 3 block counts, got {len(counts)}")
        _need_i32(self, counts, "a block count")
        sched = self.attrs.get("schedule", "grid")
        if sched not in ("grid", "persistent"):
            raise self.error(f"schedule expected 'grid' or 'persistent', got '{sched}'")
        if "group" in self.attrs and self.attrs["group"] < 1:
            raise self.error(f"group must be at least 1, got {self.attrs['group']}")
        if "split" in self.attrs and self.attrs["split"] < 1:
            raise self.error(f"split must be at least 1, got {self.attrs['split']}")
        if "resident" in self.attrs and (self.attrs["resident"] < 1 or sched != "persistent"):
            raise self.error(f"resident needs schedule = \"persistent\" and at least 1 CTA per SM, "
                             f"got {self.attrs['resident']} with schedule '{sched}'")
        if "cluster" in self.attrs and not (1 <= self.attrs["cluster"] <= MAX_CLUSTER_CTAS and sched == "grid"
                                            and self.attrs.get("split", 1) == 1):
            raise self.error(f"cluster must be 1 to {MAX_CLUSTER_CTAS} CTAs (8 the portable cluster size; above it "
                             "the launcher opts in to Hopper's non-portable sizes) on the grid schedule "
                             f"without split, got {self.attrs['cluster']} with schedule '{sched}'")
        if "by_trips" in self.attrs and (self.attrs["by_trips"] < 1 or sched != "persistent"):
            raise self.error(f"by_trips needs schedule = \"persistent\" and at least 1 trip, "
                             f"got {self.attrs['by_trips']} with schedule '{sched}'")
        if "heavy" in self.attrs and not 0 <= self.attrs["heavy"] < len(counts):
            raise self.error(f"heavy must name one of the {len(counts)} block indices, got {self.attrs['heavy']}")
        return []

    def verify_regions(self) -> None:
        body = self.regions[0]
        if len(body.args) != len(self.variadic()) or any(a.type != I32_T for a in body.args):
            raise self.error("the body takes one i32 block index per block count")
        if body.terminator is not None and body.terminator.IS_TERMINATOR and body.terminator.operands:
            raise self.error("the block loop yields nothing")


class For(Op):
    """``%r = for %lo, %hi, %step, %init : T { ^(%k: i32, %acc: T): ... yield %acc2 }``

    Runs k = lo, lo+step, ... while k < hi; the values after ``step`` are carried (SSA iter args)
    and the results are their final values. ``stages`` pins the pipeline depth of its loads.
    Set by passes: ``stage_bytes`` (bytes the loop's loads bring per trip), ``stage_stride``
    (shared-memory distance between two stages), ``bars`` (offset of its mbarrier words) and
    ``partial_sums`` (the carried row sums each thread keeps as its own share, combined across
    the threads of a row once after the loop: the row-sums pass), ``own_trips`` ([rows per
    consumer, key scale]: each consumer runs the trips its own rows see; key scale 0: no mask, the
    tile's trips), ``past_end`` (true: a consumer whose rows all lie past the end of every store
    runs none of them; the own-trips pass) and ``pack`` ("first": a level-2 trip packs its second
    product's register A before the ops that rescale the carried tile, not after them;
    ``mbarrier{pack=first}``)."""

    NAME = "for"
    OPERANDS = ("lo", "hi", "step", "inits*")
    ATTRS = {"stages": int, "unroll": int, "stage_bytes": int, "stage_stride": int, "bars": int,
             "partial_sums": tuple, "own_trips": tuple, "past_end": bool, "pack": str}
    OPTIONAL_ATTRS = frozenset(ATTRS)
    NUM_RESULTS = None
    NUM_REGIONS = 1

    def infer(self):
        _need_i32(self, self.operands[:3], "a loop bound")
        if self.attrs.get("pack", "first") != "first":
            raise self.error(f"pack must be \"first\", got {self.attrs['pack']!r}")
        if "stages" in self.attrs and not 1 <= self.attrs["stages"] <= 8:
            raise self.error(f"stages must be 1 to 8, got {self.attrs['stages']}")
        return [v.type for v in self.variadic()]

    def verify_regions(self) -> None:
        body = self.regions[0]
        want = [I32_T] + [v.type for v in self.variadic()]
        if [a.type for a in body.args] != want:
            raise self.error("the body takes the induction variable (i32) and one argument "
                             "per carried value, of the same types")
        _check_yield(self, body, [r.type for r in self.results])


FOLDS = ("scale",)
"""The rewrites a pass versions under an ``if`` (its ``fold`` attribute)."""


class If(Op):
    """``%r = if %cond : T { ... yield %a } { ... yield %b }`` — then and else regions.

    Set by a pass that versions ops under a condition that makes a rewrite of them valid:
    ``fold`` names the rewrite (``scale``: the scale-fold pass, ``%cond`` = its scale > 0). The
    then branch holds the rewritten ops, the else branch the ops as written; the pass reads the
    mark so that it leaves what it has already rewritten alone when it runs on its own output."""

    NAME = "if"
    OPERANDS = ("cond",)
    ATTRS = {"fold": str}
    OPTIONAL_ATTRS = frozenset(ATTRS)
    NUM_RESULTS = None
    NUM_REGIONS = 2

    def infer(self):
        if self.operands[0].type != BOOL_T:
            raise self.error(f"the condition expected bool, got {describe(self.operands[0].type)}")
        if self.attrs.get("fold", FOLDS[0]) not in FOLDS:
            raise self.error(f"fold expected one of {', '.join(map(repr, FOLDS))}, "
                             f"got {self.attrs['fold']!r}")
        return [r.type for r in self.results]

    def verify_regions(self) -> None:
        for region in self.regions:
            if region.args:
                raise self.error("if regions take no arguments")
            _check_yield(self, region, [r.type for r in self.results])


def _check_yield(op: Op, block, types) -> None:
    term = block.terminator
    if term is None or not isinstance(term, Yield):
        raise op.error("its region must end with yield")
    got = [v.type for v in term.operands]
    if got != types:
        raise op.error(f"yields ({', '.join(map(str, got))}) but its results are "
                       f"({', '.join(map(str, types))})")
