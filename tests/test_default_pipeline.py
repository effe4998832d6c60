"""The default sm_90a pipeline: canonicalize and stream-cols (the portable passes), then the Hopper
scheduling passes.

The general lowering and the attention template follow the passes only (the GEMM template, which
also had local rules of its own, was deleted on 2026-11-27); kernels they decline reach the register-tile backend as if only canonicalize had run; a kernel
the schedule refuses is recorded and goes on unscheduled (an explicit pipeline still errors).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from codegen_cases import CASES, EXAMPLES as EXAMPLE_CASES
from tkjit.compiler import compile
from tkjit.errors import PassError
from tkjit.ir.printer import print_kernel
from tkjit.options import CompileOptions
from tkjit.ir.core import Kernel
from tkjit.passes import (DEFAULT_PIPELINE, DecisionLog, IRSnapshots, Pass, PassContext, PassManager,
                          default_pipeline, register_pass, unregister_pass)
from tkjit.passes.hopper import HOPPER_PIPELINE

NO_BACKEND_YET: set[str] = set()  # examples no backend emits (gemm_fp8 was one until the general lowering)
ALL_EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.tk"))
EXAMPLES = [p for p in ALL_EXAMPLES if p.stem not in NO_BACKEND_YET]
BY_NAME = {case.name: case for case in [*CASES, *EXAMPLE_CASES]}


def ptx_of(text: str, filename: str, pipeline: str | None = None, lowering: str | None = None):
    return compile(text, CompileOptions.resolve(pipeline=pipeline, lowering=lowering), filename=filename,
                   until="ptx")


def test_the_default_pipeline_is_canonicalize_then_the_hopper_passes():
    assert DEFAULT_PIPELINE == f"canonicalize,stream-cols,{HOPPER_PIPELINE},async-schedule"
    assert default_pipeline("sm_90a") == DEFAULT_PIPELINE
    assert default_pipeline("sm_80") == "canonicalize,stream-cols"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_has_the_ir_after_each_pass_and_the_ptx_of_canonicalize_alone(example):
    from tkjit.errors import NotAvailableError
    text = example.read_text()
    scheduled = ptx_of(text, example.name)
    assert [k for k in scheduled.asm if k.startswith("after:")] == [
        f"after:{name}" for name in DEFAULT_PIPELINE.split(",")]
    general = "tile program" in scheduled.asm["ptx"].splitlines()[0]
    try:
        plain = ptx_of(text, example.name, "canonicalize")
    except NotAvailableError as e:  # only the general lowering emits it (gemm_fp8: fp8 products)
        assert general and "mma.sync backend" in str(e)
        return
    if example.name == "attention.tk" or general:  # these follow the passes only: no local rules
        rendered = scheduled.decisions.render()  # (with no product: "backend: general")
        assert "backend: wgmma" in rendered or "backend: general" in rendered
        # without the passes nothing takes a kernel to the Hopper path
        assert "scheduling passes" in plain.decisions.render()
    else:  # the Hopper passes leave the register-tile backend's code to the portable passes
        portable = ptx_of(text, example.name, "canonicalize,stream-cols")
        assert scheduled.asm["ptx"] == portable.asm["ptx"]
    assert print_kernel(scheduled.portable_ir) == scheduled.asm["after:stream-cols"]


@pytest.mark.parametrize("example", [p for p in ALL_EXAMPLES if p.stem in NO_BACKEND_YET], ids=lambda p: p.stem)
def test_an_example_no_backend_emits_yet_goes_through_the_passes_and_says_why(example):
    from tkjit.errors import NotAvailableError
    text = example.read_text()
    scheduled = compile(text, CompileOptions.resolve(), filename=example.name, until="opt")
    assert [k for k in scheduled.asm if k.startswith("after:")] == [
        f"after:{name}" for name in DEFAULT_PIPELINE.split(",")]
    with pytest.raises(NotAvailableError, match="products are not supported by the mma.sync backend"):
        ptx_of(text, example.name)


@pytest.mark.parametrize("name, refusal", [
    ("gemm_atb", "wgmma reads B from shared memory"),
    ("ex_attention_causal_d64", "2 consumers cannot share the 1 64-row slab(s)"),
])
def test_a_kernel_the_schedule_refuses_goes_on_unscheduled(name, refusal):
    text = print_kernel(BY_NAME[name].kernel())
    result = ptx_of(text, f"{name}.tkir")
    (why,) = [d for d in result.decisions if d.data.get("refused")]
    assert why.decision.startswith("not scheduled: ") and refusal in why.decision
    assert "the kernel goes on as it was after 'stream-cols'" in why.reason
    assert not [d for d in result.decisions if d.pass_name in ("layout", "warp-spec") and d is not why]
    assert [k for k in result.asm if k.startswith("after:")] == ["after:canonicalize", "after:stream-cols"]
    assert result.metadata["backend"] == "mma.sync"
    assert result.asm["ptx"] == ptx_of(text, f"{name}.tkir", "canonicalize").asm["ptx"]
    with pytest.raises(PassError, match=refusal.split("(")[0]):
        ptx_of(text, f"{name}.tkir", DEFAULT_PIPELINE)  # named by the user: refusals are errors


def test_asking_for_a_declined_pass_s_ir_says_the_schedule_declined_it(tmp_path):
    """After a refusal, ``after:layout`` is missing because its work was dropped, not because the
    pipeline lacks the pass: the kernel API and the CLI both say so and point at the log."""
    import tkjit
    from tkjit.cli import main
    from tkjit.compiler import StageNotAvailableError
    text = print_kernel(BY_NAME["ex_attention_causal_d64"].kernel())
    kernel = tkjit.compile(text, filename="attn.tkir")
    with pytest.raises(StageNotAvailableError, match=r"pass 'warp-spec' declined to schedule it "
                       r"\(@attention: 2 consumers cannot share") as info:
        kernel.asm["after:layout"]
    assert "has no such pass" not in str(info.value)
    path = tmp_path / "attn.tkir"
    path.write_text(text)
    assert main(["compile", str(path), "--emit", "after:layout"]) != 0
    with pytest.raises(StageNotAvailableError, match="has no such pass"):
        kernel.asm["after:no-such-pass"]


# ---------------------------------------------------------------- the manager's all-or-nothing rule

@dataclass(frozen=True)
class Annotate(Pass):
    name = "test-annotate"
    target_specific = True

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        kernel.attrs["threads"] = 128
        ctx.decide(f"@{kernel.name}", "annotated")
        return kernel


@dataclass(frozen=True)
class Refuse(Pass):
    name = "test-refuse"
    target_specific = True

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        raise PassError("no schedule for this one", kernel.span)


@dataclass(frozen=True)
class Crash(Pass):
    name = "test-crash"
    target_specific = True

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        raise ValueError("oops")


@dataclass(frozen=True)
class Corrupt(Pass):
    name = "test-corrupt-target"
    target_specific = True

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        kernel.body.ops.insert(0, kernel.body.ops.pop())  # the block loop before its operands
        return kernel


@pytest.fixture
def test_passes():
    for cls in (Annotate, Refuse, Crash, Corrupt):
        register_pass(cls)
    yield
    for cls in (Annotate, Refuse, Crash, Corrupt):
        unregister_pass(cls.name)


def run_tentatively(pipeline: str, verify_each: bool = False):
    kernel = BY_NAME["scalars"].kernel()
    log, snapshots = DecisionLog(), IRSnapshots()
    manager = PassManager(pipeline, verify_each=verify_each, instruments=[snapshots], tentative_target=True)
    out = manager.run(kernel, PassContext(CompileOptions.resolve(), log))
    return out, log, [label for label, _ in snapshots.snapshots]


def test_kept_target_passes_report_their_snapshots_and_decisions(test_passes):
    out, log, labels = run_tentatively("canonicalize,test-annotate")
    assert out.attrs["threads"] == 128 and labels == ["after:canonicalize", "after:test-annotate"]
    assert [d.decision for d in log.for_pass("test-annotate")] == ["annotated"]


def test_held_snapshots_are_the_ir_after_each_target_pass(test_passes):
    """The manager holds printed IR for IRSnapshots (it only prints) and copies of the IR for an
    instrument that takes kernels: both see the IR as it was after each pass."""
    class Kernels:
        def __init__(self):
            self.texts = []

        def after_pass(self, index, pass_, kernel):
            self.texts.append(print_kernel(kernel))

    def snapshots_with(*others):
        snapshots = IRSnapshots()
        manager = PassManager("canonicalize,test-annotate", instruments=[snapshots, *others],
                              tentative_target=True)
        out = manager.run(BY_NAME["scalars"].kernel(), PassContext(CompileOptions.resolve(), DecisionLog()))
        return out, [text for _, text in snapshots.snapshots]

    out, as_text = snapshots_with()
    kernels = Kernels()
    _, as_copies = snapshots_with(kernels)
    assert as_text == as_copies == kernels.texts and as_text[-1] == print_kernel(out)
    assert "threads" not in as_text[0] and "threads" in as_text[1]


def test_a_refusal_drops_the_target_passes_work(test_passes):
    out, log, labels = run_tentatively("canonicalize,test-annotate,test-refuse")
    assert "threads" not in out.attrs and labels == ["after:canonicalize"]
    assert not log.for_pass("test-annotate")
    (why,) = log.for_pass("test-refuse")
    assert why.decision.startswith("not scheduled: no schedule for this one (at ")
    assert why.data == {"refused": True}


def test_crashes_and_invalid_ir_are_still_errors(test_passes):
    with pytest.raises(PassError, match="crashed"):
        run_tentatively("canonicalize,test-crash")
    with pytest.raises(PassError, match="the IR is invalid after pass 'test-corrupt-target'"):
        run_tentatively("canonicalize,test-corrupt-target", verify_each=True)


def test_the_fallback_warning_names_the_pass_that_declined_the_schedule():
    """A GEMM whose tiles do not fit the registers falls to mma.sync: the warning says which pass
    declined and why (with the kernel's line), not only that the schedule is missing. The residual
    are f32 tensors (a bf16 one is held packed, liveness.held_packed), three of them, so that even
    the half-width tile tile-split would make fits no consumer split (so it keeps the tile)."""
    import warnings

    import tkjit
    source = """
kernel big(A: gl<bf16>[M, K], B: gl<bf16>[N, K], R: gl<f32>[M, N], P: gl<f32>[M, N], Q: gl<f32>[M, N],
           C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / 128, N / 256) {
    acc: rt<f32>[128, 256] = zeros()
    for k in 0 .. K / 64 {
      a: st<bf16>[128, 64] = A.tile(m, k)
      b: st<bf16>[256, 64] = B.tile(n, k)
      acc = mma_ABt(a, b, acc)
    }
    r: rt<f32>[128, 256] = R.tile(m, n)
    p: rt<f32>[128, 256] = P.tile(m, n)
    q: rt<f32>[128, 256] = Q.tile(m, n)
    C.tile(m, n) = cvt<bf16>(silu(acc) * r + p * q)
  }
}
"""
    k = tkjit.compile(source, filename="big.tk", cache=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        k.asm["ptx"]
    (w,) = [c for c in caught if issubclass(c.category, RuntimeWarning)]
    assert "pass 'warp-spec' declined to schedule it" in str(w.message)
    assert "registers needed" in str(w.message) and "big.tk:2:1" in str(w.message)
    # where the peak is, and what is live there
    assert "with 2 consumer(s) the peak is 512 fragment registers live at load at big.tk:13:28 (%acc 128, " \
           "%r 128, %p 128, %q 128)" in str(w.message)
