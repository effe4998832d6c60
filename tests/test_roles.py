"""The general lowering's schedule, run on the CPU (tkjit/interpreter/roles.py): each kernel's
producer and consumers as coroutines over the checked protocol, the IR placed between its steps
as the PTX emitter places it, TMA landings and role interleavings picked by a seeded scheduler.
Every schedule must give the plain interpreter's result bit for bit (split-K: to rounding, the
partials are added in another order); a schedule that releases a
stage before the wgmma reading it was waited for, or reads a product before its wait, must be
caught."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.interpreter.roles import ScheduleError, run_roles

from general_corpus import CASES

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SEEDS = (0, 1, 2)


def _same(case_outputs, mine, ref) -> bool:
    return all(torch.equal(mine[i].float().nan_to_num(7.0), ref[i].float().nan_to_num(7.0)) for i in case_outputs)


def _copy(args):
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_schedule_matches_the_interpreter(case):
    k = tkjit.compile(case.source, constants=case.constants or None, cache=False)
    torch.manual_seed(0)
    args = case.make(case.cpu_shape, "cpu")
    ref = _copy(args)
    k(*ref)
    for seed in SEEDS:
        mine = _copy(args)
        run_roles(k.ir, mine, seed=seed)
        assert _same(case.outputs, mine, ref), f"{case.name}: schedule {seed} differs from the interpreter"


ATTENTION = [("attention_nol", {"CAUSAL": True}), ("attention_softcap", {}), ("attention_window", {}), ("mlp", {}),
             ("attention", {"D": 64}), ("attention", {"D": 64, "CAUSAL": True}), ("attention", {"D": 128})]


@pytest.mark.parametrize("name,constants", ATTENTION,
                         ids=[n + "".join(f"-{k}{v}" for k, v in c.items()) for n, c in ATTENTION])
def test_attention_and_the_fused_mlp_schedules_match(name, constants):
    """Two products per trip, one with A in registers, a one-shot Q ring, a causal loop bound;
    the example with L through the general lowering (level 2 with three consumers at D = 64,
    level 1 with a 2-stage ring at D = 128)."""
    k = tkjit.load(EXAMPLES / f"{name}.tk", cache=False, constants=constants or None,
                   lowering="general" if name == "attention" else None)
    torch.manual_seed(0)
    if name == "mlp":
        m, d, f = 200, 128, 192
        args = [torch.randn(m, d).bfloat16(), (torch.randn(d, f) / 8).bfloat16(),
                (torch.randn(f, d) / 8).bfloat16(), torch.full((m, d), float("nan")).bfloat16()]
        outputs = (3,)
    else:
        b, h, hkv, n, d = 1, 2, 1, 300, constants.get("D", 128)
        q, kk, v = (torch.randn(b, x, n, d).bfloat16() for x in (h, hkv, hkv))
        args = [q, kk, v, torch.full((b, h, n, d), float("nan")).bfloat16(), d ** -0.5]
        if name == "attention":  # and L
            args.insert(4, torch.full((b, h, n), float("nan")))
        if name == "attention_softcap":
            args.append(20.0)
        if name == "attention_window":
            args.append(96)
        outputs = (3, 4) if name == "attention" else (3,)
    ref = _copy(args)
    k(*ref)
    for seed in SEEDS[:2]:
        mine = _copy(args)
        run_roles(k.ir, mine, seed=seed)
        assert _same(outputs, mine, ref), f"{name}: schedule {seed} differs"


def test_a_release_before_the_wait_is_caught(monkeypatch):
    """A consumer that releases its stage right after issuing the wgmma (before waiting for it)
    lets the producer refill the stage under it: some schedule reads the next trip's tiles. (The
    mbarrier pass's checker refuses that protocol at compile time too; here the schedule is
    swapped after the compile, to show the CPU run of the schedule sees it on its own.)"""
    from tkjit.passes import sync_protocol as sp
    original = sp.consumer_loop

    def early_release(plan, stages):
        r = plan.ring
        body = (sp.Wait(r, "full"), *[sp.Mma(reads) for reads in plan.mmas], sp.Release(r),
                sp.MmaWait(1), sp.Advance(r))
        return (sp.IfTrips(r, (sp.Loop(r, body), sp.MmaWait(0))),)

    case = CASES[0]
    k = tkjit.compile(case.source, cache=False)  # checked and scheduled with the real protocol
    torch.manual_seed(0)
    args = case.make({"M": 128, "N": 256, "K": 640}, "cpu")
    ref = _copy(args)
    k(*ref)
    monkeypatch.setattr(sp, "consumer_loop", early_release)
    caught = 0
    for seed in range(8):
        mine = _copy(args)
        try:
            run_roles(k.ir, mine, seed=seed)
        except ScheduleError:
            caught += 1
            continue
        caught += not _same(case.outputs, mine, ref)
    assert caught, "no schedule noticed the early release"
    assert original is not early_release


def test_reading_a_product_before_its_wait_is_caught(monkeypatch):
    """Drop the waits for the first of attention's two products (level 2: First(wait 0) and
    NotFirst(wait 1)): the softmax then reads S while its wgmma may still run."""
    from tkjit.passes import sync_protocol as sp
    original = sp.pipelined_loop

    def no_s_wait(plan):
        (ift,) = original(plan)
        loop = ift.body[0]
        body = tuple(st for st in loop.body
                     if not (isinstance(st, (sp.First, sp.NotFirst)) and st.body in ((sp.MmaWait(0),), (sp.MmaWait(1),))))
        return (sp.IfTrips(ift.ring, (sp.Loop(loop.ring, body), *ift.body[1:])),)

    # 128-key blocks: one ring of 3 stages, pipelined_loop's protocol (the D = 128 default, 176
    # keys in 2 stages, takes split rings: split_loop)
    from tkjit.passes import DEFAULT_PIPELINE
    one_tile = DEFAULT_PIPELINE.replace("grid,", "grid{overlap=-1},")  # 3 stages, one ring (persistent: 2, split)
    k = tkjit.load(EXAMPLES / "attention_nol.tk", constants={"BKV": 128}, cache=False, pipeline=one_tile)
    monkeypatch.setattr(sp, "pipelined_loop", no_s_wait)
    q, kk, v = (torch.randn(1, 1, 300, 128).bfloat16() for _ in range(3))
    with pytest.raises(ScheduleError, match="not waited for"):
        run_roles(k.ir, [q, kk, v, torch.empty(1, 1, 300, 128).bfloat16(), 0.1])


@pytest.mark.parametrize("constants,shape", [
    ({"SPLIT": 2, "BM": 64, "BN": 64}, (100, 130, 520)),     # ragged, 9 trips over 2
    ({"SPLIT": 4, "BM": 64, "BN": 64}, (70, 72, 320)),       # 5 trips over 4: 2, 2, 1, 0
])
def test_split_schedules_match_the_interpreter(constants, shape):
    """Every CTA of a cluster as coroutines, each over its share of the trips, meeting at the
    reduction; the sums are in another order than the plain loop's, so to rounding."""
    k = tkjit.compile((EXAMPLES / "gemm.tk").read_text(), filename="gemm.tk", constants=constants, cache=False)
    torch.manual_seed(0)
    m, n, kk = shape
    a, b = torch.randn(m, kk).bfloat16(), torch.randn(kk, n).bfloat16()
    ref = torch.full((m, n), float("nan")).bfloat16()
    k(a, b, ref)
    exact = a.float() @ b.float()
    for seed in (0, 1, 2):
        c = torch.full((m, n), float("nan")).bfloat16()
        run_roles(k.ir, [a, b, c], seed=seed)
        assert not torch.isnan(c).any()
        assert torch.allclose(c.float(), ref.float(), rtol=2e-2, atol=2e-2)
        assert ((c.float() - exact).norm() / exact.norm()).item() < 1e-2


def test_a_split_epilogue_schedule_matches_the_interpreter():
    from test_general_split import EPILOGUE
    k = tkjit.compile(EPILOGUE, constants={"BM": 64, "BN": 64}, cache=False)
    torch.manual_seed(1)
    a, b, bias = torch.randn(90, 330).bfloat16(), torch.randn(330, 72).bfloat16(), torch.randn(72)
    ref = torch.full((90, 72), float("nan")).bfloat16()
    k(a, b, bias, ref)
    c = torch.full((90, 72), float("nan")).bfloat16()
    run_roles(k.ir, [a, b, bias, c], seed=3)
    assert torch.allclose(c.float(), ref.float(), rtol=2e-2, atol=2e-2)
