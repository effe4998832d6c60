"""The front end: kernel text → AST → verified tile IR.

Kernels in, printed IR out, compared as text; the examples lower, verify and round-trip through
the IR parser; constants can be overridden; parse + lower stays fast.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from tkjit.errors import DiagnosticError
from tkjit.frontend import ast, lower_source, parse
from tkjit.ir.parser import parse_kernel
from tkjit.ir.printer import print_kernel
from tkjit.source import Span

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NAMES = ("gemm", "attention", "layernorm", "softmax", "rotary")


def _ir(text: str, **constants) -> str:
    return print_kernel(lower_source(text, "t.tk", constants or None))


def _example(name: str) -> str:
    return (EXAMPLES / f"{name}.tk").read_text()


# -- the examples ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_example_lowers_verifies_and_round_trips(name):
    k = lower_source(_example(name), f"{name}.tk")
    assert k.name == name
    text = print_kernel(k)
    again = parse_kernel(text)  # parses and verifies
    assert print_kernel(again) == text


@pytest.mark.parametrize("name", NAMES)
def test_every_ast_node_has_a_span(name):
    def walk(node, path):
        if isinstance(node, ast.Node):
            assert isinstance(node.span, Span), path
            assert 0 <= node.span.start <= node.span.end <= len(node.span.source.text), path
            for f in dataclasses.fields(node):
                walk(getattr(node, f.name), f"{path}.{f.name}")
        elif isinstance(node, tuple):
            for i, item in enumerate(node):
                walk(item, f"{path}[{i}]")
    walk(parse(_example(name), f"{name}.tk"), name)


def test_ast_nodes_are_frozen_and_print_as_dataclasses():
    """ast.Node gives its dataclasses what ``frozen=True`` and the generated repr would."""
    kernel = parse(_example("gemm"), "gemm.tk")
    for assign in (lambda: setattr(kernel, "name", "other"), lambda: setattr(kernel, "extra", 1),
                   lambda: delattr(kernel, "name")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            assign()
    assert kernel.name == "gemm" and not hasattr(kernel, "extra")
    span = kernel.span
    assert repr(ast.Num(span, 3)) == f"Num(span={span!r}, value=3)"
    call = ast.Call(span, "f", span, (ast.Name(span, "x"),))
    assert repr(call) == (f"Call(span={span!r}, func='f', func_span={span!r}, args=(Name(span={span!r}, "
                          f"name='x'),), type_arg=None, type_span=None)")
    changed = dataclasses.replace(ast.Let(span, "x", span, None, call, annotations=()), name="y")
    assert (changed.name, changed.value, changed.annotations) == ("y", call, ())
    assert ast.Num(span, 3) != ast.Num(span, 3)  # eq=False: nodes compare by identity


@pytest.mark.parametrize("name", NAMES)
def test_every_ir_op_carries_its_source_span(name):
    k = lower_source(_example(name), f"{name}.tk")
    for op in k.walk():
        assert op.span is not None and op.span.source.filename == f"{name}.tk", op.NAME


def test_parse_plus_lower_is_fast_warm():
    timings = {}
    for name in NAMES:
        text = _example(name)
        lower_source(text)  # warm: the lark parser is built once per process
        runs = 20
        start = time.perf_counter()
        for _ in range(runs):
            lower_source(text)
        timings[name] = (time.perf_counter() - start) / runs * 1e3
    print("\nparse + lower + verify, warm (ms): "
          + ", ".join(f"{n} {t:.2f}" for n, t in timings.items()))
    assert max(timings.values()) < 50, timings


def test_gemm_is_the_design_example():
    text = _ir(_example("gemm"))
    assert 'attributes {consumers = 2, regs = [40, 232], fill_sms = "BM=128 BN=256 SPLIT=1"}' in text
    assert 'blocks {schedule = "persistent", group = 8} %0, %1 {' in text
    assert "%acc.1 = for %c0, %2, %c1, %acc : rt<f32>[128, 256] {" in text  # stages: the pipeline pass's
    assert "%acc.3 = mma_AB %a, %b, %acc.2 : rt<f32>[128, 256]" in text


def test_constants_override_the_kernel_defaults():
    plain = _ir(_example("attention"))
    assert "causal_mask" not in plain and "gl<bf16>[B, H, N, 128]" in plain
    causal = _ir(_example("attention"), CAUSAL=True, D=64, BQ=192)
    assert "causal_mask %s" in causal
    assert "%kv_blocks.1 = min %kv_blocks" in causal  # the loop skips blocks past the diagonal
    assert "gl<bf16>[B, H, N, 64]" in causal and "st<bf16>[192, 64]" in causal


def test_overrides_are_checked():
    with pytest.raises(DiagnosticError, match="'DD' is not a constant of kernel 'attention'"):
        lower_source(_example("attention"), constants={"DD": 64})
    with pytest.raises(DiagnosticError, match="CAUSAL is a bool"):
        lower_source(_example("attention"), constants={"CAUSAL": 1})
    with pytest.raises(DiagnosticError, match="tile rows must be a positive multiple of 16"):
        lower_source(_example("attention"), constants={"BQ": 100})


# -- SSA: loop-carried values and if results -------------------------------------------------

CARRY = """\
kernel carry(X: gl<f32>[R, 64], Y: gl<f32>[R, 64], n: i32) {
  for i in blocks(R / 16) {
    x: rt<f32>[16, 64] = X.tile(i, 0)
    m: cv<f32>[16] = fill(-inf)
    t = 0
    for k in 0 .. n {
      m = max(m, row_max(x))
      if k > 2 {
        x = x * 2
      } else if k == 1 {
        t = t + 1
      }
      u = x + 1          # first bound in the body: local, not carried
    }
    Y.tile(i, 0) = sub_row(x, m)
  }
}
"""

CARRY_IR = """\
kernel @carry(%X: gl<f32>[R, 64], %Y: gl<f32>[R, 64], %n: i32) {
  %R = dim {name = "R"} : i32
  %c16 = const {value = 16} : i32
  %0 = cdiv %R, %c16 : i32
  blocks %0 {
  ^(%i: i32):
    %c0 = const {value = 0} : i32
    %x = load %X, %i, %c0 : rt<f32>[16, 64]
    %m = fill {value = -inf} : cv<f32>[16]
    %t = const {value = 0} : i32
    %c1 = const {value = 1} : i32
    %m.1, %x.1, %t.1 = for %c0, %n, %c1, %m, %x, %t : cv<f32>[16], rt<f32>[16, 64], i32 {
    ^(%k: i32, %m.2: cv<f32>[16], %x.2: rt<f32>[16, 64], %t.2: i32):
      %1 = row_max %x.2 : cv<f32>[16]
      %m.3 = max %m.2, %1 : cv<f32>[16]
      %c2 = const {value = 2} : i32
      %2 = gt %k, %c2 : bool
      %x.3, %t.3 = if %2 : rt<f32>[16, 64], i32 {
        %3 = const {value = 2.0} : f32
        %x.4 = mul %x.2, %3 : rt<f32>[16, 64]
        yield %x.4, %t.2
      } {
        %4 = eq %k, %c1 : bool
        %t.4 = if %4 : i32 {
          %t.5 = add %t.2, %c1 : i32
          yield %t.5
        } {
          yield %t.2
        }
        yield %x.2, %t.4
      }
      %5 = const {value = 1.0} : f32
      %u = add %x.3, %5 : rt<f32>[16, 64]
      yield %m.3, %x.3, %t.3
    }
    %6 = sub_row %x.1, %m.1 : rt<f32>[16, 64]
    store %Y, %6, %i, %c0
  }
}
"""


def test_loops_carry_reassigned_variables_and_ifs_yield_them():
    assert _ir(CARRY) == CARRY_IR


def _kernel(body: str, head: str = "kernel k(X: gl<f32>[R, 64], s: f32, n: i32)") -> str:
    return f"{head} {{\n  for i in blocks(R / 16) {{\n{body}\n  }}\n}}\n"


def _block_body(text: str) -> list[str]:
    """The printed ops inside the block loop, without their indentation."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("^(%i"))
    return [line.strip() for line in lines[start + 1:-2]]


def test_a_constant_if_keeps_only_the_branch_it_takes():
    src = _kernel("    const ON = false\n    x = n\n    if ON {\n      x = x + 1\n    } else {\n"
                  "      x = x * 2\n    }\n    y = x")
    assert _block_body(_ir(src)) == ["%c2 = const {value = 2} : i32", "%x = mul %n, %c2 : i32"]


def test_integer_literals_adopt_the_other_operands_dtype():
    body = _block_body(_ir(_kernel("    a = s * 2\n    b = n * 2\n    c = n / 4\n    d = n // 4")))
    assert body == [
        "%1 = const {value = 2.0} : f32", "%a = mul %s, %1 : f32",
        "%c2 = const {value = 2} : i32", "%b = mul %n, %c2 : i32",
        "%c4 = const {value = 4} : i32", "%c = cdiv %n, %c4 : i32",
        "%d = floordiv %n, %c4 : i32"]


def test_constants_fold_with_integer_division_rounding_up():
    src = _kernel("    const A = 7 / 2, B = 7 // 2, C = 7 % 2, D = 1 / 2.0, E = -(3 + 4) * 2\n"
                  "    x: rt<f32>[16 * A + 0 * B, 16 * (C + 3)] = fill(D + E)")
    assert _block_body(_ir(src)) == ["%x = fill {value = -13.5} : rt<f32>[64, 64]"]


def test_short_circuit_on_a_constant_operand():
    src = _kernel("    const ON = false\n    b = ON && n > 0\n    c = ON || n > 0\n"
                  "    d = n > 1 && !ON")
    assert _block_body(_ir(src)) == [
        "%b = const {value = false} : bool", "%c0 = const {value = 0} : i32",
        "%c = gt %n, %c0 : bool", "%c1 = const {value = 1} : i32", "%d = gt %n, %c1 : bool"]


def test_typed_binding_of_another_placement_copies():
    src = _kernel("    x: rt<f32>[16, 64] = X.tile(i, 0)\n    h = cvt<bf16>(x)\n"
                  "    @swizzle(64)\n    sh: st<bf16>[16, 64] = h\n    back: rt<f32>[16, 64] = sh")
    assert _block_body(_ir(src))[-2:] == [
        "%sh = copy %h : st<bf16, swizzle=64B>[16, 64]", "%back = copy %sh : rt<f32>[16, 64]"]


def test_rebinding_takes_the_type_for_loads_and_zeros():
    src = _kernel("    x: rt<f32>[16, 64] = zeros()\n    x = X.tile(i, 1)\n    x = zeros()")
    assert _block_body(_ir(src))[-2:] == ["%x.1 = load %X, %i, %c1 : rt<f32>[16, 64]",
                                          "%x.2 = zeros : rt<f32>[16, 64]"]


def test_annotations_become_ir_attributes():
    src = ("@consumers(3) @regs(24, 160)\nkernel k(X: gl<f32>[R, 64]) {\n"
           "  for i in blocks(R / 16) schedule(grid) {\n    @unroll(2) @stages(3)\n"
           "    for j in 0 .. 4 step 2 {\n    }\n  }\n}\n")
    text = _ir(src)
    assert "attributes {consumers = 3, regs = [24, 160]}" in text
    assert 'blocks {schedule = "grid"} %0 {' in text
    assert "for {unroll = 2, stages = 3} %c0, %c4, %c2 {" in text


def test_dimensions_are_emitted_once_at_the_top_in_parameter_order():
    src = ("kernel k(A: gl<f32>[M, K], B: gl<f32>[K, N]) {\n"
           "  for (i, j) in blocks(N / 16, M / 16) {\n    x = K + M + K\n  }\n}\n")
    lines = _ir(src).splitlines()
    assert lines[1:4] == ['  %M = dim {name = "M"} : i32', '  %K = dim {name = "K"} : i32',
                          '  %N = dim {name = "N"} : i32']
    assert sum("= dim" in line for line in lines) == 3


# -- syntax -----------------------------------------------------------------------------------

def test_newlines_continue_inside_brackets_and_before_else():
    src = """\
# a comment line
@consumers(1)
@regs(
  40, 232)
kernel k<A = 16,
         B = 2>(X: gl<f32>[R,
                           64],
                n: i32) {
  for i in blocks(R /
                  A) {
    x = n ; y = n + 1   # two statements on one line
    if x > 0 {
      x = x + 1
    }
    else if x < 0 { x = x - 1 }
    else {
      x = 0
    }
    z: f32 = 3. ; w: f32 = 1e-5 ; v: f32 = 0.5
    for j in 0..B {
    }
  }
}
"""
    text = _ir(src)
    assert "= const {value = 3.0} : f32" in text and "= const {value = 1e-05} : f32" in text
    assert text.count(" if ") == 2


def test_a_call_with_a_type_argument_is_not_a_comparison():
    src = _kernel("    a = n < 3\n    b = cvt<f32>(n) > s\n    c = cvt < i32 > (s)")
    body = _block_body(_ir(src))
    assert body == ["%c3 = const {value = 3} : i32", "%a = lt %n, %c3 : bool",
                    '%1 = cvt {dtype = "f32"} %n : f32', "%b = gt %1, %s : bool",
                    '%c = cvt {dtype = "i32"} %s : i32']


def test_parse_gives_the_syntax_tree():
    k = parse(_example("gemm"), "gemm.tk")
    assert [a.name for a in k.annotations] == ["consumers", "regs", "fill_sms"]
    assert [c.name for c in k.consts] == ["BM", "BN", "BK", "SPLIT"]
    assert [p.name for p in k.params] == ["A", "B", "C"]
    loop = k.body[0]
    assert isinstance(loop, ast.BlockLoop) and [v.name for v in loop.vars] == ["m", "n"]
    inner = loop.body[1]
    assert isinstance(inner, ast.ForRange) and not inner.annotations  # stages: the pipeline pass's
    store = loop.body[-1]
    assert isinstance(store, ast.Store) and store.value.func == "cvt"
    assert store.value.type_arg == "bf16" and (store.span.line, store.span.col) == (13, 5)


# -- the example drivers ------------------------------------------------------------------------

DRIVER_ARGS = {
    "gemm": ["130", "260", "70"], "attention": ["1", "2", "1", "80", "--causal", "--d", "64"],
    "layernorm": ["20"], "softmax": ["20"], "rotary": ["1", "2", "40"],
}


@pytest.mark.parametrize("name", NAMES)
def test_example_driver_runs_and_agrees_with_torch(name, monkeypatch, capsys):
    """examples/<name>.py loads <name>.tk with tkjit.load and checks it against torch (here on
    the CPU interpreter, at small sizes)."""
    import importlib.util

    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(DRIVER_ARGS[name]) == 0
    assert "relative error" in capsys.readouterr().out
