"""The pass manager: pipeline strings, the registry, verify-each, the decision log, rewrites,
and canonicalize's folding rules (checked against the interpreter's own scalar semantics)."""
from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tkjit.errors import PassError, TkError, VerifyError
from tkjit.ir import ops
from tkjit.ir.core import Kernel
from tkjit.ir.parser import parse_kernel
from tkjit.ir.printer import print_kernel
from tkjit.ir.types import F32, I32, ScalarType
from tkjit.options import CompileOptions
from tkjit.passes import (DecisionLog, IRSnapshots, Pass, PassContext, PassManager, Pipeline, get_pass,
                          register_pass, registered_passes, subject_of, unregister_pass)
from tkjit.passes.canonicalize import fold_value
from tkjit.passes.rewrite import clone_kernel, has_effects

SMALL = """\
kernel @small(%A: gl<f32>[M, 64], %n: i32) {
  %M = dim {name = "M"} : i32
  %c16 = const {value = 16} : i32
  %c0 = const {value = 0} : i32
  %grid = cdiv %M, %c16 : i32
  blocks %grid {
  ^(%i: i32):
    %v = zeros : rt<f32>[16, 64]
    %w = add %v, %v : rt<f32>[16, 64]
    store %A, %w, %i, %c0
  }
}
"""


@dataclass(frozen=True)
class Tuned(Pass):
    """A test pass with one option of every supported type; it changes nothing."""

    name = "test-tuned"
    stages: int = 2
    fast: bool = False
    ratio: float = 0.5
    mode: str = "auto"
    limit: int | None = None

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        ctx.decide(f"@{kernel.name}", f"ran with stages={self.stages}", "a test", stages=self.stages)
        return kernel


@dataclass(frozen=True)
class BreakTypes(Pass):
    """Corrupts the IR: gives the first `add` a result type its operands do not imply."""

    name = "test-break-types"

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        for op in kernel.walk():
            if isinstance(op, ops.Add):
                op.results[0].type = ScalarType(I32)
                break
        return kernel


@dataclass(frozen=True)
class Crash(Pass):
    name = "test-crash"

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        return {}["missing"]


@dataclass(frozen=True)
class ReturnsNothing(Pass):
    name = "test-returns-nothing"

    def run(self, kernel: Kernel, ctx: PassContext):
        return None


TEST_PASSES = (Tuned, BreakTypes, Crash, ReturnsNothing)


@pytest.fixture(autouse=True)
def test_passes():
    for cls in TEST_PASSES:
        register_pass(cls)
    yield
    for cls in TEST_PASSES:
        unregister_pass(cls.name)


def ctx() -> PassContext:
    return PassContext(CompileOptions())


# ---------------------------------------------------------------- pipeline strings

@pytest.mark.parametrize("text", [
    "",
    "canonicalize",
    "canonicalize,canonicalize",
    "canonicalize{max-iterations=3}",
    "test-tuned{stages=4}",
    "canonicalize,test-tuned{stages=4 fast=true ratio=0.25 mode=eager limit=7},canonicalize",
])
def test_canonical_pipelines_print_back_identically(text):
    pipeline = Pipeline.parse(text)
    assert str(pipeline) == text
    assert Pipeline.parse(str(pipeline)) == pipeline


def test_pipeline_parse_builds_typed_options():
    (p,) = Pipeline.parse("test-tuned{stages=4 fast=true ratio=0.25 mode=eager limit=7}")
    assert p == Tuned(stages=4, fast=True, ratio=0.25, mode="eager", limit=7)
    assert isinstance(p.stages, int) and p.fast is True and isinstance(p.ratio, float)


@pytest.mark.parametrize("text, canonical", [
    (" canonicalize , test-tuned { stages = 4 } ", "canonicalize,test-tuned{stages=4}"),
    ("test-tuned{stages=4,fast=1}", "test-tuned{stages=4 fast=true}"),
    ("canonicalize{max_iterations=3}", "canonicalize{max-iterations=3}"),
    ("test-tuned{stages=2}", "test-tuned"),  # a default value is not printed
    ("test-tuned{}", "test-tuned"),
])
def test_pipeline_spellings_print_canonically(text, canonical):
    assert str(Pipeline.parse(text)) == canonical


def _error(text: str) -> TkError:
    with pytest.raises(TkError) as info:
        Pipeline.parse(text)
    return info.value


def test_unknown_pass_lists_the_passes_and_points_at_it():
    e = _error("canonicalize,canonicalise")
    assert "unknown pass 'canonicalise'; did you mean 'canonicalize'?" in e.message
    assert e.span.col == 14
    assert "canonicalize" in e.notes[0] and "test-tuned" in e.notes[0]
    assert "^~~~~~~~~~~" in e.render()


def test_unknown_option_lists_the_options():
    e = _error("test-tuned{stage=4}")
    assert e.message == "pass 'test-tuned' has no option 'stage'"
    assert "stages (int, default 2)" in e.notes[0] and "limit (int, default None)" in e.notes[0]
    assert e.span.col == 12


@pytest.mark.parametrize("text, message", [
    ("test-tuned{stages=four}", "option 'stages' of pass 'test-tuned' expects an integer, got 'four'"),
    ("test-tuned{stages=1.5}", "expects an integer, got '1.5'"),
    ("test-tuned{fast=yes}", "option 'fast' of pass 'test-tuned' expects true or false, got 'yes'"),
    ("test-tuned{ratio=x}", "expects a number, got 'x'"),
    ("test-tuned{mode=}", "option 'mode' of pass 'test-tuned' expects a word, got ''"),
    ("test-tuned{stages=1 stages=2}", "option 'stages' of pass 'test-tuned' is given twice"),
    ("test-tuned{stages=1", "unclosed '{' in the options of 'test-tuned'"),
    ("test-tuned{stages 1}", "expected '=' after option 'stages'"),
    ("canonicalize,", "expected a pass name, found the end"),
    ("canonicalize;layout", "expected ',' between passes, found ';'"),
    ("canonicalize{max-iterations=2}{", "expected ',' between passes, found '{'"),
])
def test_bad_pipelines_say_what_is_wrong(text, message):
    assert message in _error(text).message


def test_registry_refuses_two_passes_with_one_name_and_unfrozen_passes():
    @dataclass(frozen=True)
    class Other(Pass):
        name = "canonicalize"

    with pytest.raises(TypeError, match="two passes are named 'canonicalize'"):
        register_pass(Other)

    class NotADataclass(Pass):  # its annotated options would silently not be options
        name = "test-plain"
        stages: int = 4

    with pytest.raises(TypeError, match="frozen dataclass"):
        register_pass(NotADataclass)
    assert "test-plain" not in registered_passes()
    assert get_pass("canonicalize").name == "canonicalize"


# ---------------------------------------------------------------- running passes

def test_verify_each_names_the_pass_that_broke_the_ir_and_marks_the_op():
    manager = PassManager("canonicalize,test-break-types,canonicalize", verify_each=True)
    with pytest.raises(PassError) as info:
        manager.run(parse_kernel(SMALL), ctx())
    e = info.value
    assert e.message.startswith("the IR is invalid after pass 'test-break-types': add: result type")
    text = e.render()
    assert "^^^ add: result type expected rt<f32>[16, 64], got i32" in text
    assert "%w = add %v, %v : i32" in text  # the broken IR, with the op marked
    assert "reproduce with `tkjit opt before.tkir -p 'test-break-types' --verify-each`" in text
    assert "%w = add %v, %v : rt<f32>[16, 64]" in text  # ... and the IR before the pass


def test_without_verify_each_the_broken_ir_is_not_checked_by_the_manager():
    kernel = PassManager("test-break-types").run(parse_kernel(SMALL), ctx())
    with pytest.raises(VerifyError):
        from tkjit.ir.verify import verify_kernel
        verify_kernel(kernel)


def test_a_crashing_pass_is_a_pass_error_naming_it():
    with pytest.raises(PassError) as info:
        PassManager("test-crash").run(parse_kernel(SMALL), ctx())
    assert info.value.message == "pass 'test-crash' crashed: KeyError: 'missing'"
    assert "this is a bug in tkjit" in info.value.notes
    assert isinstance(info.value.__cause__, KeyError)


def test_a_pass_must_return_a_kernel():
    with pytest.raises(PassError, match="pass 'test-returns-nothing' returned NoneType, not a Kernel"):
        PassManager("test-returns-nothing").run(parse_kernel(SMALL), ctx())


def test_snapshots_after_every_pass_label_repeats():
    snaps = IRSnapshots()
    PassManager("test-tuned,canonicalize,test-tuned{stages=3}", instruments=[snaps]).run(
        parse_kernel(SMALL), ctx())
    labels = [label for label, _ in snaps.snapshots]
    assert labels == ["after:test-tuned", "after:canonicalize", "after:test-tuned#2"]
    assert snaps.snapshots[0][1] == SMALL  # test-tuned changes nothing
    assert "%w = add" in snaps.snapshots[1][1]


def test_passes_record_into_the_context_under_their_name():
    c = ctx()
    PassManager("test-tuned{stages=5}").run(parse_kernel(SMALL), c)
    (d,) = c.log.for_pass("test-tuned")
    assert (d.subject, d.decision, d.reason, d.data) == ("@small", "ran with stages=5", "a test", {"stages": 5})
    assert c.current_pass == ""


# ---------------------------------------------------------------- the decision log

def test_decision_log_renders_text_and_round_trips_json():
    log = DecisionLog()
    log.record("layout", "%a", "swizzle 128B", "the row is 128 bytes", swizzle=128)
    log.record("layout", "%b", "swizzle 64B")
    log.record("pipeline", "for at gemm.tk:8:5", "4 stages", "fits in 227 KB")
    assert log.render() == (
        "layout\n"
        "  %a: swizzle 128B\n"
        "      because the row is 128 bytes\n"
        "  %b: swizzle 64B\n"
        "pipeline\n"
        "  for at gemm.tk:8:5: 4 stages\n"
        "      because fits in 227 KB\n")
    again = DecisionLog.from_json(json.loads(log.to_json_text()))
    assert again.decisions == log.decisions
    assert DecisionLog().render() == "no decisions were recorded\n"


def test_decision_data_must_be_json():
    with pytest.raises(TkError, match="decision data of pass 'p' is not JSON"):
        DecisionLog().record("p", "@k", "x", thing=object())


def test_subjects_name_values_and_ops():
    k = parse_kernel(SMALL, "small.tkir")
    add = next(op for op in k.walk() if isinstance(op, ops.Add))
    assert subject_of(add.result) == "%w"
    assert subject_of(add) == "add at small.tkir:9:5"
    add.span = None
    assert subject_of(add) == "add %w"


# ---------------------------------------------------------------- rewrite helpers

def test_clone_is_deep_and_prints_the_same():
    k = parse_kernel(SMALL, "small.tkir")
    copy = clone_kernel(k)
    assert print_kernel(copy) == print_kernel(k)
    assert next(copy.walk()).span == next(k.walk()).span
    PassManager("canonicalize").run(copy, ctx())
    copy.body.ops.clear()
    assert print_kernel(k) == SMALL


def test_effects():
    k = parse_kernel(SMALL)
    by_name = {op.NAME: op for op in k.walk()}
    assert not has_effects(by_name["add"]) and not has_effects(by_name["const"])
    assert has_effects(by_name["store"]) and has_effects(by_name["blocks"])


# ---------------------------------------------------------------- canonicalize: folding rules

def _binary(cls, dtype):
    t = ScalarType(dtype)
    from tkjit.ir.core import Value
    return cls([Value(t), Value(t)])


I32_OPS = [ops.Add, ops.Sub, ops.Mul, ops.Max, ops.Min, ops.CDiv, ops.FloorDiv, ops.Mod, ops.Div,
           ops.Lt, ops.Le, ops.Gt, ops.Ge, ops.Eq, ops.Ne]
F32_OPS = [ops.Add, ops.Sub, ops.Mul, ops.Div, ops.Max, ops.Min, ops.Lt, ops.Ge, ops.Eq, ops.Ne]
i32s = st.integers(-2**31, 2**31 - 1)
f32s = st.floats(width=32, allow_nan=True, allow_infinity=True)


class _Interp:
    """The stand-in for the interpreter object its scalar handlers report errors through."""

    def error(self, op, message):
        return ZeroDivisionError(message)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(I32_OPS), i32s, i32s | st.sampled_from([0, 1, -1, 2, -2]))
def test_i32_folding_agrees_with_the_interpreter(cls, a, b):
    from tkjit.interpreter.handlers.scalar import scalar_binary
    op = _binary(cls, I32)
    folded = fold_value(op, [a, b])
    try:
        expected = scalar_binary(_Interp(), op, a, b)
    except ZeroDivisionError:
        assert folded is None  # left for run time
        return
    assert folded == expected and type(folded) is type(expected)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(F32_OPS), f32s, f32s)
def test_f32_folding_agrees_with_the_interpreter(cls, a, b):
    import math
    from tkjit.interpreter.handlers.scalar import scalar_binary
    import numpy as np
    op = _binary(cls, F32)
    folded = fold_value(op, [a, b])
    with np.errstate(all="ignore"):
        expected = scalar_binary(_Interp(), op, a, b)
    if isinstance(expected, bool):
        assert folded is expected
    elif math.isnan(expected):
        assert math.isnan(folded)
    else:
        assert folded == float(expected)


def test_folding_examples():
    assert fold_value(_binary(ops.CDiv, I32), [7, 2]) == 4
    assert fold_value(_binary(ops.CDiv, I32), [-7, 2]) == -3
    assert fold_value(_binary(ops.Mod, I32), [7, -2]) == -1
    assert fold_value(_binary(ops.Div, I32), [-7, 2]) == -3
    assert fold_value(_binary(ops.Add, I32), [2**31 - 1, 1]) == -2**31
    assert fold_value(_binary(ops.CDiv, I32), [1, 0]) is None
    assert fold_value(_binary(ops.Add, F32), [0.10000000149011612, 0.20000000298023224]) == 0.30000001192092896
    assert fold_value(_binary(ops.Max, F32), [float("nan"), 1.0]) == 1.0


def test_canonicalize_reaches_a_fixed_point_and_respects_max_iterations():
    text = SMALL.replace("%grid = cdiv %M, %c16 : i32",
                         "%c2 = const {value = 2} : i32\n  %c8 = const {value = 8} : i32\n"
                         "  %x = mul %c2, %c8 : i32\n  %grid = cdiv %M, %x : i32")
    once = PassManager("canonicalize").run(parse_kernel(text), ctx())
    twice = PassManager("canonicalize").run(clone_kernel(once), ctx())
    assert print_kernel(once) == print_kernel(twice)
    assert "%grid = cdiv %M, %c16 : i32" in print_kernel(once)  # folded to 16, merged with %c16
    c = ctx()
    PassManager("canonicalize{max-iterations=1}").run(parse_kernel(text), c)
    assert [d.decision for d in c.log] == ["folded 1 scalar op into constants",
                                           "merged 1 duplicate const/dim op", "removed 2 unused ops"]
