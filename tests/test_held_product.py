"""A trip whose one product reads a register A the trip makes (a dequantized, converted or f32
ring tile, ``mma_AB(cvt<bf16>(mul_col(ar, s)), b, acc)``) keeps that product in flight into the
next trip (``sync_protocol.held_loop``, ``LoopPlan.held``): the next trip reads its stage and makes
its A under it, then retires it (wait_group 0), releases its stage, copies the A into the held
registers and issues. Until session 19 every such trip drained its group at once, so the register
work and the tensor cores took turns. Measured (H200, 2026-11-28, same runs,
``benchmarks/results/2026-11-28-nvidia-h200-s19-held-aa.json``): an f32 A on ping-pong consumers
1.15x against ``mbarrier{hold=off}``; held where one consumer at a time runs its products (ping-pong):
cooperative consumers fill each other's gaps (``mbarrier.HOLD_MEASURED``)."""
from __future__ import annotations

import re

import pytest
import torch

import tkjit
from tkjit.interpreter.roles import run_roles
from tkjit.passes.sync_check import SyncError, check_protocol, find_violation
from tkjit.passes.sync_protocol import (Advance, IfTrips, Load, Loop, LoopPlan, Mma, MmaWait, NotFirst, Read,
                                        Release, Ring, Tiles, Wait, all_steps, standard_protocol)

from support import needs_cuda_tools
from unseen_corpus import BY_NAME

K = "k"


def _trip(steps) -> tuple:
    return next(st for st in all_steps(steps) if isinstance(st, Loop)).body


def _if_trips(steps) -> IfTrips:
    return next(st for st in all_steps(steps) if isinstance(st, IfTrips))


def _held_plan() -> LoopPlan:
    return LoopPlan(K, ((K,),), in_flight=False, held=True, copies=((0, (K,)),))


def _proto(plan: LoopPlan, trip=None):
    ring = Ring(K, 4, (Load("a", 16384), Load("b", 32768)), 49152, 2)
    proto = standard_protocol("t", 2, True, (ring,), (plan,))
    if trip is None:
        return proto
    return proto.__class__(**{**proto.__dict__, "consumer": (Tiles((IfTrips(K, (
        Loop(K, trip), MmaWait(0), Release(K, "prev"))),)),)})


# -- the protocol -------------------------------------------------------------------------------
def test_the_held_trip_retires_the_previous_product_right_before_its_own():
    proto = _proto(_held_plan())
    assert _trip(proto.consumer) == (Wait(K, "full"), Read((K,)), MmaWait(0), NotFirst((Release(K, "prev"),)),
                                     Mma((K,), held=True), Advance(K))
    assert _if_trips(proto.consumer).body[1:] == (MmaWait(0), Release(K, "prev"))
    check_protocol(proto)


def test_a_release_of_the_held_stage_before_its_wait_is_caught():
    """The previous stage released before the group reading it retired: the producer may refill
    it under the wgmma."""
    trip = (Wait(K, "full"), Read((K,)), NotFirst((Release(K, "prev"),)), MmaWait(0), Mma((K,), held=True),
            Advance(K))
    v, _ = find_violation(_proto(_held_plan(), trip), (3,))
    assert v is not None and v.kind == "release-before-read", v
    assert "wgmma" in v.message(_proto(_held_plan(), trip))
    with pytest.raises(SyncError):
        check_protocol(_proto(_held_plan(), trip))


def test_a_held_trip_releasing_its_own_stage_is_caught():
    """The current stage released in the trip that issued the held group still reading it."""
    trip = (Wait(K, "full"), Read((K,)), MmaWait(0), Mma((K,), held=True), Release(K), Advance(K))
    v, _ = find_violation(_proto(_held_plan(), trip), (1,))
    assert v is not None and v.kind == "release-before-read", v


# -- the pass: decided, explained, and off -----------------------------------------------------------
def _pipeline(hold: str | None, widen: str = "auto") -> str | None:
    from tkjit.passes import default_pipeline
    if hold is None and widen == "auto":
        return None
    p = default_pipeline("sm_90a")
    if hold is not None:
        p = p.replace("mbarrier", f"mbarrier{{hold={hold}}}", 1)
    return p.replace("tile-split", f"tile-split{{widen={widen}}}", 1)


def _compile(name: str, hold: str | None = None, widen: str = "auto", source: str | None = None):
    return tkjit.compile(source or BY_NAME[name].source, cache=False, require_hopper=True,
                         pipeline=_pipeline(hold, widen))


HELD = [("gemm_f32a", None), ("gemm_dequant_a", None), ("gemm_fp8a", None)]
"""Mixed-input GEMMs held under auto: cooperative consumers at 256 columns (the f32 and fp8 A
written at 128 columns are widened by tile-split)."""

RMS_RS = BY_NAME["rms_linear_read"].source.replace("acc = mma_AB(x, w, acc)", "acc = mma_AB(cvt<bf16>(xr), w, acc)")
"""RMSNorm's sums beside an RS product taken from the same register read: at 128 columns (widen
off) cooperative, the one measured slower held (0.89x)."""


def _trip_ir(k) -> str:
    text = k.asm["after:async-schedule"]
    return text[text.index('ring_wait {ring = "k", bar = "full"}'):text.index("yield %acc.3")]


@pytest.mark.parametrize("name, hold", HELD)
def test_the_held_trip_in_the_ir(name, hold):
    k = _compile(name, hold)
    trip = _trip_ir(k)
    assert re.search(r'cvt \{dtype = "bf16"\} .*\n\s*mma_wait \{pending = 0\};\n\s*not_first \{\n\s*'
                     r'ring_release \{ring = "k", which = "prev"\};\n\s*\}\n\s*mma_issue \{rings = "k", held = true, '
                     r'anchored = true\};\n\s*%acc.3 = mma_AB', trip), trip
    assert "the register-A product stays in flight" in str(k.explain())


def test_ping_pong_consumers_hold_it_and_say_why():
    k = _compile("gemm_f32a", widen="off")
    assert "pingpong = true" in k.asm["after:async-schedule"]
    assert "held = true" in k.asm["after:async-schedule"]
    assert "one consumer at a time runs its products" in str(k.explain())


def test_wide_cooperative_consumers_hold_it_and_say_why():
    k = _compile("gemm_dequant_a")
    assert "pingpong = true" not in k.asm["after:async-schedule"]
    assert "held = true" in k.asm["after:async-schedule"]
    assert "products are 256 columns wide, long beside the trip's register work" in str(k.explain())


def test_narrow_cooperative_consumers_drain_it_and_say_why():
    k = _compile("rms_rs", widen="off", source=RMS_RS)
    assert "pingpong = true" not in k.asm["after:async-schedule"]
    assert "held = true" not in k.asm["after:async-schedule"]
    explain = str(k.explain())
    assert "the register-A product is drained every trip" in explain
    assert "cooperative consumers' groups, 128 columns wide, fill each other's gaps" in explain


def test_hold_off_drains_every_trip():
    k = _compile("gemm_dequant_a", "off")
    text = k.asm["after:async-schedule"]
    assert "held = true" not in text
    trip = text[text.index("mma_issue"):text.index("yield %acc.3")]
    assert trip.index("mma_wait {pending = 0}") < trip.index('ring_release {ring = "k"}')
    assert "stays in flight" not in str(k.explain())


def test_a_bad_hold_option_is_named():
    with pytest.raises(tkjit.TkError, match="hold must be auto, on or off, got 'maybe'"):
        _compile("gemm_dequant_a", "maybe")


def test_a_shared_a_product_is_not_held():
    """An SS product stays in flight the ordinary way (wait_group 1): nothing to hold."""
    k = _compile("rms_linear_read", "on")
    assert "held = true" not in k.asm["after:async-schedule"]
    assert "mma_wait {pending = 1}" in k.asm["after:async-schedule"]


# -- the emitter ------------------------------------------------------------------------------------
def _loop_trip(ptx: str) -> str:
    trip = ptx[ptx.index("// step: wait full[k.s] parity ph"):]
    return trip[:trip.index("// step: advance k")]


@pytest.mark.parametrize("name, hold", HELD)
def test_the_ptx_makes_the_a_then_retires_then_copies_then_issues(name, hold):
    trip = _loop_trip(_compile(name, hold).asm["ptx"])
    made = trip.index("cvt.rn.bf16x2.f32")
    wait = trip.index("wgmma.wait_group.sync.aligned 0;")
    release = trip.index("// step: release: arrive empty[k.prev]")
    copy = trip.index("lop3.b32")
    issue = trip.index("wgmma.mma_async")
    assert made < wait < release < copy < issue, (made, wait, release, copy, issue)
    assert "wgmma.wait_group.sync.aligned 0;" not in trip[issue:]


def _in_flight_writes(sass: str) -> list[str]:
    """Instructions of the innermost loop holding an RS HGMMA that write one of its A registers
    before the loop's first WARPGROUP.DEPBAR (the wait that retires the previous trip's group),
    when that wait comes before the loop's first HGMMA (a held loop)."""
    ins = [(int(m.group(1), 16), m.group(2).strip()) for m in
           re.finditer(r"/\*([0-9a-f]{4,5})\*/\s+([^;]*);", sass)]
    best = None
    for pc, text in ins:
        m = re.search(r"BRA (?:`\(\.L_x_\d+\)|0x([0-9a-f]+))", text)
        if m is None or m.group(1) is None or int(m.group(1), 16) >= pc:
            continue
        body = [x for x in ins if int(m.group(1), 16) <= x[0] <= pc]
        if any(re.match(r"HGMMA\.\S+ R\d+, R\d+,", t) for _, t in body) and (best is None or len(body) < len(best)):
            best = body
    assert best is not None, "no loop with an RS HGMMA"
    a_regs = set()
    for _, t in best:
        m = re.match(r"HGMMA\.\S+ R\d+, R(\d+),", t)
        if m:
            a_regs |= set(range(int(m.group(1)), int(m.group(1)) + 4))
    texts = [t for _, t in best]
    depbar = next(i for i, t in enumerate(texts) if "WARPGROUP.DEPBAR" in t)
    first_mma = next(i for i, t in enumerate(texts) if t.startswith("HGMMA"))
    assert depbar < first_mma, "not a held loop: its group is retired in the trip that issued it"
    out = []
    for t in texts[:depbar]:
        m = re.match(r"(?:@!?U?P\w+ )?([A-Z][A-Z0-9_.]*) R(\d+)", t)
        if m and not m.group(1).startswith(("ST", "HGMMA")) and int(m.group(2)) in a_regs:
            out.append(t)
    return out


@needs_cuda_tools
@pytest.mark.parametrize("name, hold", HELD)
def test_ptxas_leaves_the_held_registers_alone_until_the_wait(name, hold):
    """ptxas ends a wgmma's register A at its issue and would coalesce a plain ``mov`` into the
    held registers away, letting the next trip's loads write registers the group still reads
    (wrong results on the GPU before the copy became an lop3 of the old value): in the SASS, no
    instruction of the loop writes an A register of its HGMMAs before the wait."""
    assert _in_flight_writes(_compile(name, hold).asm["sass"]) == []


@needs_cuda_tools
def test_the_lint_would_see_a_plain_copy():
    """The SASS check is not vacuous: the held loop with plain movs (as first written) fails it."""
    from tkjit.codegen.hopper import lower_consumer
    from tkjit.codegen.emit_control import moves

    def plain(self, op):
        home = self.held_homes[id(op)]
        self.b(*moves(self.ctx, [home], [self.ctx.get(op.operands[0])]))
        return home
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lower_consumer.ConsumerRole, "held_a", plain)
        assert _in_flight_writes(_compile("gemm_dequant_a", "on").asm["sass"]) != []


# -- the roles executor runs it ---------------------------------------------------------------------
@pytest.mark.parametrize("name, hold", HELD)
def test_the_held_schedule_matches_the_interpreter(name, hold):
    case = BY_NAME[name]
    k = tkjit.compile(case.source, cache=False, pipeline=_pipeline(hold))
    assert "held = true" in k.asm["after:async-schedule"]
    from test_async_schedule import SEEDS, _copy, _same
    torch.manual_seed(0)
    args = case.make(case.cpu_shape, "cpu")
    ref = _copy(args)
    k(*ref)
    for seed in SEEDS:
        mine = _copy(args)
        run_roles(k.ir, mine, seed=seed)
        assert _same(case.outputs, mine, ref), (name, seed)


def test_the_held_step_prints_parses_and_reads_back_as_the_protocol():
    """``mma_issue {held = true}`` survives the textual IR, and the protocol read back from the IR
    (the one the emitter walks and the checker checks) has the held product."""
    from tkjit.ir.parser import parse_kernel
    from tkjit.ir.printer import print_kernel
    k = _compile("gemm_f32a")
    text = k.asm["after:async-schedule"]
    assert print_kernel(parse_kernel(text)) == text
    from tkjit.passes.async_schedule import protocol_from_ir
    assert Mma((K,), held=True) in list(all_steps(protocol_from_ir(parse_kernel(text)).consumer))
    assert "mma reading k.s (its register A copied to held registers first); commit_group" in k.protocol


@pytest.mark.parametrize("how", ["split", "stream_k"])
def test_split_k_and_stream_k_name_the_register_a_product(how):
    """Split-K and stream-K keep the last product in flight their own way and refuse a register-A
    one: the refusal names the product and says so (it named the carried tile before)."""
    import warnings
    from tkjit.passes import default_pipeline
    src = BY_NAME["gemm_dequant_a"].source
    if how == "split":
        src = src.replace("schedule(persistent, group = 8)", "schedule(grid, split = 2)")
        assert "split = 2" in src
        pipeline = None
    else:
        pipeline = default_pipeline("sm_90a").replace("grid", "grid{stream_k=1}", 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        k = tkjit.compile(src, cache=False, pipeline=pipeline)
        k.asm["ptx"]
    text = " ".join(str(w.message) for w in caught) + str(k.explain())
    name = "split-K" if how == "split" else "stream-K"
    assert f"{name} keeps the loop's last product in flight from trip to trip" in text, text[-2000:]
    assert "register A made in the trip" in text
