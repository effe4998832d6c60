"""Split-K as a schedule option of the general sm_90a lowering (the block loop's ``split = S``):
a cluster of S CTAs per tile, CTA r running its share of the reduction loop, the partials added
through distributed shared memory over each CTA's drained ring (the protocol's ``ClusterReduce``
step, which the sync checker explores and the PTX lint accounts for), each CTA storing its part.
On the CPU: the PTX (ptxas, SASS, no spills), the protocol and its check (a reduction over a ring
still in use is caught), the refusals (what a split tile may do after its loop), and the CPU run
of the schedule (clusters of CTAs, ragged trips) against the plain interpreter."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.errors import NotAvailableError
from tkjit.interpreter.roles import run_roles

from test_general_lowering import sync_outside_the_protocol

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
GEMM = (EXAMPLES / "gemm.tk").read_text()

EPILOGUE = """
kernel split_epilogue<BM = 128, BN = 128, SPLIT = 2>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], bias: gl<f32>[N],
                                                    C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) schedule(grid, split = SPLIT) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / 64 {
      a: st<bf16>[BM, 64] = A.tile(m, k)
      b: st<bf16>[64, BN] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    bv: rv<f32>[BN] = bias.tile(n)
    C.tile(m, n) = cvt<bf16>(relu(add_col(acc, bv)))
  }
}
"""


def _split_gemm(**constants):
    return tkjit.compile(GEMM, filename="gemm.tk", constants={"SPLIT": 2, **constants}, lowering="general",
                         require_hopper=True, cache=False)


def test_split_k_takes_the_general_lowering():
    k = _split_gemm()
    try:
        sass = k.asm["sass"]
    except NotAvailableError as e:
        pytest.skip(str(e))
    ptx, md = k.asm["ptx"], k.metadata
    assert md["lowering"] == "general" and md["gemm"]["split"] == 2
    assert md["grid"] == [["mul", ["mul", ["cdiv", ["dim", "M"], 128], ["cdiv", ["dim", "N"], 256]], 2]]
    assert ".reqnctapercluster 2, 1, 1" in ptx and "%cluster_ctarank" in ptx and "%clusterid.x" in ptx
    assert ptx.count("barrier.cluster.arrive") == 2 and "st.shared::cluster.v4.f32" in ptx
    assert "split-K over a cluster of 2" in md["protocol"] and "one tile per CTA" in md["protocol"]
    assert "split: 2" in [d.decision for d in k.decisions.for_pass("codegen")]
    assert re.search(r"\bHGMMA", sass) and "UTMALDG" in sass
    assert not re.search(r"\b(LDL|STL)\b", sass)
    assert not [m for m in md["ptxas"]["messages"] if m["level"] == "warning"]
    assert "split-K over a cluster of 2 CTAs" in k.explain()


@pytest.mark.parametrize("constants", [{}, {"BM": 64, "BN": 64}, {"BN": 128, "SPLIT": 4}])
def test_every_cluster_barrier_is_a_protocol_step(constants):
    ptx = _split_gemm(**constants).asm["ptx"]
    stray, epilogue = sync_outside_the_protocol(ptx)
    assert stray == [] and epilogue == 0   # registers to global: nothing staged


def test_split_k_without_a_split_keeps_the_protocol():
    """SPLIT = 1 is the plain persistent GEMM: no cluster, no ClusterReduce."""
    k = tkjit.compile(GEMM, filename="gemm.tk", lowering="general", cache=False)
    assert ".reqnctapercluster" not in k.asm["ptx"]
    assert "split-K" not in k.metadata["protocol"] and k.metadata["gemm"]["split"] == 1


def test_the_checker_catches_a_reduction_over_a_ring_still_in_use():
    """ClusterReduce writes the peers' partials over the ring: moved into the loop (before the
    last stage is drained and released) the checker finds the overwrite."""
    from tkjit.passes import sync_protocol as sp
    from tkjit.passes.mbarrier import schedule_of
    from tkjit.passes.sync_check import find_violation
    proto = schedule_of(_split_gemm().ir).protocol
    assert find_violation(proto, (5,))[0] is None
    (tiles,) = proto.consumer
    (if_trips, reduce) = tiles.body
    assert isinstance(reduce, sp.ClusterReduce)
    loop, *drain = if_trips.body
    early = sp.IfTrips(if_trips.ring, (loop, reduce, *drain))
    broken = sp.Protocol(proto.kernel, proto.consumers, proto.persistent, proto.rings, proto.producer,
                         (sp.Tiles((early,)),))
    v, _ = find_violation(broken, (5,))
    assert v is not None and v.kind == "overwrite", v


REFUSED = [
    ("row_sum(acc)", "cv<f32>[BM] = row_sum(acc)\n    C.tile(m, n) = cvt<bf16>(sub_row(acc, s))",
     "only elementwise ops may read it"),
    ("C += A·B", None, "must start from zeros()"),
]


@pytest.mark.parametrize("what,tail,why", REFUSED, ids=[r[0] for r in REFUSED])
def test_a_split_tile_that_mixes_parts_is_refused_at_the_op(what, tail, why):
    src = GEMM
    if tail is not None:
        src = src.replace("C.tile(m, n) = cvt<bf16>(acc)", "s: " + tail)
    else:
        src = src.replace("acc: rt<f32>[BM, BN] = zeros()", "acc: rt<f32>[BM, BN] = C.tile(m, n)")
    with pytest.raises(NotAvailableError, match=why):
        tkjit.compile(src, filename="gemm.tk", constants={"SPLIT": 2}, lowering="general",
                      require_hopper=True, cache=False).asm["ptx"]


@pytest.mark.parametrize("constants,shape", [
    ({"SPLIT": 2, "BM": 64, "BN": 64}, (100, 130, 520)),     # ragged, 9 trips over 2
    ({"SPLIT": 4, "BM": 64, "BN": 64}, (70, 72, 320)),       # 5 trips over 4: 2, 2, 1, 0
])
def test_split_schedules_match_the_interpreter(constants, shape):
    """Every CTA of a cluster as coroutines, each over its share of the trips, meeting at the
    reduction; the sums are in another order than the plain loop's, so to rounding."""
    k = tkjit.compile(GEMM, filename="gemm.tk", constants=constants, cache=False)
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
    k = tkjit.compile(EPILOGUE, constants={"BM": 64, "BN": 64}, cache=False)
    torch.manual_seed(1)
    a, b, bias = torch.randn(90, 330).bfloat16(), torch.randn(330, 72).bfloat16(), torch.randn(72)
    ref = torch.full((90, 72), float("nan")).bfloat16()
    k(a, b, bias, ref)
    c = torch.full((90, 72), float("nan")).bfloat16()
    run_roles(k.ir, [a, b, bias, c], seed=3)
    assert torch.allclose(c.float(), ref.float(), rtol=2e-2, atol=2e-2)


def test_a_split_epilogue_takes_the_general_lowering():
    k = tkjit.compile(EPILOGUE, lowering="general", require_hopper=True, cache=False)
    ptx = k.asm["ptx"]
    assert k.metadata["lowering"] == "general" and ".reqnctapercluster 2" in ptx
    assert sync_outside_the_protocol(ptx)[0] == []
