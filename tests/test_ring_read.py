"""A ring tile read into registers (``xr: rt<f32>[BM, BK] = x`` of a tile the K loop streams
through its ring): the trip's ``Read`` step (sync_protocol.place_read), after the stage's full
wait and before its release; the checker (a register read is checked as a read of the stage, done
at once), the async-schedule IR (``ring_read``), the emitter (codegen/hopper/lower_tile_read.py)
and the roles executor all take it. Until session 18 such a kernel fell to mma.sync at ~0.4x."""
from __future__ import annotations

import re
import warnings

import pytest
import torch

import tkjit
from tkjit.ir.parser import parse_kernel
from tkjit.options import CompileOptions
from tkjit.passes import PassContext, PassManager
from tkjit.passes.sync_check import SyncError, check_protocol, find_violation
from tkjit.passes.sync_protocol import (Advance, IfTrips, Load, Loop, LoopPlan, Mma, MmaWait, NotFirst, Read,
                                        Release, Ring, Tiles, Wait, all_steps, standard_protocol)

from unseen_corpus import BY_NAME

K = "k"


def _ring(consumers: int = 2, stages: int = 4) -> Ring:
    return Ring(K, stages, (Load("x", 16384), Load("w", 16384)), 32768, consumers)


def _consumer(plan: LoopPlan, consumers: int = 2, stages: int = 4):
    return standard_protocol("t", consumers, True, (_ring(consumers, stages),), (plan,)).consumer


def _trip(steps) -> tuple:
    """The trip of the first ring loop of a consumer program."""
    return next(st for st in all_steps(steps) if isinstance(st, Loop)).body


# -- where the Read goes in a trip ----------------------------------------------------------------
def test_a_read_before_the_product_comes_after_the_full_wait():
    trip = _trip(_consumer(LoopPlan(K, ((K,),), copies=((0, (K,)),))))
    assert trip == (Wait(K, "full"), Read((K,)), Mma((K,)), MmaWait(1), NotFirst((Release(K, "prev"),)),
                    Advance(K))


def test_a_read_after_the_last_product_comes_before_its_release():
    """In flight: after the product, before wait_group 1 and the previous stage's release (which
    come after every op of the trip); drained: after the wait_group 0 that stays with the product
    (the ops around the copy may read its result), before the stage's release."""
    trip = _trip(_consumer(LoopPlan(K, ((K,),), copies=((1, (K,)),))))
    assert trip.index(Read((K,))) == trip.index(Mma((K,))) + 1
    drained = _trip(_consumer(LoopPlan(K, ((K,),), in_flight=False, copies=((1, (K,)),))))
    assert drained == (Wait(K, "full"), Mma((K,)), MmaWait(0), Read((K,)), Release(K), Advance(K))


def test_a_trip_that_only_reads_its_stage_into_registers():
    trip = _trip(_consumer(LoopPlan(K, (), copies=((0, (K,)), (1, (K,))))))
    assert trip == (Wait(K, "full"), Read((K,)), Read((K,)), Release(K), Advance(K))


def test_without_copies_the_trip_is_unchanged():
    plain = _consumer(LoopPlan(K, ((K,), (K,))))
    assert not any(isinstance(st, Read) for st in all_steps(plain))


# -- the checker ------------------------------------------------------------------------------------
@pytest.mark.parametrize("plan", [LoopPlan(K, ((K,),), copies=((0, (K,)),)),
                                  LoopPlan(K, ((K,),), copies=((1, (K,)),)),
                                  LoopPlan(K, ((K,),), in_flight=False, copies=((1, (K,)),)),
                                  LoopPlan(K, (), copies=((0, (K,)),))], ids=["before", "after", "drained", "only"])
def test_the_protocols_with_reads_pass_the_checker(plan):
    proto = standard_protocol("t", 2, True, (_ring(),), (plan,))
    check_protocol(proto)


def _broken(trip):
    good = standard_protocol("t", 2, True, (_ring(),), (LoopPlan(K, ((K,),), in_flight=False),))
    return good.__class__(**{**good.__dict__, "consumer": (Tiles((IfTrips(K, (Loop(K, trip),)),)),)})


def test_a_read_after_the_release_is_caught():
    """The copy after the stage's release: the producer may already refill the stage."""
    proto = _broken((Wait(K, "full"), Mma((K,)), MmaWait(0), Release(K), Read((K,)), Advance(K)))
    v, _ = find_violation(proto, (1,))
    assert v is not None and v.kind == "release-before-read"
    assert "register read (ld.shared) reads stage k.0 after releasing fill 1" in v.message(proto)
    with pytest.raises(SyncError):
        check_protocol(proto)


def test_a_read_before_the_full_wait_is_caught():
    proto = _broken((Read((K,)), Wait(K, "full"), Mma((K,)), MmaWait(0), Release(K), Advance(K)))
    v, _ = find_violation(proto, (1,))
    assert v is not None and v.kind == "early-read"
    assert "register read (ld.shared) read stage k.0 without waiting on full[k.0]" in v.message(proto)


# -- the compile: IR, check, emitter ----------------------------------------------------------------
def _rms_ir() -> str:
    return tkjit.compile(BY_NAME["rms_linear_read"].source, cache=False).asm["after:async-schedule"]


def test_the_read_is_a_step_of_the_ir_and_of_the_protocol():
    text = _rms_ir()
    trip = text[text.index('ring_wait {ring = "k", bar = "full"}'):text.index("yield %ss.3")]
    assert trip.index("ring_read {rings = \"k\", anchored = true};\n        %xr = copy %x") < trip.index("mma_issue")
    k = tkjit.compile(BY_NAME["rms_linear_read"].source, cache=False)
    proto = str(k.protocol)
    assert "wait full[k.s] parity ph\n        read k.s into registers (ld.shared)\n        mma reading k.s" in proto
    explain = str(k.explain())
    assert "tile read: %x at <string>:9:7: ldmatrix.x4 from ring k's stage" in explain
    assert "(128B swizzle; 4 ldmatrix.x4 a thread), kept packed (read only elementwise)" in explain  # (256 wide: cooperative, 64 rows a consumer)
    assert "the consumers also read a tile of each stage into registers (1 ld.shared step(s) a trip" in explain


def test_a_full_wait_moved_below_the_read_in_the_ir_text_is_caught():
    """The IR edited so the trip reads its stage into registers before waiting for it (the wait
    moved right after the copy): the compile-time check names the register read."""
    text = _rms_ir()
    wait = '        ring_wait {ring = "k", bar = "full"};\n'
    copy = "        %xr = copy %x : rt<f32, layout=wgmma>[128, 64]\n"
    assert text.count(wait) == 1 and text.count(copy) == 1
    broken = text.replace(wait, "").replace(copy, copy + wait)
    with pytest.raises(SyncError) as err:
        PassManager("async-schedule").run(parse_kernel(broken), PassContext(CompileOptions()))
    msg = str(err.value)
    assert "early-read in ring k" in msg and "register read (ld.shared) read stage k.0 without waiting" in msg


def test_the_ptx_reads_the_stage_between_the_wait_and_the_release():
    from tkjit.passes import default_pipeline  # (at the kernel's 128 columns: ping-pong, whole rows)
    ptx = tkjit.compile(BY_NAME["rms_linear_read"].source, cache=False,
                        pipeline=default_pipeline("sm_90a").replace("tile-split", "tile-split{widen=off}")).asm["ptx"]
    trip = ptx[ptx.index("// step: wait full[k.s] parity ph"):]
    trip = trip[:trip.index("// step: advance k")]
    read = trip.index("// step: read k.s into registers (ld.shared)")
    assert read < trip.index("wgmma.mma_async") < trip.index("// step: release: arrive empty[k.prev]")
    # 128 x 64 bf16 over 128 threads: 32 pairs a thread, 4 an ldmatrix.x4, and no pair loads
    assert len(re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16", trip)) == 8
    assert "ld.shared.b32" not in trip


def test_a_copy_in_an_if_of_the_loop_is_refused_by_name():
    src = BY_NAME["rms_linear_read"].source.replace(
        "      xr: rt<f32>[BM, BK] = x\n",
        "      xr: rt<f32>[BM, BK] = zeros()\n      if k >= 0 {\n        xq: rt<f32>[BM, BK] = x\n"
        "        xr = xq\n      }\n")
    with pytest.raises(tkjit.NotAvailableError, match=r"cannot take 'copy' at <string>:11:9.*loop's body itself"):
        tkjit.compile(src, cache=False, require_hopper=True).asm["ptx"]


ATTN_KSQ = """
@consumers(2)
kernel attn_ksq<D = 64, BKV = 128, BQ = 128>(Q: gl<bf16>[B, H, N, D], K: gl<bf16>[B, H, N, D],
                                          V: gl<bf16>[B, H, N, D], O: gl<bf16>[B, H, N, D],
                                          KS: gl<f32>[B, H, N], scale: f32) {
  for (b, h, i) in blocks(B, H, N / BQ) {
    q: st<bf16>[BQ, D] = Q.tile(b, h, i, 0)
    o: rt<f32>[BQ, D] = zeros()
    mx: cv<f32>[BQ] = fill(-inf)
    l: cv<f32>[BQ] = zeros()
    ks: cv<f32>[BKV] = zeros()
    for j in 0 .. N / BKV {
      k: st<bf16>[BKV, D] = K.tile(b, h, j, 0)
      v: st<bf16>[BKV, D] = V.tile(b, h, j, 0)
      kr: rt<f32>[BKV, D] = k
      ks = ks + row_sum(kr * kr)
      s = mma_ABt(q, k) * (scale * LOG2E)
      mx_new = max(mx, row_max(s))
      p = exp2(sub_row(s, mx_new))
      alpha = exp2(mx - mx_new)
      l = l * alpha + row_sum(p)
      o = mma_AB(cvt<bf16>(p), v, mul_row(o, alpha))
      mx = mx_new
    }
    O.tile(b, h, i, 0) = cvt<bf16>(div_row(o, l))
    KS.tile(b, h, i) = ks
  }
}
"""
"""Attention whose trip also reads its key tile into registers (kr = k): the keys' squared norms
summed over the key blocks, row r of every block, stored per query block (KS)."""


ATTN_KSQ_AFTER = ATTN_KSQ.replace(
    "      kr: rt<f32>[BKV, D] = k\n      ks = ks + row_sum(kr * kr)\n      s = mma_ABt(q, k) * (scale * LOG2E)\n",
    "      s = mma_ABt(q, k) * (scale * LOG2E)\n      kr: rt<f32>[BKV, D] = k\n      ks = ks + row_sum(kr * kr)\n")
"""The same with the key tile read after the first product (with the trip's register work)."""


@pytest.mark.parametrize("src", [ATTN_KSQ, ATTN_KSQ_AFTER], ids=["before", "after"])
def test_level_2_takes_a_trip_that_reads_a_ring_tile(src):
    """Attention whose trip also reads its key tile into registers: level 2 (the second product
    held a trip) with the read before the first product or in the register work, the stage held
    until the next trip's release either way; right on the interpreter and the roles executor."""
    assert src.count("kr: rt<f32>") == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        k = tkjit.compile(src, cache=False, require_hopper=True)
        k.asm["ptx"]
    assert k.metadata["lowering"] == "general"
    text = k.asm["after:async-schedule"]
    assert "mma_hold" in text and "ring_read" in text
    trip = str(k.protocol).split("consumer (")[1].split("loop j {")[1].split("advance j")[0]
    read, first = trip.index("read j.s into registers"), trip.index("mma reading q.s, j.s")
    assert (read < first) == (src is ATTN_KSQ)
    assert read < trip.index("release: arrive empty[j.prev]")
    from tkjit.interpreter.roles import run_roles
    torch.manual_seed(0)
    b, h, n = 1, 2, 256
    q, kk, v = (torch.randn(b, h, n, 64).bfloat16() for _ in range(3))
    ref = [q, kk, v, torch.full((b, h, n, 64), float("nan")).bfloat16(), torch.full((b, h, n), float("nan")), 0.125]
    mine = [x.clone() if isinstance(x, torch.Tensor) else x for x in ref]
    k(*ref)
    run_roles(k.ir, mine, seed=1)
    for i in (3, 4):
        assert torch.equal(mine[i].float().nan_to_num(7.0), ref[i].float().nan_to_num(7.0))
    want = torch.softmax((q.float() @ kk.float().transpose(-1, -2)) * 0.125, -1) @ v.float()
    assert ((ref[3].float() - want).norm() / want.norm()).item() < 2e-2
    ks = (kk.float() ** 2).sum(-1).reshape(b, h, n // 128, 128).sum(2).repeat(1, 1, n // 128)
    assert torch.allclose(ref[4], ks, rtol=1e-4)


# -- the PTX on the simulator -----------------------------------------------------------------------
RMS_SS = BY_NAME["rms_linear_read"].source.replace(
    "Y: gl<bf16>[M, N], eps: f32)", "Y: gl<bf16>[M, N], S: gl<f32>[M], eps: f32)").replace(
    "    Y.tile(m, n) = ", "    S.tile(m) = ss\n    Y.tile(m, n) = ")


RMS_SS_F32 = RMS_SS.replace("X: gl<bf16>[M, K]", "X: gl<f32>[M, K]").replace(
    "x: st<bf16>[BM, BK]", "x: st<f32>[BM, BK]").replace("mma_AB(x, w, acc)", "mma_AB(cvt<bf16>(xr), w, acc)")
"""The same with an f32 X: its ring tile (256-byte rows: two 128-byte swizzle panels) read with
ld.shared.v2.f32, and the product's A made from it in registers (RS)."""
RMS_SS_FP8 = RMS_SS_F32.replace("X: gl<f32>[M, K]", "X: gl<e4m3>[M, K]").replace("x: st<f32>[BM, BK]",
                                                                                   "x: st<e4m3>[BM, BK]")
"""The same with an e4m3 X (64-byte rows, 64-byte swizzle): each pair one ld.shared.b16 widened
by cvt.rn.f16x2.e4m3x2."""


@pytest.mark.parametrize("src", [RMS_SS, RMS_SS_F32, RMS_SS_FP8], ids=["bf16", "f32", "e4m3"])
@pytest.mark.parametrize("m, n, kk, sms", [(200, 256, 576, 2), (128, 256, 128, 1)])
def test_the_ring_read_on_the_ptx_simulator(monkeypatch, src, m, n, kk, sms):
    """rms_linear_read with its rows' sum of squares stored too (S), its PTX on the simulator with
    the wgmmas skipped (the sums come from the register reads of the ring's stages alone): 9 trips
    over the ring's stages (it wraps), consumers on 2 tiles a CTA, ragged M; no deadlock, S right,
    Y the epilogue of a zero accumulator."""
    import ptxsim
    from simkit import simulate
    monkeypatch.setattr(ptxsim, "SKIP_WGMMA", True)
    k = tkjit.compile(src, cache=False, require_hopper=True)
    assert k.metadata["lowering"] == "general"
    torch.manual_seed(0)
    x, w = torch.randn(m, kk).bfloat16(), torch.randn(kk, n).bfloat16()
    if src is RMS_SS_F32:
        x = torch.randn(m, kk)
    elif src is RMS_SS_FP8:
        x = torch.randn(m, kk).to(torch.float8_e4m3fn)
    args = [x, w, torch.empty(m, n).bfloat16(), torch.empty(m), 1e-5]
    y, s = simulate(k._result.tkir, args, [2, 3], ptx_meta=(k.asm["ptx"], dict(k.metadata)), num_sms=sms)
    want = (x.float() ** 2).sum(1)
    assert torch.allclose(s, want, rtol=1e-5, atol=1e-4), (s - want).abs().max()
    assert torch.equal(y.float(), torch.zeros(m, n))


@pytest.mark.parametrize("src", [ATTN_KSQ, ATTN_KSQ_AFTER], ids=["before", "after"])
def test_level_2_ring_read_on_the_ptx_simulator(monkeypatch, src):
    """The level-2 attention reading its key tile, its PTX on the simulator with the wgmmas
    skipped: KS comes from the register reads of the ring's stages alone (5 key blocks over the
    ring's stages, the peeled first trip and the later ones), O is 0 (every score 0, o never
    accumulated); no deadlock."""
    import ptxsim
    from simkit import simulate
    monkeypatch.setattr(ptxsim, "SKIP_WGMMA", True)
    k = tkjit.compile(src, cache=False, require_hopper=True)
    assert "mma_hold" in k.asm["after:async-schedule"]
    torch.manual_seed(0)
    b, h, n = 1, 1, 640
    q, kk, v = (torch.randn(b, h, n, 64).bfloat16() for _ in range(3))
    args = [q, kk, v, torch.empty(b, h, n, 64).bfloat16(), torch.empty(b, h, n), 0.125]
    o, ks = simulate(k._result.tkir, args, [3, 4], ptx_meta=(k.asm["ptx"], dict(k.metadata)))
    want = (kk.float() ** 2).sum(-1).view(b, h, n // 128, 128).sum(2).repeat(1, 1, n // 128)
    assert torch.allclose(ks, want, rtol=1e-5), (ks - want).abs().max()
    assert torch.equal(o.float(), torch.zeros(b, h, n, 64))


@pytest.mark.parametrize("name", ["rms_linear_read", "gemm_dequant_a", "ssd_copy", "gemm_f32a", "gemm_fp8a",
                                  "attn_ksq", "attn_ksq_after"])
def test_every_barrier_and_wait_is_a_protocol_step_with_ring_reads(name):
    """The PTX lint (tests/test_general_lowering.py): no synchronization line outside a protocol
    step, and the ``// step:`` marks exactly the steps of the async-schedule IR, ``Read`` included."""
    from test_general_lowering import protocol_lint
    src = {"attn_ksq": ATTN_KSQ, "attn_ksq_after": ATTN_KSQ_AFTER}.get(name) or BY_NAME[name].source
    k = tkjit.compile(src, require_hopper=True, cache=False)
    assert "// step: read " in k.asm["ptx"]
    assert protocol_lint(k) == []
