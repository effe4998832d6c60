"""fuse-elementwise (tkjit/passes/fuse_elementwise.py): elementwise temporaries and index tiles
computed element by element at their users, and the register count that follows the same rule
(liveness.deferred).

- liveness: a deferred tile holds nothing and what it reads lives until its users (the counts of
  the ALiBi kernel of issue 17 at each level, and a small kernel counted by hand);
- the emitters: a deferred tile's elements are emitted inside its user, and the result is bit for
  bit the undeferred one (the register-tile backend's PTX on the PTX simulator: the emitters are
  the ones the general lowering's consumers run);
- the pass: auto defers only where it changes the fit, and a kernel that fits keeps its PTX;
- the ALiBi kernels take the wgmma path (tests/test_unseen_corpus.py checks SASS, the interpreter
  and the roles schedule; tests/gpu/test_alibi_gpu.py the GPU against float64 torch).
IR in/out: tests/ir/fuse-elementwise/."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.ir.parser import parse_ir
from tkjit.passes.fuse_elementwise import apply, plans
from tkjit.passes.liveness import consumer_pressure

from unseen_corpus import BY_NAME

IR = Path(__file__).parent / "ir" / "fuse-elementwise"


def _kernel(name: str):
    return parse_ir((IR / name).read_text(), name)[0]


def test_the_alibi_kernel_counts_what_each_level_holds():
    """Holding every tile: 228 fragment registers at the bias's multiply (the distance tile, the
    scaled scores and the bias, each 64, beside the output's 32). Chains deferred: 164 (the scores'
    accumulator, the distance tile, the output). Index tiles recomputed too: 104 (the exponentials
    and the output)."""
    k = _kernel("chains.tkir")
    levels = plans(k)
    peaks = []
    for _, plan in levels:
        apply(k, plan)
        peaks.append(consumer_pressure(k, 2).peak)
    assert peaks == [228, 164, 104]
    apply(k, levels[1][1])
    live = {v.hint: n for v, n in consumer_pressure(k, 2).live}
    assert live.get("dist") == 64 and live.get("o.2") == 32


def test_hoisted_index_tiles_live_across_the_loop_unless_recomputed():
    """qi and kj made before the key loop live through all of it (388 registers with 2 consumers
    need 356 of fragments); chains alone do not bring them under the 240 a consumer gets, the
    recomputed index tiles do."""
    k = _kernel("remat.tkir")
    levels = plans(k)
    peaks = []
    for _, plan in levels:
        apply(k, plan)
        peaks.append(consumer_pressure(k, 2).peak)
    assert peaks[0] == 356 and peaks[1] > 208 and peaks[2] == 104


SMALL = """
kernel @k(%X: gl<f32>[M, 64], %Y: gl<f32>[M, 64], %W: gl<f32>[M, 64]) {
  %M = dim {name = "M"} : i32
  %c64 = const {value = 64} : i32
  %0 = cdiv %M, %c64 : i32
  blocks %0 {
  ^(%i: i32):
    %c0 = const {value = 0} : i32
    %x = load %X, %i, %c0 : rt<f32>[64, 64]
    %e = exp %x : rt<f32>[64, 64]
    %y = load %Y, %i, %c0 : rt<f32>[64, 64]
    %z = add %e, %y : rt<f32>[64, 64]
    store %Y, %z, %i, %c0
    store %W, %x, %i, %c0
  }
}
"""


def test_a_deferred_tile_holds_nothing_and_keeps_what_it_reads_until_its_user():
    """64 x 64 f32 tiles are 32 registers a thread of one consumer. Held, %x, %e and %y are live at
    the add (96); with %e deferred into the add, %x and %y (64), and %x's range is unchanged."""
    k = parse_ir(SMALL, "small")[0]
    assert consumer_pressure(k, 1).peak == 96
    e = next(op for op in k.walk() if op.results and op.result.hint == "e")
    e.attrs["fuse"] = "chain"
    p = consumer_pressure(k, 1)
    assert p.peak == 64 and sorted(v.hint for v, _ in p.live) == ["x", "y"]


EW = """
kernel ew<BM = 32, BN = 64>(X: gl<f32>[M, N], Y: gl<f32>[M, N], s: f32) {
  for (m, n) in blocks(M / BM, N / BN) {
    x: rt<f32>[BM, BN] = X.tile(m, n)
    r: rt<f32>[BM, BN] = row_index()
    c: rt<f32>[BM, BN] = col_index()
    d = (c + n * BN) - (r + m * BM)
    t = exp(x * s - d * 0.01)
    u = sub_row(t, row_max(x)) / 2.0
    Y.tile(m, n) = select(d > 0, 0.0, div_row(u, row_sum(x)))
  }
}
"""


def _simulated(source, make, outputs, level, shape_args):
    from simkit import lower, simulate
    from tkjit.codegen import emit_ptx
    k = lower(source)
    name, plan = plans(k)[level]
    apply(k, plan)
    torch.manual_seed(0)
    args = make(*shape_args)
    ptx = emit_ptx(k)[0]
    return simulate(k, args, outputs), ptx, plan, args


@pytest.mark.parametrize("level", [1, 2])
def test_deferred_elements_give_the_undeferred_result_bit_for_bit(level):
    """Maps, scalar and tile arithmetic (a division by a scalar), row broadcasts (a division by a
    vector), cmp_select and index tiles, deferred: the PTX computes each in its user's loop over
    the fragment (no instruction of the deferred ops stands before their user's), and the outputs
    are the held version's bit for bit, at a ragged shape."""
    make = lambda: [torch.randn(70, 100), torch.empty(70, 100), 0.5]  # noqa: E731
    (held,), ptx0, _, args = _simulated(EW, make, [1], 0, ())
    (fused,), ptx, plan, _ = _simulated(EW, make, [1], level, ())
    assert plan and ptx != ptx0
    assert torch.equal(held, fused)
    want = torch.full((70, 100), float("nan"))
    tkjit.compile(EW, cache=False)(args[0], want, 0.5)  # the interpreter
    assert torch.allclose(fused, want, rtol=1e-5, atol=1e-6)


def test_the_alibi_kernel_deferred_is_the_held_kernel_bit_for_bit_on_the_simulator():
    """The hoisted ALiBi kernel through the register-tile backend (mma.sync), every chain and
    index tile deferred: the simulated output equals the held kernel's bit for bit (N = 200)."""
    case = BY_NAME["attn_alibi_hoisted"]
    make = lambda: case.make({"B": 1, "H": 1, "N": 200}, "cpu")  # noqa: E731
    (held,), _, _, args = _simulated(case.source, make, [3], 0, ())
    (fused,), _, plan, _ = _simulated(case.source, make, [3], 2, ())
    assert len(plan) >= 8 and torch.equal(held, fused)
    ref = case.reference(args)[0]
    assert ((fused.float() - ref).norm() / ref.norm()).item() < 1e-2


def _section(ptx: str, op: str) -> str:
    """The PTX of the first ``// <op> at`` section (up to the next comment line)."""
    start = ptx.index(f"// {op} at")
    end = ptx.index("\n  //", start + 1)
    return ptx[start:end]


def test_the_general_lowering_emits_the_chain_inside_its_user():
    """attn_alibi128 on the wgmma path: the scale, the bias and their sum are emitted element by
    element inside the cmp_select (mul, mul, add, setp, selp per element), not as tiles before it."""
    k = tkjit.compile(BY_NAME["attn_alibi128"].source, cache=False)
    assert k.metadata["backend"] == "wgmma" and k.metadata["lowering"] == "general"
    sel = _section(k.asm["ptx"], "cmp_select")
    ops = re.findall(r"^\s*([a-z]+)\.", sel, re.M)
    assert ops[:5] == ["mul", "mul", "add", "setp", "selp"] and ops[5:10] == ops[:5]
    assert ops.count("selp") == 64 and ops.count("mul") == 128


def test_auto_leaves_a_kernel_that_fits_alone():
    """A kernel that fits with every tile held gets no fuse attribute and no decision: its code is
    what it was (tests/ir/fuse-elementwise/fits.tkir; the PTX of every example and corpus kernel
    that fit before is unchanged: see the branch's report)."""
    k = tkjit.compile(BY_NAME["gemm_rowscale_bias"].source, cache=False)
    text = str(k.explain())
    assert "fuse-elementwise\n  @" not in text and "fuse = " not in k.asm["tkir"] + str(k.async_ir)


def test_the_decision_is_logged_with_the_counts():
    k = tkjit.compile(BY_NAME["attn_alibi"].source, cache=False)
    text = str(k.explain())
    assert ("holding every tile no consumer split fits (260 registers needed > 160 with 3); deferring the chains "
            "and index tiles, 3 consumer(s) need 136 registers") in text
    assert "1 producer + 3 consumer warpgroups" in text
    assert "%dist: recomputed element by element at each of its uses" in text


def test_off_gives_the_counts_of_before():
    """fuse-elementwise{mode=off} in a pipeline of one's own: warp-spec refuses the kernel with the
    counts it had before the pass existed (the default pipeline would fall back to the register-tile
    backend with this message as its warning)."""
    from tkjit.errors import PassError
    from tkjit.passes import DEFAULT_PIPELINE
    with pytest.raises(PassError, match="2: 260 registers needed > 240.*peak is 228"):
        tkjit.compile(BY_NAME["attn_alibi128"].source, cache=False,
                      pipeline=DEFAULT_PIPELINE.replace("fuse-elementwise", "fuse-elementwise{mode=off}"))


ACC_FROM_INDICES = """
kernel t<BM = 64, BN = 64, BK = 64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<f32>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) {
    r: rt<f32>[BM, BN] = row_index()
    x = r * 0.5
    y = x + 1.0
    a: st<bf16>[BM, BK] = A.tile(m, 0)
    b: st<bf16>[BK, BN] = B.tile(0, n)
    acc = mma_AB(a, b, x)
    C.tile(m, n) = acc * y
  }
}
"""


def test_a_tile_a_product_reads_is_not_recomputed_from():
    """``x`` is made from an index tile, but the product accumulates into its registers in place:
    ``y = x + 1.0``, read after the product, must be computed where it stands (recomputed at its
    use it would read the product's sum), so neither is deferred; the index tile, read by ``x``
    only, is."""
    from simkit import lower
    k = lower(ACC_FROM_INDICES)
    plan = plans(k)[2][1]
    assert sorted((op.NAME, how) for op, how in plan.items()) == [("iota", "remat")]


def _general_on_the_simulator(monkeypatch, bn: int, mode: str | None):
    """gemm_index_epilogue through the general lowering (fuse-elementwise in ``mode``, None: the
    default pipeline), on the PTX simulator with its wgmmas skipped (the accumulator stays zero):
    the epilogue of zero, element by element as the consumers emitted it."""
    import ptxsim
    from simkit import simulate
    from tkjit.passes import DEFAULT_PIPELINE
    monkeypatch.setattr(ptxsim, "SKIP_WGMMA", True)
    pipeline = DEFAULT_PIPELINE.replace("fuse-elementwise", f"fuse-elementwise{{mode={mode}}}") if mode else None
    k = tkjit.compile(BY_NAME["gemm_index_epilogue"].source, constants={"BN": bn}, pipeline=pipeline,
                      lowering="general", cache=False)
    torch.manual_seed(0)
    m, n = 200, 150
    args = [torch.randn(m, 64).bfloat16(), torch.randn(64, n).bfloat16(), torch.randn(m, n), torch.empty(m, n), 0.5]
    (got,) = simulate(k._result.tkir, args, [3], ptx_meta=(k.asm["ptx"], dict(k.metadata)))
    d = torch.arange(n)[None, :].float() - torch.arange(m)[:, None].float()
    want = torch.where(d > 0, torch.exp(args[2] * 0.5 - d * 0.01), d * 0.001)
    return k, got, want


def test_the_general_lowering_with_deferred_tiles_on_the_simulator(monkeypatch):
    """The wgmma path's consumers, deferred tiles and all (mode=all at BN = 64; auto at BN = 128,
    where held tiles need 288 registers and the chains make it fit), give the held kernel's
    epilogue bit for bit (BN = 64, mode=off), within f32 rounding of torch."""
    _, held, want = _general_on_the_simulator(monkeypatch, 64, "off")
    k_all, deferred, _ = _general_on_the_simulator(monkeypatch, 64, "all")
    k_auto, fit, _ = _general_on_the_simulator(monkeypatch, 128, None)
    assert "index tile(s) recomputed" in str(k_all.explain())
    assert "holding every tile no consumer split fits (288 registers needed > 240 with 2)" in str(k_auto.explain())
    assert k_auto.metadata["lowering"] == "general" and k_auto.ir.attrs["consumers"] == 2
    assert not held.isnan().any()
    assert torch.equal(held, deferred) and torch.equal(held, fit)
    assert torch.allclose(held, want, rtol=1e-6, atol=1e-6)
