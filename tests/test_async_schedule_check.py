"""The compile-time sync check reads the async-schedule IR (passes/sync_at_compile.py, called by the
``async-schedule`` pass): the protocol it explores is the one read back from the IR the pass wrote
(``protocol_from_ir``), which the general lowering walks -- not the mbarrier pass's object.

Edits of the IR *text* (a release deleted, a wait moved after the product it guards, a staging
meeting dropped), parsed back and run through the pass, are compile errors naming the step; a
rewrite that loses a step fails ``tkjit.compile`` although the mbarrier pass's object is intact;
where the schedule cannot be written as IR the check falls back to that object, and says so.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import tkjit
from tkjit.errors import TkError
from tkjit.ir.parser import parse_kernel
from tkjit.options import CompileOptions
from tkjit.passes import DEFAULT_PIPELINE, PassContext, PassManager
from tkjit.passes.async_schedule import protocol_from_ir
from tkjit.passes.mbarrier import schedule_of
from tkjit.passes.sync_check import SyncError

from general_corpus import CASES
from support import drop_steps

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RELEASE = '        not_first {\n          ring_release {ring = "k", which = "prev"};\n        }\n'
FULL_WAIT = '        ring_wait {ring = "k", bar = "full"};\n'


def _gemm_ir() -> str:
    return tkjit.load(EXAMPLES / "gemm.tk", cache=False).asm["after:async-schedule"]


def _check(text: str, debug: bool = False) -> PassContext:
    """Run the async-schedule pass (its check) on IR text; the context holds its decisions."""
    ctx = PassContext(CompileOptions(debug=debug))
    PassManager("async-schedule").run(parse_kernel(text), ctx)
    return ctx


def _edited(text: str, old: str, new: str) -> str:
    assert text.count(old) >= 1, old
    return text.replace(old, new, 1)


def test_the_ir_as_written_passes_and_is_what_was_checked():
    text = _gemm_ir()
    ctx = _check(text)
    (d,) = [d for d in ctx.log if d.decision.startswith("sync protocol checked")]
    assert d.pass_name == "async-schedule" and "read back from the async-schedule IR" in d.reason
    assert d.data["protocol"] == protocol_from_ir(parse_kernel(text)).text()


def test_a_release_deleted_from_the_ir_text_is_a_deadlock():
    with pytest.raises(SyncError) as err:
        _check(_edited(_gemm_ir(), RELEASE, ""))
    msg = str(err.value)
    assert "deadlock in ring k" in msg and "producer blocks in wait empty[k.0]" in msg


def test_a_wait_moved_after_the_product_it_guards_is_an_early_read():
    """The ``ring_wait`` on full[s] moved below the ``mma_AB`` its ``mma_issue`` stands for: the
    wgmma reads the stage before its bytes landed; the error names the step and the trip."""
    text = _edited(_gemm_ir(), FULL_WAIT, "")
    product = next(line for line in text.splitlines(keepends=True) if "= mma_AB " in line)
    with pytest.raises(SyncError) as err:
        _check(_edited(text, product, product + FULL_WAIT))
    msg = str(err.value)
    assert "early-read in ring k" in msg and "without waiting on full[k.0]" in msg
    assert "at consumer 0's wgmma reading k.0 (tile 0, k trip 0)" in msg


def test_a_staging_meeting_dropped_from_the_ir_text_is_caught():
    """The epilogue's second meeting of a round (after the warps wrote the staging tile, before the
    TMA store reads it) deleted in the IR: the bulk store may read rows not yet written."""
    meeting = ('            staging_write {store = "C", buffer = 0};\n            staging_sync;\n'
               '            tma_store {store = "C", buffer = 0};\n')
    broken = _edited(_gemm_ir(), meeting, meeting.replace("            staging_sync;\n", ""))
    with pytest.raises(SyncError, match="early-read"):
        _check(broken, debug=True)


def test_the_compile_checks_the_rewrite_not_the_mbarrier_object(monkeypatch):
    """A rewrite that loses the in-loop release (the mbarrier pass's object still has it) stops
    ``tkjit.compile``: the check explores what the IR says, which is what the emitter walks."""
    from tkjit.passes import async_schedule
    real = async_schedule.rewrite

    def lossy(kernel):
        out = real(kernel)
        for op in list(out.walk()):
            if op.NAME == "not_first" and [inner.NAME for inner in op.regions[0].ops] == ["ring_release"]:
                op.parent.ops.remove(op)
        return out
    monkeypatch.setattr(async_schedule, "rewrite", lossy)
    obj = schedule_of(tkjit.compile(CASES[0].source, cache=False, pipeline=DEFAULT_PIPELINE.replace(",async-schedule", "")).ir)
    assert "if not the first trip {\n          release: arrive empty[k.prev]" in obj.protocol.text()
    with pytest.raises(TkError, match="deadlock in ring k"):  # (the pipeline named: a failing pass is an error)
        tkjit.compile(CASES[0].source, cache=False, pipeline=DEFAULT_PIPELINE).asm["ptx"]


def test_where_the_schedule_is_not_ir_the_check_takes_the_mbarrier_object_and_says_so(monkeypatch):
    from tkjit.ir.ops import async_ops
    case = next(c for c in CASES if c.name == "gemm_bias_pingpong")
    monkeypatch.setattr(async_ops, "STEP_OP_NAMED", {k: v for k, v in async_ops.STEP_OP_NAMED.items() if k != "TurnWait"})
    k = tkjit.compile(case.source, cache=False)
    assert k.async_ir is None
    (d,) = [d for d in k.decisions.for_pass("async-schedule") if "sync protocol checked" in d.decision]
    assert "the mbarrier pass's protocol object" in d.reason
    assert d.data["protocol"] == schedule_of(k.ir).protocol.text() == k.protocol


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_verdict_cache_key_is_the_protocol_read_back(case):
    """The verdict cache keys on the protocol's value (in-process) and its ``repr`` (on disk): the
    protocol read back from the IR has the key the mbarrier pass's object had (verdicts written
    before the check moved stay valid but for the source hash), and one compile's key is the next's."""
    from tkjit.passes.sync_verdicts import _path
    k = tkjit.compile(case.source, constants=case.constants or None, cache=False)
    if k.async_ir is None:
        pytest.skip("not rewritten")
    read = protocol_from_ir(k.async_ir)
    obj = schedule_of(k.ir).protocol
    assert read == obj and hash(read) == hash(obj) and repr(read) == repr(obj)
    again = protocol_from_ir(tkjit.compile(case.source, constants=case.constants or None, cache=False).async_ir)
    assert _path(Path("/x"), again, ((1,),)) == _path(Path("/x"), read, ((1,),))


@pytest.mark.parametrize("name, check, cases", [("attention-grid", "full", 6), ("gemm-pair", "auto", 4),
                                                ("gemm-persistent", "auto", 4), ("gemm-stream-k", "full", 14),
                                                ("tile-write", "full", 5)])
def test_the_mbarrier_ir_files_protocols_are_checked_as_the_async_schedule_pass_reads_them(name, check, cases):
    """The annotated kernels of tests/ir/mbarrier/ (the mbarrier pass's text tests) through the
    mbarrier pass and then async-schedule, whose check explores the protocol read back from the IR
    it wrote: the trip-count cases the mbarrier pass's own check explored before it moved."""
    from tkjit.compiler import optimize_ir_text
    path = Path(__file__).parent / "ir" / "mbarrier" / f"{name}.tkir"
    _, log = optimize_ir_text(path.read_text(), str(path), f"mbarrier,async-schedule{{check={check}}}", verify_each=True)
    (d,) = [d for d in log if "sync protocol" in d.decision]
    assert d.pass_name == "async-schedule" and "read back from the async-schedule IR" in d.reason
    assert d.decision == f"sync protocol checked: {cases} trip-count case(s), every interleaving"


NO_ASYNC = DEFAULT_PIPELINE.replace(",async-schedule", "")


def test_a_pipeline_without_async_schedule_still_checks_what_the_emitter_follows():
    """A user's pipeline that stops at mbarrier: the emitter walks the mbarrier pass's protocol
    object, and the compile checks that object (logged under mbarrier)."""
    k = tkjit.compile(CASES[0].source, cache=False, pipeline=NO_ASYNC)
    assert k.async_ir is None
    (d,) = [d for d in k.decisions.for_pass("mbarrier") if d.decision.startswith("sync protocol checked")]
    assert "the pipeline has no async-schedule pass" in d.reason
    assert d.data["protocol"] == schedule_of(k.ir).protocol.text()


def test_a_broken_protocol_without_async_schedule_stops_the_compile(monkeypatch):
    """The same protocol with its consumers' releases lost: a deadlock, found at compile time
    (before, such a pipeline emitted whatever the object said, unchecked)."""
    from tkjit.passes import mbarrier
    from tkjit.passes.sync_protocol import Release
    real = mbarrier.protocol_of

    def broken(kernel):
        return drop_steps(real(kernel), lambda st, i: isinstance(st, Release))
    monkeypatch.setattr(mbarrier, "protocol_of", broken)
    with pytest.raises(TkError, match="deadlock"):
        tkjit.compile(CASES[0].source, cache=False, pipeline=NO_ASYNC).asm["ptx"]
