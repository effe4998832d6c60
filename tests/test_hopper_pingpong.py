"""Ping-pong consumers (warp-spec{mode=pingpong}, auto at 128 x 128 tiles) through the general
lowering: the pass's choice and refusals, the kernel's PTX (turn barriers, empty count 1, no serialized wgmma, no spills), and
the alternating-consumer protocol on the CPU sync checker, with broken variants it must catch."""
from __future__ import annotations

from pathlib import Path

import pytest

import tkjit
from tkjit.passes import default_pipeline
from tkjit.passes.sync_check import SyncError, check_protocol, default_cases
from tkjit.passes.sync_protocol import (IfNextTile, IfPrevTile, IfTrips, Load, Loop, LoopPlan, Protocol, Ring,
                                        SkipTrips, Tiles, TurnPass, TurnWait, pingpong_consumer, producer_fill)

EXAMPLE = (Path(__file__).resolve().parents[1] / "examples" / "gemm.tk").read_text()


def pipeline(mode: str = "auto", grid: str = "") -> str:
    out = default_pipeline("sm_90a").replace("warp-spec", f"warp-spec{{mode={mode}}}")
    return out.replace(",grid", f",grid{{{grid}}}") if grid else out


def compiled(mode="auto", grid="", **constants):
    kernel = tkjit.compile(EXAMPLE, filename="gemm.tk", constants=constants, pipeline=pipeline(mode, grid),
                           lowering="general")
    kernel.binary  # noqa: B018 - the metadata is complete once assembled
    return kernel


def schedule(kernel) -> str:
    """The consumer schedule the general lowering emitted: the protocol it follows says so."""
    assert kernel.metadata["lowering"] == "general", kernel.explain()
    return "consumer schedule: " + ("ping-pong" if "ping-pong" in kernel.metadata["protocol"] else "cooperative")


@pytest.mark.parametrize("mode, constants, expect", [
    ("auto", {"BM": 128, "BN": 128}, "ping-pong"),        # measured to win: auto takes it
    ("auto", {}, "cooperative"),                           # 128x256: 256 registers, does not fit one consumer
    ("auto", {"BM": 64, "BN": 256}, "cooperative"),        # one cooperative consumer: not measured
    ("auto", {"BM": 128, "BN": 64}, "cooperative"),        # narrower than measured
    ("pingpong", {"BM": 64, "BN": 256}, "ping-pong"),
    ("cooperative", {"BM": 128, "BN": 128}, "cooperative"),
])
def test_the_consumer_schedule_and_why(mode, constants, expect):
    kernel = compiled(mode, **constants)
    assert schedule(kernel) == f"consumer schedule: {expect}", kernel.explain()
    assert "warp-spec" in kernel.explain()


@pytest.mark.parametrize("constants, grid, why", [
    ({}, "", "accumulator needs about 288 registers"),
    ({"BM": 128, "BN": 128, "SPLIT": 2}, "", "split-K gives each tile a cluster of its own"),
    ({"BM": 128, "BN": 128}, "schedule=grid", "the block loop is not persistent"),
])
def test_pingpong_asked_for_where_it_cannot_run_stays_cooperative_or_says_so(constants, grid, why):
    kernel = compiled("pingpong", grid, **constants)
    text = kernel.explain()
    # (grid runs before warp-spec, so its schedule=grid option is what warp-spec sees)
    assert schedule(kernel) == "consumer schedule: cooperative" and why in text, text


def test_multicast_is_not_combined_with_pingpong():
    kernel = compiled("pingpong", "multicast=2", BM=128, BN=128)
    assert "not with ping-pong consumers" in kernel.explain()
    assert "multicast" not in kernel.metadata["gemm"]


@pytest.mark.parametrize("constants", [{"BM": 128, "BN": 128}, {"BM": 64, "BN": 256}])
def test_pingpong_ptx_takes_turns_and_ptxas_keeps_the_wgmma_pipeline(constants):
    kernel = compiled("pingpong", **constants)
    ptx = kernel.asm["ptx"]
    assert "bar.sync %r" in ptx and "bar.arrive %r" in ptx  # turn barriers 4 + c, by register
    assert f"], {1};" in ptx.split("mbarrier.init")[2]  # empty[0] counts one consumer
    report = kernel.metadata["ptxas"]
    codes = {m["code"] for m in report["messages"]}
    assert not codes & {"C7517", "C7519", "C7508"}, report["log"]
    fn = report["functions"][0]
    assert fn["spill_store_bytes"] == 0 and fn["stack_frame_bytes"] == 0
    assert "epilogue overlap: none" in kernel.explain()


def test_the_kernels_protocol_is_the_alternating_one_and_checks():
    kernel = compiled("pingpong", BM=128, BN=128)
    text = kernel.metadata["protocol"]
    assert "ping-pong" in text and "empty[6] count 1" in text and "bar.sync turn[c]" in text


# -- the protocol on the CPU checker ------------------------------------------------------------
def protocol(consumer=None, stages=4, empty=1) -> Protocol:
    ring = Ring("k", stages, (Load("a", 16384), Load("b", 16384)), 32768, empty)
    consumer = consumer or pingpong_consumer(LoopPlan("k", (("k",),)), stages)
    return Protocol("gemm", 2, True, (ring,), (Tiles((Loop("k", producer_fill(ring)),)),), consumer)


@pytest.mark.parametrize("stages", [1, 2, 4, 6])
def test_alternating_consumers_pass_the_checker(stages):
    proto = protocol(stages=stages)
    report = check_protocol(proto, default_cases(proto))
    assert any(len(r.case) == 5 for r in report.results)  # odd tile counts: consumer 0 one more


def _body(*steps):
    return (Tiles(tuple(steps), alternate=True),)


HAND_ON = IfNextTile((TurnPass(),))
LOOP = pingpong_consumer(LoopPlan("k", (("k",),)), 4)[0].body[1]


@pytest.mark.parametrize("consumer, empty, kind", [
    (_body(IfPrevTile((TurnWait(),)), LOOP), 1, "wrong-fill"),                  # no skip of the other's stages
    (_body(IfPrevTile((SkipTrips("k"),)), LOOP), 1, "unmatched-arrival"),       # no turn: its hand-overs pile up
                                                                                 # (and it runs a ring ahead)
    (_body(IfPrevTile((SkipTrips("k"), TurnWait())),
           IfTrips("k", LOOP.body[:1] + LOOP.body[2:])), 1, "deadlock"),          # the turn never handed on
    (_body(IfPrevTile((SkipTrips("k"), TurnWait())),
           IfTrips("k", (*LOOP.body, HAND_ON), orelse=(HAND_ON, HAND_ON))), 1, "over-arrival"),
    (None, 2, "deadlock"),                                                       # empty counts both consumers
])
def test_broken_alternations_are_caught(consumer, empty, kind):
    proto = protocol(consumer, empty=empty)
    with pytest.raises(SyncError) as err:
        check_protocol(proto, default_cases(proto))
    assert err.value.violation.kind == kind, str(err.value)


def test_pingpong_with_64_row_tiles_takes_the_general_lowering_and_its_schedule_matches():
    """Each ping-pong consumer computes whole tiles, so a 64-row tile is one slab per consumer
    (the general lowering's refusal counts the consumers sharing a tile's rows: one). Its CPU
    schedule (tkjit/interpreter/roles.py) matches the plain interpreter, ragged edges included."""
    import torch
    from tkjit.interpreter.roles import run_roles
    kernel = compiled("pingpong", BM=64, BN=256)
    assert schedule(kernel) == "consumer schedule: ping-pong"
    torch.manual_seed(3)
    a, b = torch.randn(200, 130).bfloat16(), torch.randn(130, 300).bfloat16()
    ref = torch.full((200, 300), float("nan")).bfloat16()
    tkjit.compile(EXAMPLE, filename="gemm.tk", constants={"BM": 64, "BN": 256}, cache=False)(a, b, ref)
    for seed in (0, 1):
        c = torch.full((200, 300), float("nan")).bfloat16()
        run_roles(kernel.ir, [a, b, c], seed=seed)
        assert torch.equal(c.float().nan_to_num(7.0), ref.float().nan_to_num(7.0)), seed


def test_a_loop_that_writes_a_shared_tile_from_registers_gets_cooperative_consumers():
    """Ping-pong consumers cannot meet around a shared tile they write from registers (the
    lowering refuses it): warp-spec does not pick ping-pong for such a kernel and says why, so the
    refusal a user sees is about what the lowering really cannot do (here: a ring tile read into
    registers by something other than a product), not about a schedule the compiler chose."""
    import warnings
    source = """
kernel f32in<BM = 128, BN = 128, BK = 32>(A: gl<f32>[M, K], B: gl<f32>[K, N], C: gl<f32>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) schedule(persistent) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a32: st<f32>[BM, BK] = A.tile(m, k)
      b32: st<f32>[BK, BN] = B.tile(k, n)
      ar: rt<f32>[BM, BK] = a32
      br: rt<f32>[BK, BN] = b32
      as: st<bf16>[BM, BK] = cvt<bf16>(ar)
      bs: st<bf16>[BK, BN] = cvt<bf16>(br)
      acc = mma_AB(as, bs, acc)
    }
    C.tile(m, n) = acc
  }
}
"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k = tkjit.compile(source, filename="f32in.tk", cache=False)
        text = str(k.explain())
    assert "ping-pong cannot run: it writes a shared tile from registers (copy at f32in.tk:10:7)" in text
    assert "cannot meet around" not in text
