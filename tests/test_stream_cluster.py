"""stream-cols{cluster=k}: a row block's columns split over a cluster of k CTAs, the row
reductions combined through distributed shared memory (passes/stream_cluster.py). On the CPU:
the ops (verifier, interpreter semantics with k CTAs running at once), the IR the pass writes and
its decisions (``cluster=auto``'s choice from the re-read row block's size), its refusals, the
examples on the interpreter against float64 torch at ragged row counts, and the PTX/SASS
structure of the exchange (the PTX simulator runs one CTA at a time, so it cannot run a cluster;
tests/gpu/test_norms_cluster_gpu.py runs the kernels)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from test_stream_cache import _norm_case
from test_stream_cols import RMS_IR, check_lines, run_pass

import tkjit
from tkjit.errors import PassError, TkError
from tkjit.ir.parser import parse_kernel
from tkjit.ir.printer import print_kernel
from tkjit.passes.stream_cluster import cluster_for
from tkjit.passes.stream_plan import block_body

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

RANKS_IR = """kernel @ranks(%Y: gl<f32>[R, 64], %Z: gl<f32>[R, 64]) {
  %R = dim {name = "R"} : i32
  %c16 = const {value = 16} : i32
  %0 = cdiv %R, %c16 : i32
  blocks {cluster = 4} %0 {
  ^(%i: i32):
    %r = cluster_rank : i32
    %f = cvt {dtype = "f32"} %r : f32
    %c1 = const {value = 1.0} : f32
    %g = add %f, %c1 : f32
    %t = fill {value = 0.0} : rt<f32>[16, 16]
    %u = add %t, %g : rt<f32>[16, 16]
    %v = row_max %u : cv<f32>[16]
    %s = cluster_sum %v : cv<f32>[16]
    %m = cluster_max %v : cv<f32>[16]
    %b = add_row %t, %s : rt<f32>[16, 16]
    %e = add_row %t, %m : rt<f32>[16, 16]
    store %Y, %b, %i, %r
    store %Z, %e, %i, %r
  }
}
"""


def test_the_interpreter_runs_the_ctas_of_a_cluster_at_once_and_combines_in_rank_order():
    kernel = tkjit.compile(RANKS_IR, filename="ranks.tkir", pipeline="")
    y, z = torch.full((20, 64), float("nan")), torch.full((20, 64), float("nan"))
    kernel(y, z)
    assert (y == 1 + 2 + 3 + 4).all() and (z == 4).all()


@pytest.mark.parametrize("bad, why", [("blocks {cluster = 17}", "cluster must be 1 to 16"),
                                      ('blocks {cluster = 2, schedule = "persistent"}', "cluster must be 1 to 16")])
def test_the_cluster_attribute_is_verified(bad, why):
    with pytest.raises(TkError, match=why):
        parse_kernel(RANKS_IR.replace("blocks {cluster = 4}", bad))


def test_cluster_sum_needs_an_f32_column_vector():
    with pytest.raises(TkError, match="f32 column vector"):
        parse_kernel(RANKS_IR.replace("%s = cluster_sum %v : cv<f32>[16]",
                                      "%w = col_max %u : rv<f32>[16]\n    %s = cluster_sum %w : rv<f32>[16]"))


def test_the_pass_gives_each_cta_a_column_slice_and_combines_the_row_reductions():
    out, log = run_pass(RMS_IR, "stream-cols{cluster=2 reduce=chunk}")
    check_lines(out, [
        "blocks {cluster = 2} %0 {",
        "%rank = cluster_rank : i32",
        "%x_row = load %X, %i, %rank : st<bf16>[16, 2048]",   # the slice, kept whole on chip
        "= for %", "copy_cols %x_row, %c : rt<f32>[16, 256]", "row_sum", "yield",
        '= cluster_sum {exchange = "push"} %part : cv<f32>[16]',
        "rsqrt",
        "= mul %rank, %", "load %W, %",                       # vector chunk rank * 8 + chunk
        "= for %", "mul_col", "= mul %rank, %", "store %Y, %", "yield"])
    assert out.count("cluster_sum") == 1 and out.count("load %X") == 1
    (d, x) = [d for d in log if d.pass_name == "stream-cols" and "cluster" in d.decision]
    assert d.decision == "row block split over a cluster of 2 CTAs, 2048 columns each"
    assert x.decision == "cluster exchange: push" and x.data["exchange"] == "push"
    (w,) = [d for d in log if d.decision.startswith("slice streamed")]
    assert w.decision == "slice streamed with reduce=chunk, 8 warps" and "num_warps = 8" in out
    assert d.data["cluster"] == 2 and d.data["slice"] == 2048
    assert parse_kernel(out) is not None and print_kernel(parse_kernel(out)) == out  # round trip


def test_the_slice_takes_a_tile_of_partials_and_8_warps_unless_pinned():
    out, log = run_pass(RMS_IR, "stream-cols{cluster=2}")
    assert "num_warps = 8" in out and "rt<f32>[16, 256] {" in out  # the carried tile of partials
    assert [d.decision for d in log if d.decision.startswith("slice")] == ["slice streamed with reduce=tile, 8 warps"]
    out, log = run_pass(RMS_IR, "stream-cols{cluster=2 reduce=chunk warps=4}")
    assert "num_warps = 4" in out and [d.data["reduce"] for d in log if d.decision.startswith("slice")] == ["chunk"]


@pytest.mark.parametrize("d, want", [(1024, 1), (4096, 4), (8192, 8), (16384, 8), (32768, 1)])
def test_auto_takes_the_fewest_ctas_whose_slices_fit_the_cache(d, want):
    text = RMS_IR.replace("4096", str(d))
    k, why = cluster_for(block_body(parse_kernel(text)))
    assert k == want, why
    out, log = run_pass(text, "stream-cols{cluster=auto}")
    assert (f"blocks {{cluster = {want}}}" in out) == (want > 1)
    decided = [x.decision for x in log if x.pass_name == "stream-cols"]
    assert any("split over a cluster of" in x for x in decided) == (want > 1)
    assert ("one CTA per row block" in decided) == (d == 32768)  # logged where a split would not fit


def test_auto_counts_every_re_read_tensor():
    src = (EXAMPLES / "residual_layernorm.tk").read_text()
    kernel = tkjit.load(EXAMPLES / "residual_layernorm.tk", constants={"D": 4096},
                        pipeline="canonicalize,stream-cols{cluster=auto}")
    assert "blocks {cluster = 4}" in kernel.asm["after:stream-cols"]  # x and the residual: 2 x 128 KB
    kernel = tkjit.load(EXAMPLES / "residual_layernorm.tk", constants={"D": 8192})  # the default: auto
    assert "blocks {cluster = 8}" in kernel.asm["after:stream-cols"]  # 512 KB: 64 KB per CTA
    assert "D" in src


def test_bad_cluster_options_are_errors_and_unsplittable_widths_are_logged():
    with pytest.raises(PassError, match="cluster must be"):
        run_pass(RMS_IR, "stream-cols{cluster=17}")
    with pytest.raises(PassError, match="cluster and resident"):
        run_pass(RMS_IR, "stream-cols{cluster=2 resident=1}")
    out, log = run_pass(RMS_IR, "stream-cols{cluster=3}")
    assert "cluster" not in out
    (d,) = [d for d in log if d.decision == "not split over a cluster"]
    assert "slices of whole 16-column groups" in d.reason


@pytest.mark.parametrize("k", [2, 4, 8])
@pytest.mark.parametrize("name", ["rmsnorm", "residual_layernorm", "layernorm"])
def test_split_examples_agree_with_torch_on_the_interpreter(name, k):
    d, r = (4096 if k < 8 else 8192), 21  # 21 rows: the second row block is ragged
    kernel = tkjit.load(EXAMPLES / f"{name}.tk", constants={"D": d},
                        pipeline=f"canonicalize,stream-cols{{cluster={k}}}")
    ir = kernel.asm["after:stream-cols"]
    assert f"blocks {{cluster = {k}}}" in ir and ("cluster_sum" in ir or "cluster_moments" in ir)
    args, index, refs = _norm_case(name, r, d)
    kernel(*args)  # the interpreter (no GPU here)
    for i, ref in zip(index, refs):
        assert not torch.isnan(args[i]).any()
        assert ((args[i].double() - ref).norm() / ref.norm()).item() < 1e-2


def _sass_ops(sass: str) -> set[str]:
    return set(re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass))


@pytest.mark.parametrize("name, k, reductions", [("rmsnorm", 4, 1), ("layernorm", 2, 2), ("residual_layernorm", 8, 2)])
def test_the_ptx_exchanges_partials_between_cluster_barriers(name, k, reductions):
    kernel = tkjit.load(EXAMPLES / f"{name}.tk", constants={"D": 8192},
                        pipeline=f"canonicalize,stream-cols{{cluster={k} exchange=barrier}}")
    ptx = kernel.asm["ptx"]
    assert f".reqnctapercluster {k}, 1, 1" in ptx
    assert kernel.metadata["cluster"] == [k, 1, 1]
    assert kernel.metadata["grid"] == [["mul", ["cdiv", ["dim", "R"], 16], k]]
    assert re.search(rf"div\.u32 (%r\d+), \1, {k};", ptx)
    assert ptx.count("%cluster_ctarank") == 1
    lines = [ln.strip() for ln in ptx.splitlines()]
    arrive = [i for i, ln in enumerate(lines) if ln.startswith("barrier.cluster.arrive.release.aligned")]
    wait = [i for i, ln in enumerate(lines) if ln.startswith("barrier.cluster.wait.acquire.aligned")]
    assert len(arrive) == len(wait) == 2 * reductions and all(w == a + 1 for a, w in zip(arrive, wait))
    mapa = [i for i, ln in enumerate(lines) if ln.startswith("mapa.shared::cluster.u32")]
    remote = [i for i, ln in enumerate(lines) if ln.startswith("ld.shared::cluster.f32")]
    assert len(mapa) == k * reductions and len(remote) == 2 * k * reductions  # 16 rows: 2 per thread
    for n in range(reductions):  # each exchange: stores, barrier, remote reads, barrier
        lo, hi = wait[2 * n], arrive[2 * n + 1]
        assert all(lo < i < hi for i in remote[2 * k * n:2 * k * (n + 1)])
        assert any(ln.startswith("@") and "st.shared.f32" in ln for ln in lines[arrive[2 * n] - 4:arrive[2 * n]])
    sass = kernel.asm["sass"]
    fn = kernel.metadata["ptxas"]["functions"][0]
    assert fn["spill_store_bytes"] == fn["spill_load_bytes"] == fn["stack_frame_bytes"] == 0
    ops = _sass_ops(sass)
    assert {"UCGABAR_ARV", "UCGABAR_WAIT"} <= ops and not {o for o in ops if o.startswith(("LDL", "STL"))}
    assert f"cluster: {k}" in str(kernel.explain())


@pytest.mark.parametrize("d, pipeline", [(1024, None), (8192, "canonicalize,stream-cols{cluster=none}")])
def test_unsplit_kernels_keep_their_ptx_free_of_cluster_code(d, pipeline):
    kernel = tkjit.load(EXAMPLES / "rmsnorm.tk", constants={"D": d}, pipeline=pipeline)
    ptx = kernel.asm["ptx"]
    assert "cluster" not in ptx and "cluster" not in kernel.metadata


@pytest.mark.parametrize("name", ["rmsnorm", "residual_layernorm", "layernorm"])
@pytest.mark.parametrize("d", [4096, 8192])
def test_the_default_is_the_measured_split(name, d):
    """cluster=auto (the default) emits exactly the PTX of the pinned cluster=k rows measured on the
    H200 (benchmarks/results/2026-11-27-nvidia-h200-s11-norms2-cluster.json)."""
    k = {("residual_layernorm", 4096): 4}.get((name, d), 4 if d == 4096 else 8)
    auto = tkjit.load(EXAMPLES / f"{name}.tk", constants={"D": d}, pipeline="canonicalize,stream-cols")
    pinned = tkjit.load(EXAMPLES / f"{name}.tk", constants={"D": d}, pipeline=f"canonicalize,stream-cols{{cluster={k}}}")
    strip = lambda ptx: [ln for ln in ptx.splitlines() if not ln.strip().startswith("//")]
    assert strip(auto.asm["ptx"]) == strip(pinned.asm["ptx"])
    assert auto.metadata["cluster"] == [k, 1, 1]
