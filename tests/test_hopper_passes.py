"""The Hopper scheduling passes on the example kernels: layout, warp-spec, pipeline, smem-plan,
mbarrier, reg-budget and grid in sequence -- verified IR after each, decisions recorded, the
same text when run again on their own output, and a synchronization protocol that survives
every interleaving of every trip-count case."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tkjit.frontend import lower_source
from tkjit.ir.parser import parse_kernel
from tkjit.ir.printer import print_kernel
from tkjit.options import CompileOptions
from tkjit.passes import PassContext, PassManager, Pipeline
from tkjit.passes.grid import launch_grid
from tkjit.passes.hopper import HOPPER_PIPELINE
from tkjit.passes.mbarrier import protocol_of
from tkjit.passes.sync_check import SyncError, check_protocol, default_cases

EXAMPLES = Path(__file__).parent.parent / "examples"
PINS = re.compile(r"@(consumers|regs|stages)\([0-9, ]*\)")


def example(name: str, pins: bool = True) -> str:
    text = (EXAMPLES / f"{name}.tk").read_text()
    return text if pins else PINS.sub("", text)


def schedule(text: str, name: str = "kernel.tk", pipeline: str = HOPPER_PIPELINE,
             options: CompileOptions | None = None):
    kernel = lower_source(text, name)
    ctx = PassContext(options or CompileOptions())
    kernel = PassManager(pipeline, verify_each=True).run(kernel, ctx)
    return kernel, ctx.log


def test_the_hopper_pipeline_string_round_trips():
    text = ("layout{max-swizzle=64},warp-spec,pipeline{max-stages=6},smem-plan{epilogue=chunks},mbarrier,"
            "reg-budget,grid,async-schedule{check=full}")
    assert str(Pipeline.parse(text)) == text
    assert str(Pipeline.parse(HOPPER_PIPELINE)) == HOPPER_PIPELINE


@pytest.mark.parametrize("name", ["gemm", "attention", "layernorm", "rotary", "softmax"])
@pytest.mark.parametrize("pins", [True, False], ids=["pinned", "decided"])
def test_every_example_schedules_and_its_protocol_survives_every_case(name, pins):
    kernel, log = schedule(example(name, pins), f"{name}.tk")
    assert {"consumers", "threads", "smem", "maxnreg", "ctas"} <= set(kernel.attrs)
    assert kernel.attrs["smem"] <= 232_448
    proto = protocol_of(kernel)
    report = check_protocol(proto, default_cases(proto))
    assert all(r.exhaustive for r in report.results)


@pytest.mark.parametrize("lowering", ["auto", "general"])
@pytest.mark.parametrize("name", ["gemm", "attention"])
def test_the_passes_give_the_same_text_when_run_on_their_own_output(name, lowering):
    """Under ``general`` scale-fold versions the attention's scaling under an if; run again, it
    must see that fold in the text (the if's ``fold`` mark) and not version the else branch."""
    options = CompileOptions(lowering=lowering)
    kernel, log = schedule(example(name, pins=False), f"{name}.tk", options=options)
    if name == "attention" and lowering == "general":  # the case this guards: a folded kernel
        assert "folded into its readers when the scale is positive" in log.render()
    once = print_kernel(kernel)
    again, _ = schedule_ir(once, options)
    assert print_kernel(again) == once


def schedule_ir(text: str, options: CompileOptions | None = None):
    kernel = parse_kernel(text)
    ctx = PassContext(options or CompileOptions())
    return PassManager(HOPPER_PIPELINE, verify_each=True).run(kernel, ctx), ctx.log


def test_gemm_decisions():
    kernel, log = schedule(example("gemm"), "gemm.tk")
    text = log.render()
    expected = [
        "%a: swizzle 128B", "%b: swizzle 128B",
        "mma_AB at gemm.tk:11:13: A K-major (tA=0); B MN-major (tB=1); each: 2 slab(s) of 64 rows x 4 wgmma m64n256k16",
        "layout wgmma",
        "@gemm: persistent: min(cdiv(M, 128) * cdiv(N, 256), num_sms) CTAs",
        "@gemm: 1 producer + 2 consumer warpgroups = 384 threads",
        "for at gemm.tk:8:5: 4 stage(s) of 49,152 B (%a 16,384 B + %b 32,768 B), 49,152 B apart",
        "ring of for at gemm.tk:8:5: bytes 0 .. 196,607 (196,608 B, 1024-byte aligned)",
        # the widest round of panels that fits: 2 consumers x 64 rows x 128 columns of bf16, what
        # the Hopper emitter stages per round (its plan of 230,464 B is this + 1,024 to align)
        "staging tile of store at gemm.tk:13:5: bytes 196,608 .. 229,375 (32,768 B, 1024-byte aligned)",
        "@gemm: 229,440 B of dynamic shared memory",
        # own-trips: the rows-past-the-end rule holds (a consumer's rows past M), not taken by auto
        "for at gemm.tk:8:5: rows past the end computed",
        "@gemm: setmaxnreg: producer 40, consumers 232; .maxnreg 168 at entry",
        "store at gemm.tk:13:5: staged: stmatrix + TMA store, deferred to the next tile's first wgmma group",
        "4 round(s) of 64 columns per consumer, two halves of its staging in turn",
        "ring k (gemm.tk:8:5): 4 stages: full[s] count 1 + expect_tx 49,152 B, empty[s] count 2",
    ]
    at = 0
    for line in expected:
        found = text.find(line, at)
        assert found >= 0, f"{line!r} not in order in:\n{text}"
        at = found
    by_pass = {d.pass_name for d in log}
    assert by_pass == {"layout", "warp-spec", "pipeline", "smem-plan", "own-trips", "reg-budget", "epilogue",
                       "mbarrier", "grid"}


def test_the_sync_check_runs_on_the_protocol_the_async_schedule_ir_gives_back():
    """The check is the async-schedule pass's, on the protocol it reads back from the IR it wrote
    (the mbarrier pass only builds the protocol and logs its rings)."""
    from tkjit.passes.async_schedule import protocol_from_ir
    kernel, log = schedule(example("gemm"), "gemm.tk", HOPPER_PIPELINE + ",async-schedule")
    (checked,) = [d for d in log if "sync protocol" in d.decision]
    assert (checked.pass_name, checked.subject) == ("async-schedule", "@gemm")
    assert checked.decision == "sync protocol checked: 4 trip-count case(s), every interleaving"
    assert checked.data["protocol"] == protocol_from_ir(kernel).text()
    assert not [d for d in log.for_pass("mbarrier") if "sync protocol" in d.decision]


def test_gemm_annotations_are_what_the_emitter_needs():
    kernel, _ = schedule(example("gemm"), "gemm.tk")
    loop = next(op for op in kernel.walk() if op.NAME == "for")
    assert loop.attrs == {"stages": 4, "stage_bytes": 49152, "stage_stride": 49152, "bars": 229376}
    store = next(op for op in kernel.walk() if op.NAME == "store")
    assert store.attrs == {"smem": 196608, "staging": "chunks", "staging_cols": 128,
                           "epilogue": "deferred", "epilogue_cols": 128}
    loads = [op for op in kernel.walk() if op.NAME == "load"]
    assert [ld.attrs["smem"] for ld in loads] == [0, 16384]
    assert [str(ld.result.type) for ld in loads] == ["st<bf16, swizzle=128B>[128, 64]",
                                                     "st<bf16, swizzle=128B>[64, 256]"]
    mma = next(op for op in kernel.walk() if op.NAME == "mma_AB")
    assert mma.attrs == {"a_major": "K", "b_major": "MN"}
    assert str(mma.result.type) == "rt<f32, layout=wgmma>[128, 256]"
    assert kernel.attrs["regs"] == (40, 232) and kernel.attrs["maxnreg"] == 168
    assert launch_grid(kernel) == ["min", ["mul", ["cdiv", ["dim", "M"], 128], ["cdiv", ["dim", "N"], 256]],
                                   ["num_sms"]]


def test_the_gemm_protocol_is_the_textbook_ring():
    kernel, _ = schedule(example("gemm"), "gemm.tk")
    text = protocol_of(kernel).text()
    assert "ring k at gemm.tk:8:5: 4 stages x 49152 B (a 16384 B, b 32768 B); full[4] count 1, expect_tx 49152 B; empty[4] count 2" in text
    assert "wait empty[k.s] parity ph^1" in text and "wait full[k.s] parity ph" in text
    assert "mma_wait 1" in text and "release: arrive empty[k.prev]" in text


def test_the_checker_catches_a_broken_variant_of_the_real_gemm_protocol():
    kernel, _ = schedule(example("gemm"), "gemm.tk")
    proto = protocol_of(kernel)
    ring = dataclasses.replace(proto.rings[0], empty_arrivals=1)
    with pytest.raises(SyncError, match="empty\\[k.0\\] completes after 1 arrival\\(s\\) but 2 consumers"):
        check_protocol(dataclasses.replace(proto, rings=(ring,)))


def test_attention_epilogue_reuses_the_ring_behind_a_consumer_barrier():
    """One CTA per tile (written: the default is persistent since the gate was lifted): the
    staging tile lives in the ring's bytes, behind a meeting of the consumers."""
    text = example("attention").replace("for (b, h, i) in blocks(B, H, N / BQ) {",
                                        "for (b, h, i) in blocks(B, H, N / BQ) schedule(grid) {")
    kernel, log = schedule(text, "attention.tk")
    store = next(op for op in kernel.walk() if op.NAME == "store" and "staging" in op.attrs)
    assert store.attrs == {"smem": 0, "staging": "tile", "epilogue": "staged", "epilogue_cols": 128}
    text = protocol_of(kernel).text()
    assert "bar.sync: all consumer warpgroups meet" in text
    assert "epilogue: write the staging tile over ring j" in text
    # the staged store's rounds come after the meeting, between the staging's begin and end
    at = text.index("epilogue: write the staging tile over ring j")
    assert text.index("epilogue of O through its staging") > at
    assert text.index("epilogue: TMA store has read the staging tile") > text.index("tma_store staging O.0")


def test_persistent_attention_keeps_the_staging_tile_off_the_ring():
    text = example("attention").replace("for (b, h, i) in blocks(B, H, N / BQ) {",
                                        "for (b, h, i) in blocks(B, H, N / BQ) schedule(persistent) {")
    kernel, _ = schedule(text, "attention.tk")
    proto = protocol_of(kernel)
    assert proto.persistent and "staging tile" not in proto.text()
    check_protocol(proto, default_cases(proto))


def test_a_pass_instance_keeps_no_state_between_kernels():
    pm = PassManager(HOPPER_PIPELINE, verify_each=True)
    first = pm.run(lower_source(example("gemm"), "gemm.tk"), PassContext(CompileOptions()))
    pm.run(lower_source(example("attention"), "attention.tk"), PassContext(CompileOptions()))
    again = pm.run(lower_source(example("gemm"), "gemm.tk"), PassContext(CompileOptions()))
    assert print_kernel(first) == print_kernel(again)


@pytest.mark.parametrize("regs", ["40, 24", "240, 232"])
def test_pinned_registers_with_the_producer_above_the_consumers_are_refused(regs):
    """Found by benchmarks/fuzz_frontend.py: @regs(40, 24) reached ptxas, which refused the PTX
    (C7406: setmaxnreg.dec above the consumers' count) with no location in the kernel."""
    from tkjit.errors import PassError
    text = example("gemm").replace("@regs(40, 232)", f"@regs({regs})")
    with pytest.raises(PassError, match="must not exceed the consumers'") as err:
        schedule(text, "gemm.tk")
    assert err.value.span is not None


def grid_decision(log):
    """The grid pass's decision of the launch (it may log the tile order apart)."""
    (d,) = [d for d in log if d.pass_name == "grid" and "CTAs" in d.decision]
    return d


def test_a_kernel_that_names_no_schedule_gets_one_chosen():
    kernel, log = schedule(example("bmm"), "bmm.tk")
    blocks = next(op for op in kernel.walk() if op.NAME == "blocks")
    assert blocks.attrs["schedule"] == "persistent"
    d = grid_decision(log)
    assert "(chosen: the kernel names no schedule)" in d.decision
    assert "every tile does the same work" in d.reason
    assert launch_grid(kernel)[0] == "min"


@pytest.mark.parametrize("name", ["attention_nol", "mlp"])
def test_a_tile_loaded_once_per_tile_over_tiles_of_equal_work_goes_persistent(name):
    """Tiles of equal work that load a tile once per tile: a persistent grid, so the next tile's
    copy lands under this tile's work (the option grid{overlap=-1} keeps one CTA per tile)."""
    kernel, log = schedule(example(name), f"{name}.tk")
    blocks = next(op for op in kernel.walk() if op.NAME == "blocks")
    assert blocks.attrs.get("schedule") == "persistent" and "by_trips" not in blocks.attrs
    d = grid_decision(log)
    assert "chosen" in d.decision and "is loaded once per tile" in d.reason
    off, log = schedule(example(name), f"{name}.tk", pipeline=HOPPER_PIPELINE.replace("grid,", "grid{overlap=-1},"))
    blocks = next(op for op in off.walk() if op.NAME == "blocks")
    assert "schedule" not in blocks.attrs


def test_uneven_tiles_stay_on_a_grid_and_say_why():
    text = """
kernel tri(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<f32>[M, N]) {
  for (m, n) in blocks(M / 128, N / 128) {
    acc: rt<f32>[128, 128] = zeros()
    for k in 0 .. min(K / 64, m + 1) {
      a: st<bf16>[128, 64] = A.tile(m, k)
      b: st<bf16>[64, 128] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    C.tile(m, n) = acc
  }
}
"""
    kernel, log = schedule(text, "tri.tk")
    blocks = next(op for op in kernel.walk() if op.NAME == "blocks")
    assert "schedule" not in blocks.attrs
    d = grid_decision(log)
    assert "chosen" in d.decision
    assert "a loop's trip count depends on the block indices (line 5)" in d.reason


def test_a_kernel_without_shared_tiles_stays_on_a_grid():
    kernel, log = schedule(example("layernorm"), "layernorm.tk")
    assert "loads no shared tile" in grid_decision(log).reason


def test_a_written_schedule_is_kept_and_reaches_the_passes_after_grid():
    text = example("bmm").replace("in blocks(BATCH, M / BM, N / BN)", "in blocks(BATCH, M / BM, N / BN) schedule(grid)")
    kernel, log = schedule(text, "bmm.tk")
    assert "chosen" not in grid_decision(log).decision
    assert launch_grid(kernel)[0] != "min"
    # ping-pong needs a persistent loop: warp-spec now sees the grid pass's schedule option too
    opts = "layout,grid{schedule=persistent},warp-spec,pipeline,smem-plan,mbarrier,reg-budget"
    kernel, log = schedule(text, "bmm.tk", opts)
    assert launch_grid(kernel)[0] == "min"
