"""The sync checker's verdicts kept on disk: reused for the same protocol, re-explored otherwise."""
from __future__ import annotations

import dataclasses

import pytest

from tkjit.config import reset_config
from tkjit.passes import sync_verdicts
from tkjit.passes.sync_check import check_protocol, default_cases
from tkjit.passes.sync_protocol import Load, LoopPlan, Ring, standard_protocol


def protocol(stages: int = 3, consumers: int = 2):
    ring = Ring("k", stages, (Load("a", 16384), Load("b", 32768)), 49152, consumers)
    return standard_protocol("gemm", consumers, True, (ring,), (LoopPlan("k", (("k",),)),))


class Counting:
    def __init__(self):
        self.calls = 0

    def __call__(self, proto, cases):
        self.calls += 1
        return check_protocol(proto, cases)


def test_a_verdict_is_kept_and_reused_for_the_same_protocol_only():
    proto, check = protocol(), Counting()
    cases = tuple(default_cases(proto))
    first = sync_verdicts.checked(proto, cases, check)
    again = sync_verdicts.checked(proto, cases, check)
    assert check.calls == 1
    assert [dataclasses.astuple(r) for r in again.results] == [dataclasses.astuple(r) for r in first.results]
    sync_verdicts.checked(protocol(stages=4), tuple(default_cases(protocol(stages=4))), check)
    sync_verdicts.checked(proto, cases[:1], check)  # other trip-count cases: another verdict
    assert check.calls == 3


def test_a_damaged_verdict_is_explored_again(tmp_path):
    proto, check = protocol(), Counting()
    cases = tuple(default_cases(proto))
    sync_verdicts.checked(proto, cases, check)
    from tkjit.config import get_config
    for f in (get_config().cache_dir / "sync-verdicts").glob("*.json"):
        f.write_text("{not json")
    sync_verdicts.checked(proto, cases, check)
    assert check.calls == 2


def test_a_verdict_changed_in_one_number_is_explored_again(tmp_path):
    """It would still parse: the sha256 on its first line catches it."""
    proto, check = protocol(), Counting()
    cases = tuple(default_cases(proto))
    sync_verdicts.checked(proto, cases, check)
    from tkjit.config import get_config
    (f,) = (get_config().cache_dir / "sync-verdicts").glob("*.json")
    digest, _, body = f.read_bytes().partition(b"\n")
    f.write_bytes(digest + b"\n" + body.replace(b'"states": ', b'"states": 1', 1))
    sync_verdicts.checked(proto, cases, check)
    assert check.calls == 2


@pytest.mark.parametrize("how", ["explore", "no-cache"])
def test_debug_mode_and_the_cache_switch_always_explore(how, monkeypatch):
    if how == "no-cache":
        monkeypatch.setenv("TKJIT_NO_CACHE", "1")
        reset_config()
    proto, check = protocol(), Counting()
    cases = tuple(default_cases(proto))
    for _ in range(2):
        sync_verdicts.checked(proto, cases, check, explore=(how == "explore"))
    assert check.calls == 2
