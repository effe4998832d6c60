"""The synchronization checker: correct rings pass every case; each classic mistake is caught
with a message that names the ring, the stage, the trip counts and the interleaving."""
from __future__ import annotations

import dataclasses

import pytest

from tkjit.errors import PassError
from tkjit.passes.sync_check import SyncError, check_protocol, default_cases, find_violation
from tkjit.passes.sync_protocol import (Advance, ExpectTx, IfTrips, Load, Loop, LoopPlan,
                                        Mma, MmaWait, NotFirst, OneShotUse, Release, Reset, Ring,
                                        StagingBegin, StagingEnd, StagingReuse, Tiles, TmaLoad, Wait,
                                        standard_protocol)

S = 4  # stages of the test ring
K = "k"


def ring(**changes) -> Ring:
    fields = dict(name=K, stages=S, loads=(Load("a", 16384), Load("b", 32768)), expect_tx=49152,
                  empty_arrivals=2)
    fields.update(changes)
    return Ring(**fields)


def gemm(r: Ring | None = None, producer=None, consumer=None, persistent=True, consumers=2,
         staging=False):
    r = r or ring(empty_arrivals=consumers)
    items = (LoopPlan(K, ((K,),)),) + ((StagingReuse((K,)),) if staging else ())
    good = standard_protocol("gemm", consumers, persistent, (r,), items)
    return dataclasses.replace(good, producer=producer or good.producer,
                               consumer=consumer or good.consumer)


def test_protocols_are_frozen_hashable_values():
    """The classes take ``frozen=True``'s guards from ``Frozen``: a protocol is immutable, equal
    protocols hash alike (mbarrier caches checks by protocol) and the repr is the dataclass one
    (it keys the verdicts on disk)."""
    a, b = gemm(), gemm()
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != gemm(persistent=False)
    for change in (lambda: setattr(a, "consumers", 3), lambda: setattr(a.rings[0], "extra", 1),
                   lambda: delattr(a.rings[0], "stages")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            change()
    assert repr(Wait(K, "full")) == "Wait(ring='k', bar='full', flip=0)"
    assert repr(a).startswith("Protocol(kernel='gemm', consumers=2, persistent=True, rings=(Ring(name='k', ")


def attention():
    q = Ring("q", 1, (Load("q", 49152),), 49152, 3, one_shot=True)
    kv = Ring("kv", 2, (Load("k", 32768), Load("v", 32768)), 65536, 3)
    return standard_protocol("attn", 3, True, (q, kv),
                             (OneShotUse("q"), LoopPlan("kv", (("kv", "q"), ("kv",)))))


def producer(flip=1, per="wrap", reset=False):
    fill = (Wait(K, "empty", flip), ExpectTx(K, 49152), TmaLoad(K, "a"), TmaLoad(K, "b"), Advance(K, per))
    return (Tiles(((Reset(K),) if reset else ()) + (Loop(K, fill),)),)


def consumer(per="wrap", reset=False, min_trips=0, guard=True):
    body = (Wait(K, "full"), Mma((K,)), MmaWait(1), NotFirst((Release(K, "prev"),)), Advance(K, per))
    steps = (Loop(K, body, min_trips), MmaWait(0), Release(K, "prev"))
    if guard:
        steps = (IfTrips(K, steps),)
    return (Tiles(((Reset(K),) if reset else ()) + steps),)


def failing_cases(proto):
    out = {}
    for case in default_cases(proto):
        v, _ = find_violation(proto, case)
        if v is not None:
            out[case] = v
    return out


# ---------------------------------------------------------------- correct protocols pass

@pytest.mark.parametrize("make", [gemm, attention, lambda: gemm(persistent=False),
                                  lambda: gemm(r=ring(stages=1, empty_arrivals=1), consumers=1),
                                  lambda: gemm(persistent=False, staging=True)],
                         ids=["gemm", "attention", "gemm-grid", "one-stage", "epilogue-over-ring"])
def test_correct_protocols_pass_every_case_exhaustively(make):
    proto = make()
    report = check_protocol(proto)
    assert len(report.results) == len(default_cases(proto))
    assert all(r.exhaustive for r in report.results)
    assert "no violation" in report.text()


def test_default_cases_cover_the_trip_counts_that_matter():
    cases = default_cases(gemm())
    for t in (0, 1, S - 1, S, S + 1, 2 * S + 1):
        assert (t,) in cases and (t, t, t) in cases
    assert default_cases(gemm(persistent=False)) == [(0,), (1,), (S - 1,), (S,), (S + 1,), (2 * S + 1,)]


def test_a_grid_kernel_has_no_second_tile():
    with pytest.raises(ValueError, match="not persistent"):
        find_violation(gemm(persistent=False), (1, 1))


# ---------------------------------------------------------------- broken protocols are caught

BROKEN = {
    # name: (protocol, kind, a failing case, a passing case or None)
    "producer starts at parity 0": (gemm(producer=producer(flip=0)), "deadlock", (1,), (0,)),
    "release before the wgmma retired": (
        gemm(consumer=(Tiles((Loop(K, (Wait(K, "full"), Mma((K,)), Release(K), Advance(K))),
                              MmaWait(0))),)), "release-before-read", (1,), (0,)),
    "empty count of one consumer": (gemm(r=ring(empty_arrivals=1)), "overwrite", (S + 1,), (S,)),
    "phase flipped every trip": (gemm(producer=producer(per="iteration"),
                                      consumer=consumer(per="iteration")), "wrong-phase", (S,), (1,)),
    "expect_tx short of the second load": (gemm(r=ring(expect_tx=16384)), "early-read", (1,), (0,)),
    "expect_tx short of the first load": (gemm(r=ring(expect_tx=32768)), "early-read", (1,), (0,)),
    "expect_tx too large": (gemm(r=ring(expect_tx=65536)), "deadlock", (1,), (0,)),
    "persistent loop resets the phase per tile": (
        gemm(producer=producer(reset=True), consumer=consumer(reset=True)), "wrong-phase",
        (S + 1, S + 1, S + 1), (2 * S, 2 * S, 2 * S)),
    "zero-trip loop still waits on full": (
        gemm(consumer=consumer(min_trips=1, guard=False)), "deadlock", (0,), (S + 1,)),
    "first trip releases a stage it never read": (
        gemm(consumer=(Tiles((IfTrips(K, (Loop(K, (Wait(K, "full"), Mma((K,)), MmaWait(1),
                                                  Release(K, "prev"), Advance(K))),
                                          MmaWait(0), Release(K, "prev"))),)),)),
        "bad-release", (1,), (0,)),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_protocol_is_caught(name):
    proto, kind, bad, good = BROKEN[name]
    v, _ = find_violation(proto, bad)
    assert v is not None, f"{name}: not caught with trips {bad}"
    assert v.kind == kind, v.message(proto)
    if good is not None:
        assert find_violation(proto, good)[0] is None
    with pytest.raises(SyncError) as err:
        check_protocol(proto)
    assert isinstance(err.value, PassError)
    text = err.value.render()
    assert "ring k (4 stages, 2 consumers), stage k." in text
    assert "loop trip count(s)" in text


def test_reset_per_tile_fails_exactly_when_trips_are_not_a_multiple_of_twice_the_stages():
    proto = BROKEN["persistent loop resets the phase per tile"][0]
    for trips in range(0, 3 * S + 1):
        v, _ = find_violation(proto, (trips,) * 3)
        assert (v is None) == (trips % (2 * S) == 0), trips
    assert find_violation(proto, (S,))[0] is None  # one tile never notices


def test_small_empty_count_is_explained_and_shown_as_an_interleaving():
    proto = BROKEN["empty count of one consumer"][0]
    v, _ = find_violation(proto, (S + 1,))
    text = v.message(proto)
    assert "the producer started fill 2 of stage k.0 while consumer 1 had not released fill 1" in text
    assert "empty[k.0] completes after 1 arrival(s) but 2 consumers read the stage" in text
    assert "at producer's arrive.expect_tx full[k.0] 49152 B (tile 0, k trip 4)" in text
    assert "interleaving (" in text
    # the interleaving: the producer fills every stage, consumer 0 alone releases stage 0
    assert v.trace[-1].startswith("producer (tile 0, k trip 4): wait empty[k.0] parity 0")
    assert any(m.startswith("consumer 0") and "release stage k.0" in m for m in v.trace)
    assert not any(m.startswith("consumer 1") for m in v.trace)


def test_wrong_expect_tx_names_the_bytes_and_the_landing_order():
    proto = BROKEN["expect_tx short of the first load"][0]
    v, _ = find_violation(proto, (1,))
    assert "full[k.0] completed phase 0 with 32768 of the stage's 49152 bytes landed" in v.why
    assert "(expect_tx is 32768 B)" in v.why
    assert v.trace[1] == "TMA b lands in stage k.0 (32768 B)"  # b alone lands first


def test_deadlock_lists_every_blocked_role_with_its_barrier():
    proto = BROKEN["producer starts at parity 0"][0]
    v, _ = find_violation(proto, (1,))
    assert v.blocked[0] == ("producer blocks in wait empty[k.0] parity 0 (tile 0, k trip 0): "
                            "the barrier is in phase 0 (parity 0) with 0 of 2 arrivals and tx 0")
    assert len(v.blocked) == 3
    assert "interleaving: none" in v.message(proto)


def test_wrong_phase_is_told_apart_from_missing_bytes():
    proto = BROKEN["phase flipped every trip"][0]
    v, _ = find_violation(proto, (S,))
    assert "its wait on full[k.1] passed although phase 0 had not completed" in v.why
    assert "parity matched an older phase" in v.why


def test_bounded_search_falls_back_to_random_walks_and_says_so():
    v, result = find_violation(gemm(), (2 * S + 1,), max_states=50)
    assert v is None and not result.exhaustive
    v, result = find_violation(BROKEN["empty count of one consumer"][0], (2 * S + 1,), max_states=50)
    assert v is not None and v.kind in ("overwrite", "deadlock")  # a walk may hit either first


def test_epilogue_over_the_ring_needs_every_consumer_done_first():
    unsynced = gemm(persistent=False, consumer=(Tiles((*consumer()[0].body, StagingBegin(K),
                                                       StagingEnd(K))),))
    v, _ = find_violation(unsynced, (S + 1,))
    assert v is not None and v.kind == "overwrite"
    assert "epilogue writes its staging tile over stage k." in v.why
    assert "still reads it" in v.why or "has not waited for yet" in v.why


def test_epilogue_over_the_ring_of_a_persistent_kernel_is_caught():
    proto = gemm(persistent=True, staging=True)
    assert find_violation(proto, (S + 1,))[0] is None  # one tile: the ring is dead after the loop
    v, _ = find_violation(proto, (S + 1, S + 1))
    assert v is not None and v.kind == "overwrite"
    assert "the ring is reused for staging while the producer still fills it" in v.why
