"""Split-K as a schedule option of the general sm_90a lowering (the block loop's ``split = S``):
a cluster of S CTAs per tile, CTA r running its share of the reduction loop, the partials added
through distributed shared memory over each CTA's drained ring (the protocol's ``ClusterReduce``
step, which the sync checker explores and the PTX lint accounts for), each CTA storing its part.
On the CPU: the PTX (ptxas, SASS, no spills), the protocol and its check (a reduction over a ring
still in use is caught), the refusals (what a split tile may do after its loop), and the CPU run
of the schedule (clusters of CTAs, ragged trips) against the plain interpreter is in
tests/test_roles.py."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import tkjit
from tkjit.errors import NotAvailableError

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
    k = _split_gemm(**constants)
    ptx = k.asm["ptx"]
    assert sync_outside_the_protocol(ptx, k.async_ir) == []
    assert "stmatrix" not in ptx and "cp.async.bulk.wait_group" not in ptx  # registers to global: nothing staged


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


def test_a_split_epilogue_takes_the_general_lowering():
    k = tkjit.compile(EPILOGUE, lowering="general", require_hopper=True, cache=False)
    ptx = k.asm["ptx"]
    assert k.metadata["lowering"] == "general" and ".reqnctapercluster 2" in ptx
    assert sync_outside_the_protocol(ptx, k.async_ir) == []


@pytest.mark.parametrize("cls", ["cdiv", "floordiv"])
def test_divisions_by_a_power_of_two_are_exact_shifts(cls):
    """The general lowering's cdiv / floordiv by a constant 2^s (lower_producer.emit_division),
    run line by line on int32 values of both signs, against Python's ceil and floor division."""
    from types import SimpleNamespace

    from tkjit.codegen.hopper.lower_producer import emit_division
    from tkjit.codegen.values import Scalar
    from tkjit.ir.ops import CDiv, Const, FloorDiv
    from tkjit.ir.types import I32

    def run(lines, a):
        regs = {"%a": a}
        for line in lines:
            op, rest = line.rstrip(";").split(" ", 1)
            dst, *src = [x.strip() for x in rest.split(",")]
            x = regs[src[0]]
            if op == "neg.s32":
                regs[dst] = -x
            elif op == "shr.s32":
                regs[dst] = x >> int(src[1])   # Python's >> is arithmetic (floor), as shr.s32
            else:
                raise AssertionError(line)
        return regs[dst]

    for d in (1, 2, 64, 128):
        const = Const.__new__(Const)
        const.attrs = {"value": d}
        op = (CDiv if cls == "cdiv" else FloorDiv).__new__(CDiv if cls == "cdiv" else FloorDiv)
        op.operands = [SimpleNamespace(owner=None), SimpleNamespace(owner=const)]
        op.results = [object()]
        bound = {}
        ctx = SimpleNamespace(get=lambda v: Scalar("%a", I32), new=lambda kind: f"%r{len(bound)}",
                              bind=lambda v, s: bound.update(r=s))
        lines = emit_division(ctx, op)
        assert not any(line.startswith("div") for line in lines)
        for a in (-1000, -129, -128, -127, -65, -1, 0, 1, 63, 64, 65, 520, 4095, 4096, 1 << 30):
            want = -(-a // d) if cls == "cdiv" else a // d
            got = run(lines, a) if lines else a
            assert got == want, (cls, d, a, lines)
