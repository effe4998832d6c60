"""The staged epilogue as protocol steps (sync_protocol.staged_store / defer_store): the rounds the
epilogue pass chose are in the protocol the mbarrier pass builds and checks, the PTX prints each
of their barriers and bulk-store waits from its step (the lint of test_general_lowering.py, with no
exemption), and a protocol missing one of them is caught -- by the checker on the protocol, and at
compile time when the builder leaves one out."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import tkjit
from tkjit.errors import TkError
from tkjit.passes import default_pipeline, sync_protocol as sp
from tkjit.passes.mbarrier import schedule_of
from tkjit.passes.sync_check import SyncError, check_protocol, default_cases

from support import drop_steps

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
GEMM = (EXAMPLES / "gemm.tk").read_text()


def _proto(source: str = GEMM, **options):
    return schedule_of(tkjit.compile(source, lowering="general", cache=False, **options).ir).protocol


def _steps(steps, kind):
    out = []
    for st in steps:
        if isinstance(st, kind):
            out.append(st)
        for field in ("body", "orelse"):
            out += _steps(getattr(st, field, ()), kind)
    return out


def test_the_gemm_protocol_holds_its_deferred_epilogue():
    proto = _proto()
    text = proto.text()
    assert "hold the tile of C in registers (deferred epilogue)" in text
    assert text.count("if a tile of C is held") == 3  # after the first wgmma, after the loop, at the end
    staged = _steps(proto.consumer, sp.StagedStore)
    assert staged and all(len(s.body) == 4 * 5 for s in staged)  # 4 rounds of 5 steps
    assert [type(st) for st in staged[0].body[:5]] == [sp.StoreWait, sp.StagingSync, sp.StagingWrite,
                                                       sp.StagingSync, sp.TmaStore]
    assert [st.buffer for st in staged[0].body if isinstance(st, sp.TmaStore)] == [0, 1, 0, 1]
    assert isinstance(proto.consumer[-1], sp.StoreDrain)
    check_protocol(proto, default_cases(proto))


@pytest.mark.parametrize("what, pick, kind", [
    ("the meeting after the writes", lambda st, i: isinstance(st, sp.StagingSync) and i % 5 == 3, "early-read"),
    ("the meeting after the wait", lambda st, i: isinstance(st, sp.StagingSync) and i % 5 == 1, "overwrite"),
    ("the bulk-store wait", lambda st, i: isinstance(st, sp.StoreWait), "overwrite"),
    ("the drain before exit", lambda st, i: isinstance(st, sp.StoreDrain), "in-flight-at-exit"),
])
@pytest.mark.parametrize("deferred", [True, False], ids=["deferred", "in-place"])
def test_a_protocol_missing_an_epilogue_barrier_is_caught(what, pick, kind, deferred):
    options = {} if deferred else {"pipeline": default_pipeline("sm_90a").replace("epilogue", "epilogue{defer=off}")}
    proto = _proto(**options)
    assert bool(_steps(proto.consumer, sp.HoldStore)) == deferred
    with pytest.raises(SyncError) as info:
        check_protocol(drop_steps(proto, pick), default_cases(proto))
    assert kind in str(info.value), what


def test_a_builder_that_leaves_out_a_barrier_fails_the_compile(monkeypatch):
    """The compile-time check: the mbarrier pass checks the protocol it built, so an epilogue
    built without its second meeting (the TMA store could read rows another warp has not
    written) stops the compile with the checker's counterexample."""
    real = sp.staged_store

    def broken(item):
        full = real(item)
        return dataclasses.replace(full, body=tuple(st for i, st in enumerate(full.body)
                                                    if not (isinstance(st, sp.StagingSync) and i % 5 == 3)))
    monkeypatch.setattr(sp, "staged_store", broken)
    with pytest.raises(TkError) as info:
        tkjit.compile(GEMM, lowering="general", cache=False, pipeline=default_pipeline("sm_90a")).asm["ptx"]
    assert "early-read" in str(info.value) and "staging C" in str(info.value)


def test_the_store_in_a_trip_is_placed_among_the_trips_products():
    """examples/linear_attention.tk stores O in its ring loop, between the trip's third and fourth
    products: the StagedStore stands there in the trip, and the consumer drains its bulk stores
    before exit."""
    proto = _proto((EXAMPLES / "linear_attention.tk").read_text())
    (loop,) = _steps(proto.consumer, sp.Loop)
    kinds = [type(st).__name__ for st in loop.body]
    at = kinds.index("StagedStore")
    assert kinds[:at].count("Mma") == 3 and kinds[at + 1:].count("Mma") == 1
    assert isinstance(proto.consumer[-1], sp.StoreDrain)


def test_ping_pong_consumers_stage_their_own_tiles():
    proto = _proto(constants={"BM": 128, "BN": 128})
    assert proto.pingpong
    (tiles,) = [st for st in proto.consumer if isinstance(st, sp.Tiles)]
    assert isinstance(tiles.body[-1], sp.StagedStore)
    check_protocol(proto, default_cases(proto))
