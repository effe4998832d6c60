"""@fill_sms: the annotation, the model that picks tile constants per launch shape, and the
dispatch that applies it (with stand-in variants: no GPU here)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import tkjit
from tkjit.errors import TkError
from tkjit.fill_sms import (LAST_WAVE_GAIN, Candidate, ShapeDispatch, bind_dims, candidate_constants, choose,
                            constants_of, halvings, tile_count, wave_gain)
from tkjit.passes import DecisionLog

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gemm.tk"
GRID = [["min", ["mul", ["cdiv", ["dim", "M"], 128], ["cdiv", ["dim", "N"], 256]], ["num_sms"]]]
H200_SMS = 132


def gemm_candidates(m: int, n: int) -> list[Candidate]:
    out = []
    for constants in candidate_constants({"BM": 128, "BN": 256}, set()):
        bm, bn = (value for _, value in constants)
        out.append(Candidate(constants, -(-m // bm) * -(-n // bn)))
    return out


def test_halvings_stop_at_multiples_of_64():
    assert halvings(1) == [1, 2]  # a count (below 64) doubles up to MAX_COUNT
    assert halvings(2) == [2]
    assert halvings(256) == [256, 128, 64]
    assert halvings(128) == [128, 64]
    assert halvings(96) == [96]
    assert halvings(64) == [64]


def test_candidates_put_the_defaults_first_and_keep_pins():
    assert candidate_constants({"BM": 128, "BN": 256}, set()) == [
        (("BM", 128), ("BN", 256)), (("BM", 128), ("BN", 128)), (("BM", 128), ("BN", 64)),
        (("BM", 64), ("BN", 256)), (("BM", 64), ("BN", 128)), (("BM", 64), ("BN", 64))]
    assert candidate_constants({"BM": 128, "BN": 256}, {"BN"}) == [(("BM", 128), ("BN", 256)),
                                                                   (("BM", 64), ("BN", 256))]


@pytest.mark.parametrize("m, n, want", [
    (128, 4096, (64, 64)),      # 16 default tiles: 128 tiles of 64 x 64 on 132 SMs
    (128, 14336, (128, 128)),   # 56 default tiles: 112 of 128 x 128 in one round beats 224 in two
    (1024, 4096, (128, 256)),   # 128 tiles: short of 132, and no smaller tile does less per SM
    (1024, 14336, (128, 256)),  # 448 tiles fill the SMs: the default stays
    (4096, 4096, (128, 256)),
    (8192, 8192, (128, 256)),
])
def test_the_model_picks_small_tiles_only_for_small_problems(m, n, want):
    best, why = choose(gemm_candidates(m, n), H200_SMS)
    assert tuple(v for _, v in best.constants) == want, why


def test_the_model_says_why():
    _, why = choose(gemm_candidates(4096, 4096), H200_SMS)
    assert why == "the default tiles fill the GPU: 512 tiles for 132 SMs"
    _, why = choose(gemm_candidates(128, 4096), H200_SMS)
    assert why.startswith("the default (BM = 128, BN = 256) gives 16 tiles for 132 SMs")
    assert "BM = 64, BN = 64: 128 tiles, 1 x 4096" in why


def test_tile_count_and_dims_come_from_the_metadata():
    assert tile_count(GRID, {"M": 128, "N": 4096, "K": 64}) == 16
    assert tile_count([["cdiv", ["dim", "N"], 64], 3], {"N": 100}) == 6
    params = [{"kind": "global", "dims": ["M", "K"]}, {"kind": "global", "dims": ["K", "N"]},
              {"kind": "tensormap", "param": 0}]
    shaped = [SimpleNamespace(shape=(128, 512)), SimpleNamespace(shape=(512, 64))]
    assert bind_dims(params, shaped) == {"M": 128, "K": 512, "N": 64}
    assert bind_dims(params, [SimpleNamespace(shape=(128,)), shaped[1]]) is None


def test_the_annotation_records_the_constants():
    kernel = tkjit.load(EXAMPLE, cache=False)
    assert kernel.ir.attrs["fill_sms"] == "BM=128 BN=256 SPLIT=1"
    assert constants_of(kernel.ir.attrs["fill_sms"]) == {"BM": 128, "BN": 256, "SPLIT": 1}
    pinned = tkjit.load(EXAMPLE, constants={"BN": 128}, cache=False)
    assert pinned.ir.attrs["fill_sms"] == "BM=128 BN=128 SPLIT=1"


def test_the_annotation_leaves_the_default_kernel_as_it_was():
    old = EXAMPLE.read_text().replace("@fill_sms(BM, BN, SPLIT)", "")
    assert old != EXAMPLE.read_text()
    with_it = tkjit.load(EXAMPLE, cache=False)
    without = tkjit.compile(old, filename=str(EXAMPLE), cache=False)
    assert with_it.asm["after:grid"].replace(', fill_sms = "BM=128 BN=256 SPLIT=1"', "") == without.asm["after:grid"]


@pytest.mark.parametrize("annotation, message", [
    ("@fill_sms", "@fill_sms takes the names of the kernel's <...> constants"),
    ("@fill_sms(BX)", "@fill_sms: each argument names one of the kernel's <...> constants (its constants: BK, BM, BN, SPLIT)"),
    ("@fill_sms(BM, BM)", "@fill_sms: BM is named twice"),
    ("@fill_sms(BM + 1)", "each argument names one of the kernel's <...> constants"),
])
def test_bad_annotations_are_reported_at_the_annotation(annotation, message):
    text = EXAMPLE.read_text().replace("@fill_sms(BM, BN, SPLIT)", annotation)
    with pytest.raises(TkError) as info:
        tkjit.compile(text, filename="gemm.tk", cache=False)
    assert message in str(info.value)
    assert "gemm.tk:3:" in str(info.value)


def test_fill_sms_is_a_kernel_annotation():
    loop = "    for k in 0 .. K / BK {"
    assert loop in EXAMPLE.read_text()
    text = EXAMPLE.read_text().replace(loop, "    @fill_sms(BM)\n" + loop)
    with pytest.raises(TkError, match="@fill_sms applies to the kernel"):
        tkjit.compile(text, cache=False)


class FakeVariant:
    def __init__(self, constants: dict, grid: list):
        self.constants = constants
        self.metadata = {"grid": grid}
        self.calls = 0

    def __call__(self, *args, stream=None):
        self.calls += 1


def fake_dispatch(num_sms: int = H200_SMS, broken: tuple = (), store=None):
    made: list[dict] = []

    def make_variant(constants: dict):
        if (constants["BM"], constants["BN"]) in broken:
            raise TkError("does not fit")
        made.append(constants)
        grid = [["min", ["mul", ["cdiv", ["dim", "M"], constants["BM"]], ["cdiv", ["dim", "N"], constants["BN"]]],
                 ["num_sms"]]]
        return FakeVariant(constants, grid)
    kernel = SimpleNamespace(name="gemm", decisions=DecisionLog(), options=SimpleNamespace(constants=()),
                             metadata={"fill_sms": {"BM": 128, "BN": 256}, "grid": GRID,
                                       "params": [{"kind": "global", "dims": ["M", "K"]},
                                                  {"kind": "global", "dims": ["K", "N"]},
                                                  {"kind": "global", "dims": ["M", "N"]}]})
    fallback = FakeVariant({}, GRID)
    return ShapeDispatch(kernel, num_sms, make_variant, fallback, store), kernel, made, fallback


def tensors(m: int, n: int, k: int) -> tuple:
    return SimpleNamespace(shape=(m, k)), SimpleNamespace(shape=(k, n)), SimpleNamespace(shape=(m, n))


def test_dispatch_chooses_once_per_shape_and_logs_it():
    dispatch, kernel, made, _ = fake_dispatch()
    dispatch(*tensors(128, 4096, 4096))
    assert len(made) == 6  # every candidate compiled once, to count its tiles
    dispatch(*tensors(128, 4096, 4096))
    dispatch(*tensors(4096, 4096, 4096))
    assert len(made) == 6  # variants are kept by constants; shapes by their argument shapes
    chosen = {tuple(v.constants.values()): v.calls for v in dispatch._variants.values() if v.calls}
    assert chosen == {(64, 64): 2, (128, 256): 1}
    logged = kernel.decisions.for_pass("fill-sms")
    assert [d.subject for d in logged] == ["@gemm at M=128 K=4096 N=4096", "@gemm at M=4096 K=4096 N=4096"]
    assert logged[0].decision == "BM = 64, BN = 64" and logged[0].data["tiles"] == 128


def test_a_default_that_fills_the_gpu_is_the_only_variant_compiled():
    dispatch, kernel, made, _ = fake_dispatch()
    dispatch(*tensors(4096, 4096, 4096))
    assert made == [{"BM": 128, "BN": 256}]
    (entry,) = kernel.decisions.for_pass("fill-sms")
    assert entry.decision == "BM = 128, BN = 256" and "the default tiles fill the GPU" in entry.reason


def test_choices_outlive_the_process_through_the_disk_cache(tmp_path):
    """A second dispatch (a new process) with the same store reads the choice instead of compiling
    every candidate again; another SM count or shape is another entry."""
    from tkjit.cache import DiskCache
    from tkjit.fill_sms import ChoiceStore
    store = ChoiceStore(DiskCache(tmp_path), "ab" * 32, "gemm")
    first, _, made, _ = fake_dispatch(store=store)
    first(*tensors(128, 4096, 4096))
    assert len(made) == 6
    again, kernel, made_again, _ = fake_dispatch(store=store)
    again(*tensors(128, 4096, 4096))
    assert made_again == [{"BM": 64, "BN": 64}]  # only the chosen variant
    (entry,) = kernel.decisions.for_pass("fill-sms")
    assert entry.decision == "BM = 64, BN = 64" and entry.data["tiles"] == 128
    assert "read from the disk cache" in entry.reason and "least work on the busiest SM" in entry.reason
    other, _, made_other, _ = fake_dispatch(num_sms=114, store=store)
    other(*tensors(128, 4096, 4096))
    assert len(made_other) == 6
    names = sorted(i.name for i in DiskCache(tmp_path).entries())
    assert names == ["gemm @fill_sms choice at M=128 K=4096 N=4096"] * 2


@pytest.mark.parametrize("metadata", [
    {"constants": {"BM": 64}, "tiles": 1, "why": "x"},                   # a constant missing
    {"constants": {"BM": 64, "BN": 0}, "tiles": 1, "why": "x"},          # not a positive size
    {"constants": {"BM": 64, "BN": "64"}, "tiles": 1, "why": "x"},       # not an int
    {"constants": {"BM": 64, "BN": 64}, "why": "x"},                     # no tile count
])
def test_a_stored_choice_that_does_not_hold_is_a_miss(tmp_path, metadata):
    from tkjit.cache import DiskCache
    from tkjit.fill_sms import ChoiceStore
    cache = DiskCache(tmp_path)
    store = ChoiceStore(cache, "cd" * 32, "gemm")
    cache.put(store._key({"M": 128, "K": 4096, "N": 4096}, H200_SMS), {}, metadata)
    dispatch, _, made, _ = fake_dispatch(store=store)
    dispatch(*tensors(128, 4096, 4096))
    assert len(made) == 6  # weighed again, and the choice made now replaces the entry
    again, _, made_again, _ = fake_dispatch(store=store)
    again(*tensors(128, 4096, 4096))
    assert made_again == [{"BM": 64, "BN": 64}]


def test_dispatch_skips_a_variant_that_does_not_compile():
    dispatch, kernel, _, _ = fake_dispatch(broken=((64, 64),))
    dispatch(*tensors(128, 4096, 4096))
    entry = kernel.decisions.for_pass("fill-sms")[0]
    assert entry.decision == "BM = 128, BN = 64"  # 64 tiles: ties with BM = 64, BN = 128, the earlier wins
    assert "not compiled: BM = 64, BN = 64: does not fit" in entry.reason


def test_arguments_without_shapes_go_to_the_default_kernel():
    dispatch, _, made, fallback = fake_dispatch()
    dispatch(1, 2, 3)
    assert fallback.calls == 1 and not made


def test_the_kernel_object_compiles_the_chosen_variant(monkeypatch):
    """The kernel object's own dispatch (driver calls stood in for): real variants, compiled with
    the chosen constants, their grids read from their metadata."""
    from tkjit.runtime import driver
    monkeypatch.setattr(driver, "gpu_available", lambda: True)
    monkeypatch.setattr(driver, "ensure_context", lambda: 0)
    monkeypatch.setattr(driver, "num_sms", lambda device=None: H200_SMS)
    kernel = tkjit.load(EXAMPLE, cache=False)
    dispatch = kernel._shape_dispatch()
    assert isinstance(dispatch, ShapeDispatch)
    small = dispatch._choose(tensors(128, 14336, 4096))
    assert small.options.constants == (("BM", 128), ("BN", 256), ("SPLIT", 2))
    assert small.metadata["grid"][0] == ["mul", ["mul", ["cdiv", ["dim", "M"], 128],
                                                 ["cdiv", ["dim", "N"], 256]], 2]
    assert small.metadata["gemm"] == {"tile": [128, 256, 64], "split": 2,
                                      "k_trips": ["cdiv", ["dim", "K"], 64]}
    assert dispatch._store is None  # cache=False: choices are not kept on disk
    large = dispatch._choose(tensors(4096, 4096, 4096))
    assert large._result is kernel._result and not large._fill_sms  # the default: the kernel itself
    assert [d.decision for d in kernel.decisions.for_pass("fill-sms")] == [
        "BM = 128, BN = 256, SPLIT = 2", "BM = 128, BN = 256, SPLIT = 1"]


def test_a_new_kernel_object_reads_the_choice_the_last_one_made(monkeypatch):
    """As in a new process: the second kernel object (same text, same cache) has no variants in
    memory, finds the choice in the disk cache and compiles only the chosen variant."""
    from tkjit.runtime import driver
    monkeypatch.setattr(driver, "gpu_available", lambda: True)
    monkeypatch.setattr(driver, "ensure_context", lambda: 0)
    monkeypatch.setattr(driver, "num_sms", lambda device=None: H200_SMS)
    if tkjit.compiler.cache_key_of(tkjit.compile(EXAMPLE.read_text())._result) is None:
        pytest.skip("no ptxas: nothing is cached")
    first = tkjit.load(EXAMPLE)._shape_dispatch()
    chosen = first._choose(tensors(128, 4096, 4096)).options.constants
    second = tkjit.load(EXAMPLE)
    dispatch = second._shape_dispatch()
    assert dispatch._choose(tensors(128, 4096, 4096)).options.constants == chosen
    assert len(dispatch._variants) == 1
    (entry,) = second.decisions.for_pass("fill-sms")
    assert "read from the disk cache" in entry.reason


def test_a_short_k_loop_takes_the_half_width_ping_pong_tile(monkeypatch):
    """The default 128x256 fills the SMs at 4096 x 4096, but with K <= 1024 (16 trips) the
    dispatch launches 128x128, whose consumers ping-pong (SHORT_K_TRIPS); at K = 2048 the default
    stays. Both say why."""
    from tkjit.runtime import driver
    monkeypatch.setattr(driver, "gpu_available", lambda: True)
    monkeypatch.setattr(driver, "ensure_context", lambda: 0)
    monkeypatch.setattr(driver, "num_sms", lambda device=None: H200_SMS)
    kernel = tkjit.load(EXAMPLE, cache=False)
    dispatch = kernel._shape_dispatch()
    short = dispatch._choose(tensors(4096, 4096, 1024))
    assert short.options.constants == (("BM", 128), ("BN", 128), ("SPLIT", 1))
    assert short.metadata["gemm"]["pingpong"] is True
    long = dispatch._choose(tensors(4096, 4096, 2048))
    assert long._result is kernel._result and "pingpong" not in long.metadata["gemm"]
    first, second = kernel.decisions.for_pass("fill-sms")
    assert "its K loop is short (16 <= 16 trips)" in first.reason and "ping-pong" in first.reason
    assert second.reason.startswith("the default tiles fill the GPU")


@pytest.mark.parametrize("m, n, gain, takes", [
    # 128x256 tiles -> 128x128 on 132 SMs (H200): rounds of the persistent grid
    (1024, 14336, 0.125, True),    # 448 tiles, last round 52: 4 rounds vs 7 half rounds
    (8192, 14336, 1 / 56, False),  # 3584 tiles: 28 rounds vs 55
    (4096, 4096, 0.0, False),      # 512: 4 vs 8
    (8192, 4096, 0.0, False),
    (8192, 8192, 0.0, False),
    (16384, 16384, 1 / 126, False),
    (1024, 4096 + 256, 0.25, True),  # 136 tiles: 2 rounds, the half tile's 272 in 3
])
def test_the_last_wave_gain_counts_rounds_of_tile_area(m, n, gain, takes):
    tiles = -(-m // 128) * -(-n // 256)
    assert wave_gain(tiles, 2 * tiles, H200_SMS) == pytest.approx(gain)
    assert (wave_gain(tiles, 2 * tiles, H200_SMS) >= LAST_WAVE_GAIN) == takes


def test_a_badly_filled_last_round_takes_the_half_width_ping_pong_tile(monkeypatch):
    """At 1024 x 14336 the default's 448 tiles leave 80 of 132 SMs idle in the last of 4 rounds;
    the 128x128 ping-pong tile (896 tiles, 7 rounds) is launched instead (LAST_WAVE_GAIN, measured
    0.95 -> 1.11x cuBLAS). Where the half tile saves less (8192 x 14336: 1.8%; 4096^3: nothing)
    the default stays and the half variant is not compiled."""
    from tkjit.runtime import driver
    monkeypatch.setattr(driver, "gpu_available", lambda: True)
    monkeypatch.setattr(driver, "ensure_context", lambda: 0)
    monkeypatch.setattr(driver, "num_sms", lambda device=None: H200_SMS)
    kernel = tkjit.load(EXAMPLE, cache=False)
    dispatch = kernel._shape_dispatch()
    for m, n in ((8192, 14336), (4096, 4096), (8192, 4096)):
        kept = dispatch._choose(tensors(m, n, 4096))
        assert kept._result is kernel._result
    assert len(dispatch._variants) == 1  # only the default was compiled
    half = dispatch._choose(tensors(1024, 14336, 4096))
    assert half.options.constants == (("BM", 128), ("BN", 128), ("SPLIT", 1))
    assert half.metadata["gemm"]["pingpong"] is True
    *kept_entries, entry = kernel.decisions.for_pass("fill-sms")
    assert all(e.reason.startswith("the default tiles fill the GPU") for e in kept_entries)
    assert entry.subject == "@gemm at M=1024 K=4096 N=14336" and entry.data["tiles"] == 896
    assert "its last round holds 52 tiles for 132 SMs: 4 rounds of 128x256" in entry.reason
    assert "7 of 128x128 (896 tiles) with ping-pong consumers, 12.5% less" in entry.reason
    # a long K loop does not change it: the rule counts rounds, not trips
    assert dispatch._choose(tensors(1024, 14336, 14336)).options.constants == half.options.constants


def test_a_pinned_tile_is_not_halved_for_the_last_wave(monkeypatch):
    from tkjit.runtime import driver
    monkeypatch.setattr(driver, "gpu_available", lambda: True)
    monkeypatch.setattr(driver, "ensure_context", lambda: 0)
    monkeypatch.setattr(driver, "num_sms", lambda device=None: H200_SMS)
    kernel = tkjit.load(EXAMPLE, constants={"BM": 128, "BN": 256}, cache=False)
    chosen = kernel._shape_dispatch()._choose(tensors(1024, 14336, 4096))
    assert chosen._result is kernel._result


def test_kernels_without_the_annotation_launch_as_before():
    kernel = tkjit.compile(EXAMPLE.read_text().replace("@fill_sms(BM, BN, SPLIT)", ""), cache=False)
    assert kernel._shape_dispatch() is None and not kernel._fill_sms


def split_candidates(m: int, n: int, k: int) -> list[Candidate]:
    """The gemm's candidates with SPLIT, as the dispatch sees them (CTAs = tiles x SPLIT)."""
    out = []
    for constants in candidate_constants({"BM": 128, "BN": 256, "SPLIT": 1}, set()):
        bm, bn, split = (value for _, value in constants)
        tiles = -(-m // bm) * -(-n // bn)
        out.append(Candidate(constants, tiles * split, {
            "tile": [bm, bn, 64], "split": split, "trips": -(-k // 64),
            "tensor_bytes": 2 * (m * k + k * n + m * n)}))
    return out


@pytest.mark.parametrize("m, n, k, want", [
    # the fastest measured candidate at each M = 128 shape (H200, 2026-11-21,
    # benchmarks/results/2026-11-21-nvidia-h200-split-candidates.json) where the model decides:
    (128, 4096, 4096, (128, 64, 2)),     # 64 tiles x 2: 128 CTAs, each half of K (14.9 us, best)
    (128, 4096, 14336, (128, 64, 2)),    # (36.7 us, best)
    (128, 14336, 4096, (128, 128, 1)),   # B alone is 117 MB: DRAM-bound, no split (35.6; best 34.5)
    (128, 4096, 64, (64, 64, 1)),        # one K step: splitting it only adds partials
    (1024, 4096, 4096, (128, 256, 1)),   # 128 tiles: splitting needs a second round
    (4096, 4096, 4096, (128, 256, 1)),   # the default fills the GPU
])
def test_the_model_splits_k_only_where_ctas_are_short(m, n, k, want):
    best, why = choose(split_candidates(m, n, k), H200_SMS)
    assert tuple(v for _, v in best.constants) == want, why
    assert best.split == want[2]


def test_the_split_model_says_why():
    _, why = choose(split_candidates(128, 4096, 4096), H200_SMS)
    assert "ceil(CTAs / SMs) x the bytes a CTA streams" in why
    # 192*128*32 + 32768 B streamed in 8.2 us, under the arguments' 34 MB at 4.2 TB/s
    assert "BM = 128, BN = 64, SPLIT = 2: 128 CTAs, 1 x 819200 B, 8.5 us" in why


TEMPLATE_CHOICES = {  # what the GEMM template launched (c151dac, H200 SMs), before its deletion
    (1000, 3000, 520): ({}, [128, 256, 64], 1, False),
    (4096, 4096, 512): ({"BM": 128, "BN": 128, "SPLIT": 1}, [128, 128, 64], 1, True),
    (128, 14336, 4096): ({"BM": 128, "BN": 256, "SPLIT": 2}, [128, 256, 64], 2, False),
    (128, 4096, 4096): ({"BM": 128, "BN": 64, "SPLIT": 2}, [128, 64, 64], 2, False),
    (4096, 4096, 4096): ({}, [128, 256, 64], 1, False),
}


@pytest.mark.parametrize("m, n, k", list(TEMPLATE_CHOICES))
def test_the_general_lowering_launches_the_variants_the_template_did(monkeypatch, m, n, k):
    """The general lowering's metadata carries the reduction shape ("gemm": tile, split, K trips,
    ping-pong) that the launch model reads, so it launches the tiles and split the GEMM template
    launched (deleted 2026-11-27; same-run A/B within noise); without it the general path fell to
    the tile-area model (1000x3000x520: 0.67x of the template)."""
    from tkjit.runtime import driver
    monkeypatch.setattr(driver, "gpu_available", lambda: True)
    monkeypatch.setattr(driver, "ensure_context", lambda: 0)
    monkeypatch.setattr(driver, "num_sms", lambda device=None: H200_SMS)
    kernel = tkjit.load(EXAMPLE, cache=False)
    variant = kernel._shape_dispatch()._choose(tensors(m, n, k))
    assert variant.metadata["lowering"] == "general"
    constants, tile, split, pingpong = TEMPLATE_CHOICES[m, n, k]
    shape = variant.metadata["gemm"]
    assert dict(variant.options.constants) == constants
    assert (shape["tile"], shape["split"], bool(shape.get("pingpong"))) == (tile, split, pingpong)


def test_a_scalar_argument_does_not_keep_a_kernel_from_choosing():
    """A @fill_sms kernel with a scalar parameter (alpha, a scale) chooses by its tensors' shapes:
    the scalar has none, and once made every call with an argument without a shape fell back to
    the default."""
    dispatch, kernel, made, fallback = fake_dispatch()
    dispatch(*tensors(128, 4096, 4096), 0.5)
    assert fallback.calls == 0 and len(made) == 6
    assert kernel.decisions.for_pass("fill-sms")[0].decision == "BM = 64, BN = 64"
