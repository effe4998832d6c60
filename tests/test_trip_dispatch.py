"""by_trips: the launch picks the binary (tkjit/trip_dispatch.py): the persistent kernel where the
longest loop is short, the one compiled with one CTA per tile past that. On the CPU: the metadata
the general lowering writes, the trip count it evaluates to, the variant's pipeline and code, and
the dispatch's choice per shape (the kernels stood in for)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import tkjit
from tkjit.passes import DEFAULT_PIPELINE
from tkjit.passes.decisions import DecisionLog
from tkjit.passes.hopper import block_loop
from tkjit.trip_dispatch import TripDispatch, early_release, long_trips, one_cta_per_tile

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
_MADE: dict = {}


def nol(causal: bool, lowering: str = "general", pipeline: str | None = None):
    key = (causal, lowering, pipeline)
    if key not in _MADE:
        _MADE[key] = tkjit.compile((EXAMPLES / "attention_nol.tk").read_text(), filename="attention_nol.tk",
                                   constants={"D": 128, "CAUSAL": causal}, lowering=lowering,
                                   pipeline=pipeline, cache=False)
    return _MADE[key]


def test_a_causal_kernel_compiled_persistent_by_trips_says_how_to_count_them():
    meta = nol(True).metadata
    assert meta["by_trips"]["short"] == 8 and meta["by_trips"]["long"] == 16
    dims = {"B": 2, "H": 4, "N": 0, "D": 128, "HKV": 4}
    # the heaviest query block's key loop: cdiv(N, 128) trips (causal, 128-row blocks of 128 keys)
    assert [long_trips(meta["by_trips"], {**dims, "N": n}) for n in (50, 1024, 2048, 2049, 4096)] == \
        [(1, False), (8, False), (16, False), (17, True), (32, True)]
    assert long_trips(meta["by_trips"], {"B": 2}) is None  # N missing: no choice


def test_tiles_of_equal_work_do_not_dispatch():
    assert "by_trips" not in nol(False).metadata


def test_the_variant_is_the_kernel_compiled_with_one_cta_per_tile():
    pipeline = one_cta_per_tile(None)
    assert pipeline == DEFAULT_PIPELINE.replace("grid,", "grid{overlap=-1},")
    assert one_cta_per_tile("canonicalize,grid{group=8},warp-spec") == "canonicalize,grid{group=8 overlap=-1},warp-spec"
    variant = nol(True, pipeline=pipeline)
    assert "by_trips" not in variant.metadata  # it launches as it is
    assert variant.metadata["grid"] == [["mul", ["mul", ["dim", "B"], ["dim", "H"]], ["cdiv", ["dim", "N"], 128]]]
    assert block_loop(variant.ir).attrs.get("schedule", "grid") == "grid"
    assert block_loop(nol(True).ir).attrs["schedule"] == "persistent"
    persistent = nol(True).asm["ptx"]
    assert variant.asm["ptx"] != persistent


class FakeKernel:
    def __init__(self, name: str):
        self.name, self.calls = name, 0

    def __call__(self, *args, stream=None):
        self.calls += 1


def fake(by_trips: dict, short: bool = True):
    made: list = []
    owner = SimpleNamespace(name="attn", decisions=DecisionLog(), metadata={
        "by_trips": by_trips, "params": [{"kind": "global", "dims": ["B", "N", "D"]},
                                         {"kind": "global", "dims": ["B", "N", "D"]}, {"kind": "scalar"}]})
    own = FakeKernel("own")

    def make(name):
        def maker():
            made.append(name)
            return FakeKernel(name)
        return maker
    return TripDispatch(owner, own, make("long"), make("short") if short else None), owner, own, made


def tensors(n: int):
    return SimpleNamespace(shape=(2, n, 128)), SimpleNamespace(shape=(2, n, 128)), 0.125


def test_the_dispatch_launches_a_binary_per_regime_of_trips():
    """At most ``short`` trips: the early-release persistent variant; up to ``long``: this
    persistent binary; past ``long``: the one-CTA-per-tile variant. Each variant compiled once."""
    dispatch, owner, own, made = fake({"trips": ["cdiv", ["dim", "N"], 128], "short": 8, "long": 16})
    dispatch(*tensors(1024))
    dispatch(*tensors(1024))
    dispatch(*tensors(700))
    dispatch(*tensors(2048))
    assert own.calls == 1 and made == ["short"] and dispatch._made["short"].calls == 3
    dispatch(*tensors(4096))
    dispatch(*tensors(3000))
    dispatch(*tensors(4096))
    assert own.calls == 1 and made == ["short", "long"] and dispatch._made["long"].calls == 3
    logged = owner.decisions.for_pass("grid")
    assert [d.subject for d in logged] == [f"@attn at B=2 N={n} D=128" for n in (1024, 700, 2048, 4096, 3000)]
    assert "released early" in logged[0].decision and "8 trips (at most 8)" in logged[0].reason
    assert logged[2].decision == "the persistent binary" and "16 trips (more than 8, at most 16" in logged[2].reason
    assert "one CTA per tile" in logged[3].decision and "32 trips (more than 16)" in logged[3].reason


def test_a_pinned_release_keeps_the_persistent_binary_for_short_loops():
    dispatch, owner, own, made = fake({"trips": ["cdiv", ["dim", "N"], 128], "short": 8, "long": 16}, short=False)
    dispatch(*tensors(1024))
    assert own.calls == 1 and not made
    (entry,) = owner.decisions.for_pass("grid")
    assert entry.decision == "the persistent binary" and "no variant for it" in entry.reason
    assert early_release(DEFAULT_PIPELINE.replace("mbarrier,", "mbarrier{release=end},")) is None
    assert early_release(None) == DEFAULT_PIPELINE.replace("mbarrier,", "mbarrier{release=early},")


def test_a_variant_that_does_not_compile_leaves_the_persistent_binary_running():
    """The persistent binary is right at any N: a variant that fails to compile (never expected)
    is logged once and the launches go on with it, never an error at launch."""
    from tkjit.errors import TkError
    owner = SimpleNamespace(name="attn", decisions=DecisionLog(), metadata={
        "by_trips": {"trips": ["cdiv", ["dim", "N"], 128], "short": 8, "long": 16},
        "params": [{"kind": "global", "dims": ["B", "N", "D"]}]})
    own, tries = FakeKernel("own"), []

    def broken():
        tries.append(1)
        raise TkError("no room")
    dispatch = TripDispatch(owner, own, broken)
    dispatch(SimpleNamespace(shape=(2, 4096, 128)))
    dispatch(SimpleNamespace(shape=(2, 8192, 128)))
    assert own.calls == 2 and tries == [1]
    first, second = owner.decisions.for_pass("grid")
    assert first.decision == "the persistent binary" and "did not compile: no room" in first.reason
    assert "no variant for it" in second.reason


def test_arguments_the_dispatch_cannot_bind_go_to_the_persistent_kernel():
    """A wrong rank: the persistent kernel's own launcher names the problem."""
    dispatch, _, own, made = fake({"trips": ["cdiv", ["dim", "N"], 128], "short": 8, "long": 16})
    dispatch(SimpleNamespace(shape=(4096, 128)), SimpleNamespace(shape=(2, 4096, 128)), 0.1)
    assert own.calls == 1 and not made


@pytest.mark.parametrize("pipeline", [None, DEFAULT_PIPELINE.replace("grid,", "grid{group=1},")])
def test_the_kernel_object_compiles_the_variant_under_its_own_pipeline(monkeypatch, pipeline):
    """The kernel object's own dispatch (driver calls stood in for): the variant is this kernel's
    source under its pipeline with grid{overlap=-1}, compiled at the first long launch."""
    from tkjit.runtime import driver
    monkeypatch.setattr(driver, "gpu_available", lambda: True)
    kernel = nol(True, pipeline=pipeline)
    dispatch = kernel._trip_dispatch()
    assert isinstance(dispatch, TripDispatch)
    variant = dispatch._makers["long"]()
    assert variant.options.pipeline == one_cta_per_tile(pipeline)
    assert variant.options.lowering == "general" and "by_trips" not in variant.metadata
    early = dispatch._makers["short"]()
    assert early.options.pipeline == early_release(pipeline) and early.metadata["by_trips"]
    assert "released right after the last product reading it" in str(early.explain())
    assert nol(False)._trip_dispatch() is None
