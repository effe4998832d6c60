"""Ping-pong turns in level-2 loops (``mbarrier{turns=on}``, FlashAttention-3's warpgroup
scheduling barriers): the protocol steps, the compile-time check (a broken chain is caught), the
roles interpreter against the source-level run, and the PTX each step prints."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.errors import TkError
from tkjit.interpreter.roles import run_roles
from tkjit.passes import DEFAULT_PIPELINE
from tkjit.passes.sync_protocol import TurnPass, TurnWait, all_steps

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TURNS = DEFAULT_PIPELINE.replace("mbarrier,", "mbarrier{turns=on},")


def nol(d: int, causal: bool = False, lowering: str = "auto", pipeline: str = TURNS):
    return tkjit.compile((EXAMPLES / "attention_nol.tk").read_text(), filename="attention_nol.tk",
                         constants={"D": d, "CAUSAL": causal}, lowering=lowering, pipeline=pipeline, cache=False)


@pytest.mark.parametrize("d,lowering", [(128, "auto"), (128, "general"), (64, "auto")])
def test_each_trip_takes_its_turn_and_the_chain_opens_and_closes_once(d, lowering):
    from tkjit.passes.mbarrier import schedule_of
    k = nol(d, lowering=lowering)
    proto = schedule_of(k.ir).protocol
    assert proto.turns
    first, *_, last = proto.consumer
    assert first == TurnPass("last") and last == TurnWait("first")
    steps = list(all_steps(proto.consumer))
    assert steps.count(TurnWait()) == steps.count(TurnPass()) == 1  # in the loop body
    (d_,) = [x for x in k.decisions.for_pass("mbarrier") if x.decision == "ping-pong turns on the tensor cores"]
    assert "consumer 0 closes it" in d_.reason
    checked = [x for x in k.decisions.for_pass("async-schedule") if x.decision.startswith("sync protocol checked")]
    assert checked and "turn[0]" in checked[0].data["protocol"]


def test_auto_takes_turns_where_the_trips_grow_with_a_block_index():
    """turns=auto: causal D = 128 (two consumers, the key loop's trips grow with the query block)
    takes turns and logs the measurement; non-causal does not; three consumers (D = 64) do not;
    nor do consumers running their own trips (causal D = 64, idle past the end), even when asked."""
    from tkjit.passes.mbarrier import schedule_of
    causal = nol(128, causal=True, pipeline=None)
    assert schedule_of(causal.ir).protocol.turns
    (d,) = [x for x in causal.decisions.for_pass("mbarrier") if x.decision == "ping-pong turns on the tensor cores"]
    assert "trip count grows with a block index: measured" in d.reason
    assert not schedule_of(nol(128, pipeline=None).ir).protocol.turns
    assert not schedule_of(nol(64, pipeline=None).ir).protocol.turns
    assert not schedule_of(nol(64, causal=True).ir).protocol.turns
    off = nol(128, causal=True, pipeline=DEFAULT_PIPELINE.replace("mbarrier,", "mbarrier{turns=off},"))
    assert not schedule_of(off.ir).protocol.turns


def test_the_ptx_prints_each_turn_where_the_protocol_has_it():
    ptx = nol(128, lowering="general").asm["ptx"]
    opener = ptx.index("// step: last consumer: bar.arrive turn[0]")
    waits = [i for i in range(len(ptx)) if ptx.startswith("// step: bar.sync turn[c]", i)]
    closer = ptx.index("// step: consumer 0: bar.sync turn[0]")
    assert opener < waits[0] and waits[-1] < closer
    assert "bar.arrive 6, 256;" in ptx[opener:opener + 200] and "bar.sync 6, 256;" in ptx[closer:closer + 200]


def test_a_chain_left_unopened_is_a_deadlock(monkeypatch):
    """Without the last consumer's opening hand-over, consumer 0 waits for a turn nobody gives."""
    from tkjit.passes import mbarrier
    real = mbarrier.with_turns
    monkeypatch.setattr(mbarrier, "with_turns", lambda consumer: real(consumer)[1:])
    with pytest.raises(TkError, match="deadlock"):
        nol(128).asm["ptx"]


def test_a_chain_left_unclosed_is_caught(monkeypatch):
    """Without consumer 0's closing wait, the last consumer's last hand-over arrives on a barrier
    no one waits on: the CTA exits with a named barrier mid-phase."""
    from tkjit.passes import mbarrier
    real = mbarrier.with_turns
    monkeypatch.setattr(mbarrier, "with_turns", lambda consumer: real(consumer)[:-1])
    with pytest.raises(TkError, match="unmatched-arrival"):
        nol(128, lowering="general").asm["ptx"]


@pytest.mark.parametrize("d,causal,lowering", [(128, False, "auto"), (128, True, "general"), (64, False, "general"),
                                               (96, False, "auto")])
def test_the_schedule_with_turns_matches_the_interpreter(d, causal, lowering):
    k = nol(d, causal, lowering)
    torch.manual_seed(0)
    b, h, hkv, n = 1, 2, 1, 300
    q, kk, v = (torch.randn(b, x, n, d).bfloat16() for x in (h, hkv, hkv))
    args = [q, kk, v, torch.full((b, h, n, d), float("nan")).bfloat16(), d ** -0.5]
    ref = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    k(*ref)
    for seed in (1, 7):
        mine = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        run_roles(k.ir, mine, seed=seed)
        assert torch.equal(mine[3], ref[3]), f"schedule {seed} differs"
