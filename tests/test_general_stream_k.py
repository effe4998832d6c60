"""Stream-K as a schedule option of the general sm_90a lowering (``grid{stream_k=1}``,
codegen/hopper/lower_stream_k.py): the last wave's K trips split over every CTA, partials through
the module's workspace and flags (tail_split.py). On the CPU: the PTX (ptxas, SASS, no spills,
the workspace, every flag operation inside the protocol's fix-up step), the protocol and its check
(a fix-up before the drain is caught), the launch-order model of the flags over many launch
shapes (a broken walk is caught), the refusals with the op, the decision log, and the CPU run of
the schedule (every CTA's units as coroutines, owners waiting for contributions) against the plain
interpreter. ``lowering="auto"`` takes it since the GPU tests (tests/gpu/test_general_stream_k_gpu.py)
passed (H200, 2026-11-27)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.codegen.hopper import tail_split
from tkjit.errors import NotAvailableError
from tkjit.passes import default_pipeline

from test_general_lowering import sync_outside_the_protocol

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
GEMM = (EXAMPLES / "gemm.tk").read_text()
STREAM_K = default_pipeline("sm_90a").replace("grid", "grid{stream_k=1}")


def _stream_k(source: str = GEMM, lowering: str = "general", **constants):
    return tkjit.compile(source, filename="gemm.tk", pipeline=STREAM_K, constants=constants or None,
                         lowering=lowering, require_hopper=lowering == "general", cache=False)


def test_stream_k_takes_the_general_lowering():
    k = _stream_k()
    try:
        sass = k.asm["sass"]
    except NotAvailableError as e:
        pytest.skip(str(e))
    ptx, md = k.asm["ptx"], k.metadata
    assert md["lowering"] == "general" and md["gemm"]["stream_k"] is True
    assert md["serial_launches"] is True  # the launcher orders launches: the workspace is the module's
    assert md["grid"] == [["min", ["mul", ["cdiv", ["dim", "M"], 128], ["cdiv", ["dim", "N"], 256]], ["num_sms"]]]
    ws, flags = tail_split.symbols("gemm")
    assert f".global .align 16 .b8 {ws}[{tail_split.MAX_SLOTS * 128 * 256 * 4}];" in ptx
    assert f".global .align 16 .b32 {flags}[{tail_split.MAX_SLOTS * 2 * 128}];" in ptx
    assert "st.release.gpu.global.u32" in ptx and "ld.acquire.gpu.global.u32" in ptx
    assert "stream-K fix-up of loop k" in md["protocol"]
    assert re.search(r"\bHGMMA", sass) and "UTMALDG" in sass
    assert not re.search(r"\b(LDL|STL)\b", sass)
    assert not [m for m in md["ptxas"]["messages"] if m["level"] == "warning"]
    assert "stream-K: the last wave's K trips over every CTA" in [d.decision for d in k.decisions.for_pass("codegen")]
    assert "R = T mod P" in k.explain()


@pytest.mark.parametrize("constants", [{}, {"BM": 64, "BN": 64}])
def test_every_flag_operation_is_a_protocol_step(constants):
    """The lint counts stream-K's release/acquire flag operations as synchronization: each must
    sit inside the protocol's fix-up step."""
    k = _stream_k(**constants)
    ptx = k.asm["ptx"]
    assert sync_outside_the_protocol(ptx, k.async_ir) == []
    fixups = re.findall(r"// step: stream-K fix-up.*?// end step", ptx, re.S)
    assert len(fixups) == 1 and "st.release.gpu" in fixups[0] and "ld.acquire.gpu" in fixups[0]


def test_the_lint_catches_a_flag_outside_the_fixup():
    ptx = _stream_k().asm["ptx"]
    broken = ptx.replace("  ret;", "  ld.acquire.gpu.global.u32 %r1, [%rd1];\n  ret;", 1)
    assert sync_outside_the_protocol(broken) == ["ld.acquire.gpu.global.u32 %r1, [%rd1];"]


def test_the_other_kernels_keep_their_protocol():
    """Without the option nothing changes: no fix-up, no workspace, no serial launches."""
    k = tkjit.compile(GEMM, filename="gemm.tk", lowering="general", cache=False)
    ptx = k.asm["ptx"]
    assert "streamk" not in ptx and "stream-K" not in k.metadata["protocol"]
    assert "serial_launches" not in k.metadata and "stream_k" not in k.metadata["gemm"]


def test_the_checker_catches_a_fixup_before_the_drain():
    """The fix-up reads the accumulators: moved before the loop's last wait_group 0 the checker
    finds a wgmma group still in flight."""
    from tkjit.passes import sync_protocol as sp
    from tkjit.passes.mbarrier import schedule_of
    from tkjit.passes.sync_check import find_violation
    proto = schedule_of(_stream_k().ir).protocol
    assert find_violation(proto, (5, 5, 2))[0] is None
    tiles, *rest = proto.consumer  # then the deferred epilogue's last IfHeld and StoreDrain
    assert all(isinstance(st, (sp.IfHeld, sp.StoreDrain)) for st in rest)
    if_trips, _held, fixup, _hold = tiles.body  # IfHeld after the loop, HoldStore at the store
    assert isinstance(fixup, sp.StreamKFixup) and isinstance(_hold, sp.HoldStore)
    loop, drain, release = if_trips.body
    early = sp.IfTrips(if_trips.ring, (loop, fixup, drain, release))
    broken = sp.Protocol(proto.kernel, proto.consumers, proto.persistent, proto.rings, proto.producer,
                         (sp.Tiles((early,)),))
    v, _ = find_violation(broken, (5,))
    assert v is not None and v.kind == "early-read" and "stream-K" in v.why, v


def test_the_fixup_must_end_the_tile():
    from tkjit.passes import sync_protocol as sp
    ring = sp.Ring("k", 2, (sp.Load("a", 64),), 64, 2)
    with pytest.raises(ValueError, match="last consumer step"):
        sp.standard_protocol("g", 2, True, (ring, sp.Ring("t", 1, (sp.Load("t", 64),), 64, 2, one_shot=True)),
                             (sp.LoopPlan("k", (("k",),)), sp.StreamKUnits("k"), sp.OneShotUse("t")))


# -- the launch-order model of the flags --------------------------------------------------------
def test_the_walk_is_sound_for_every_launch_shape():
    """Every (tile, trip) once, contributions only first and gathered once, owners waiting only
    on later CTAs: over tile counts, grid sizes (up to MAX_SLOTS and past it) and trip counts."""
    for tiles in list(range(1, 40)) + [131, 132, 133, 263, 265, 500]:
        for ctas in (1, 2, 3, 5, 8, 66, 132, tail_split.MAX_SLOTS, tail_split.MAX_SLOTS + 1):
            for trips in (1, 2, 3, 7, 64):
                assert tail_split.check_walk(tiles, ctas, trips) == [], (tiles, ctas, trips)


def test_the_model_catches_a_gather_that_misses_a_contribution(monkeypatch):
    real = tail_split.contributors
    monkeypatch.setattr(tail_split, "contributors", lambda *a: real(*a)[1:])
    problems = tail_split.check_walk(15, 4, 5)
    assert problems and "gathered 0 times" in problems[0]


# -- where it does not apply, and refusals ------------------------------------------------------
NOT_APPLIED = [
    ("one CTA per tile", GEMM.replace("schedule(persistent, group = 8, split = SPLIT)", "schedule(grid, split = SPLIT)"),
     {}, "persistent grid"),
    ("split-K", GEMM, {"SPLIT": 2}, "split-K already shares"),          # a @fill_sms variant may pick it
    ("ping-pong", GEMM, {"BM": 128, "BN": 128}, "ping-pong consumers take whole tiles"),
]


@pytest.mark.parametrize("what,source,constants,why", NOT_APPLIED, ids=[r[0] for r in NOT_APPLIED])
def test_where_stream_k_does_not_apply_the_tiles_run_whole_and_the_log_says_why(what, source, constants, why):
    """As the template did: a variant stream-K cannot take (a @fill_sms launch may pick split-K)
    compiles without it, and the decision says why."""
    k = _stream_k(source, **constants)
    ptx = k.asm["ptx"]
    assert "streamk" not in ptx and "serial_launches" not in k.metadata
    (d,) = [d for d in k.decisions.for_pass("codegen") if d.decision.startswith("stream-K")]
    assert d.decision == "stream-K: none" and why in d.reason


REFUSED = [
    ("accumulator from C", GEMM.replace("acc: rt<f32>[BM, BN] = zeros()", "acc: rt<f32>[BM, BN] = C.tile(m, n)"),
     "must start from zeros"),
]


@pytest.mark.parametrize("what,source,why", REFUSED, ids=[r[0] for r in REFUSED])
def test_what_stream_k_cannot_take_is_refused_at_the_op(what, source, why):
    with pytest.raises(NotAvailableError, match=why) as e:
        _stream_k(source).asm["ptx"]
    assert re.search(r"gemm\.tk:\d+:\d+", str(e.value))


def test_auto_takes_stream_k_through_the_general_lowering():
    """Since the GPU tests passed (H200, 2026-11-27), lowering=auto takes stream-K through the
    general lowering (the GEMM template that took it before was deleted the same day)."""
    k = _stream_k(lowering="auto")
    k.asm["ptx"]
    assert k.metadata["lowering"] == "general" and k.metadata["gemm"]["stream_k"] is True


# -- the schedule on the CPU ----------------------------------------------------------------------
SHAPES = [((130, 300, 320), 4), ((64, 320, 448), 3), ((200, 130, 520), 5), ((100, 70, 600), 3)]


@pytest.mark.parametrize("shape,ctas", SHAPES)
def test_stream_k_schedules_match_the_interpreter(shape, ctas):
    """Every CTA's units as coroutines, owners blocked until their contributors' flags are set;
    the partials are added in another order than the plain loop's, so to rounding."""
    from tkjit.interpreter.roles import Roles
    k = _stream_k(lowering="auto", BM=64, BN=64)
    torch.manual_seed(0)
    m, n, kk = shape
    a, b = torch.randn(m, kk).bfloat16(), torch.randn(kk, n).bfloat16()
    ref = torch.full((m, n), float("nan")).bfloat16()
    k(a, b, ref)
    exact = a.float() @ b.float()
    for seed in (0, 1, 2):
        c = torch.full((m, n), float("nan")).bfloat16()
        roles = Roles(k.ir, [a, b, c], seed, ctas)
        roles.run()
        sk = roles.stream_k
        assert len(sk.partials) > 0 and not any(sk.flags.values())  # stream-K ran; every flag reset
        assert not torch.isnan(c).any()
        assert torch.allclose(c.float(), ref.float(), rtol=2e-2, atol=5e-2)
        assert ((c.float() - exact).norm() / exact.norm()).item() < 1e-2


def test_a_schedule_missing_a_contribution_is_caught(monkeypatch):
    from tkjit.interpreter.roles import run_roles
    k = _stream_k(lowering="auto", BM=64, BN=64)
    torch.manual_seed(0)
    a, b = torch.randn(130, 320).bfloat16(), torch.randn(320, 300).bfloat16()
    ref = a.float() @ b.float()
    real = tail_split.contributors
    monkeypatch.setattr(tail_split, "contributors", lambda *args: real(*args)[1:])
    c = torch.full((130, 300), float("nan")).bfloat16()
    try:
        run_roles(k.ir, [a, b, c], seed=0, ctas=4)
    except Exception as e:   # a flag left set at the end is caught as such
        assert "flag is still set" in str(e)
        return
    assert not torch.allclose(c.float(), ref, rtol=2e-2, atol=5e-2)
