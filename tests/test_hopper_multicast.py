"""2-CTA clusters with B multicast in the Hopper GEMM (grid{multicast=2}), on the CPU: what the
plan decides and why, the pair's PTX (cluster launch, cluster barriers at start and exit,
multicast boxes covering B once per pair, remote releases), the per-CTA protocol through the
checker, and ptxas/SASS (no spills, wgmma not serialized)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import tkjit
from tkjit.codegen.hopper import emit_hopper_ptx, gemm_protocol, plan_gemm
from tkjit.passes import default_pipeline
from tkjit.passes.sync_check import check_protocol
from support import needs_cuda_tools

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
MULTICAST = default_pipeline("sm_90a").replace("grid", "grid{multicast=2}")
ABT = (EXAMPLES / "gemm.tk").read_text().replace("B: gl<bf16>[K, N]", "B: gl<bf16>[N, K]") \
    .replace("st<bf16>[BK, BN] = B.tile(k, n)", "st<bf16>[BN, BK] = B.tile(n, k)").replace("mma_AB(", "mma_ABt(")


def planned(source: str, pipeline: str = MULTICAST, **constants):
    ir = tkjit.compile(source, pipeline=pipeline, constants=constants or None, cache=False).ir
    return ir, plan_gemm(ir)


def decision(plan, what: str) -> dict:
    return next(d for d in plan.decisions if d["decision"] == what)


def test_multicast_is_off_unless_the_grid_pass_asks():
    _, (g, plan) = planned((EXAMPLES / "gemm.tk").read_text(), default_pipeline("sm_90a"))
    assert plan.multicast == 1 and decision(plan, "multicast")["value"] == "none"


def test_the_pair_shares_b_and_the_protocol_counts_both_ctas():
    ir, (g, plan) = planned((EXAMPLES / "gemm.tk").read_text())
    assert plan.multicast == 2 and "16384 of 32768 B" in decision(plan, "multicast")["why"]
    proto = gemm_protocol(g, plan)
    assert proto.rings[0].cluster == 2 and "empty[4] count 2 x 2" in proto.text()
    check_protocol(proto)  # one CTA's view, its peer mirroring it


@pytest.mark.parametrize("source, constants, why", [
    ((EXAMPLES / "gemm.tk").read_text(), {"BN": 64}, "panels do not halve"),
    ((EXAMPLES / "gemm.tk").read_text(), {"SPLIT": 2}, "split-K"),
])
def test_where_multicast_is_not_taken_the_log_says_why(source, constants, why):
    _, (g, plan) = planned(source, **constants)
    assert plan.multicast == 1 and why in decision(plan, "multicast")["why"]


@pytest.mark.parametrize("name, source", [("mma_AB", (EXAMPLES / "gemm.tk").read_text()), ("mma_ABt", ABT)], ids=["mma_AB", "mma_ABt"])
def test_the_pair_ptx(name, source):
    ir, _ = planned(source)
    ptx, meta = emit_hopper_ptx(ir, {"lowering": "template"})
    assert ".reqnctapercluster 2, 1, 1" in ptx
    assert meta["grid"] == [["mul", ["min", ["mul", ["cdiv", ["cdiv", ["dim", "M"], 128], 2],
                                             ["cdiv", ["dim", "N"], 256]],
                                     ["cdiv", ["add", ["num_sms"], -1], 2]], 2]]
    loads = re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared\S*", ptx)
    multicast = [x for x in loads if x.endswith(".multicast::cluster")]
    assert len(multicast) == (2 if name == "mma_AB" else 1)  # half of B: 2 of 4 panels / 128 of 256 rows
    assert len(loads) - len(multicast) == 1  # A, this CTA's own
    assert ptx.count("mbarrier.arrive.shared::cluster.b64") == 2  # in- and after-loop releases
    assert ptx.count("barrier.cluster.arrive.release.aligned;") == 2  # after init, before exit
    assert re.search(r"mbarrier\.init\.shared::cta\.b64 \[%r\d+\+0\], 4;", ptx)  # 2 consumers x 2 CTAs
    if name == "mma_ABt":
        b_map = next(p for p in meta["params"] if p.get("kind") == "tensormap" and p["tensor"] == "B")
        assert b_map["box"] == [64, 128]


@needs_cuda_tools
def test_the_pair_assembles_without_spills_or_serialized_wgmma():
    from tkjit.runtime import toolchain
    ir, _ = planned((EXAMPLES / "gemm.tk").read_text())
    ptx, meta = emit_hopper_ptx(ir, {"lowering": "template"})
    cubin, report = toolchain.assemble(ptx, name=meta["name"])
    fn = report[meta["name"]]
    assert fn.spill_store_bytes == 0 and fn.spill_load_bytes == 0, report.log
    assert not {"C7517", "C7519"} & set(report.codes) and not report.setmaxnreg_ignored(), report.log
    sass = toolchain.sass(cubin)
    assert "UTMALDG" in sass and ".MULTICAST" in sass, "no multicast TMA load in the SASS"
    # cluster-scope releases only where the kernel starts (barrier init) and where consumers exit:
    # one per remote arrive (MEMBAR.ALL.GPU + ERRBAR each) measured 0.63-0.9x
    assert sass.count("MEMBAR.ALL.GPU") == 2, sass.count("MEMBAR.ALL.GPU")
