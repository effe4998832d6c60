"""Checked mode (issue 20 item 4): run-time checks of coordinates, integer divisions and loop steps
on the GPU too, with the interpreter's error (class, message, line:col).

On the CPU: the interpreter with and without the checks pass says the same; the register-tile
backend's checked PTX on the PTX simulator fills the error buffer, and the launcher's reading of
it (``device_checks.check_error``) gives the interpreter's text; good launches compute what the
unchecked kernel computes; unchecked stores at out-of-range coordinates write nothing outside the
tensor; the general sm_90a lowering takes checked wgmma kernels (ptxas). The GPU side:
tests/gpu/test_checked_mode_gpu.py.
"""
from __future__ import annotations

import numpy as np
import pytest
from ptxsim import Memory, launch

import tkjit
from tkjit import compiler
from tkjit.config import Config
from tkjit.errors import CheckError, InterpreterError
from tkjit.options import CompileOptions
from tkjit.passes import default_pipeline
from tkjit.runtime.device_checks import CHECK_WORDS, check_error

SHIFT = """
kernel shift(X: gl<f32>[M, 64], Y: gl<f32>[M, 64], s: i32, d: i32) {
  for i in blocks(M / 16) {
    x: rt<f32>[16, 64] = X.tile(i, 0)
    Y.tile(i + s, 0) = x * 2.0
    for k in 0 .. 2 step d {
      Y.tile(i, 0) = x + 1.0
    }
  }
}
"""

SHIFT_ONLY = """
kernel shift_only(X: gl<f32>[M, 64], Y: gl<f32>[M, 64], s: i32) {
  for i in blocks(M / 16) {
    x: rt<f32>[16, 64] = X.tile(i, 0)
    Y.tile(i + s, 0) = x * 2.0
  }
}
"""

LEAD = """
kernel lead(X: gl<f32>[B, M, 32], Y: gl<f32>[M, 32], b: i32) {
  for i in blocks(M / 16) {
    x: rt<f32>[16, 32] = X.tile(b, i, 0)
    Y.tile(i, 0) = x
  }
}
"""

DIVIDE = """
kernel divide(X: gl<f32>[M, 32], Y: gl<f32>[M, 32], g: i32) {
  for i in blocks(M / 16) {
    x: rt<f32>[16, 32] = X.tile(i % g, 0)
    Y.tile(i, 0) = x
  }
}
"""

BAD_LAUNCHES = [  # (kernel, file, scalar arguments, what the interpreter says)
    (SHIFT, "shift.tk", (-1, 1), "store: tile coordinate -1 of Y is out of range: Y has 4 tiles of 16 rows"),
    (SHIFT, "shift.tk", (1, 1), "store: tile coordinate 4 of Y is out of range"),
    (SHIFT, "shift.tk", (0, 0), "for: the loop step must be positive, got 0 (from 0 to 2)"),
    (LEAD, "lead.tk", (3,), "load: index 3 of X is out of range: X has 2 entries along dimension 0 (B = 2)"),
    (DIVIDE, "divide.tk", (0,), "mod: integer division by zero ("),
]


def _arrays(src: str):
    if "lead" in src:
        return [np.random.rand(2, 64, 32).astype(np.float32), np.zeros((64, 32), np.float32)], {"B": 2, "M": 64}
    cols = 64 if "shift" in src else 32
    return [np.random.rand(64, cols).astype(np.float32), np.zeros((64, cols), np.float32)], {"M": 64}


def _interpret(src: str, file: str, scalars, checked: bool):
    arrays, _ = _arrays(src)
    k = tkjit.compile(src, filename=file, backend="interpret", checked=checked, cache=False)
    try:
        k(*arrays, *scalars)
    except InterpreterError as e:
        return e, arrays
    return None, arrays


def _simulate(src: str, file: str, scalars, checked: bool = True, arrays=None):
    """The register-tile backend's PTX on the simulator; (error buffer words, output, metadata)."""
    r = compiler.compile(src, CompileOptions.resolve(checked=checked, cache=False), filename=file, until="ptx")
    assert r.metadata["backend"] == "mma.sync"
    fresh, dims = _arrays(src)
    arrays = arrays or fresh
    mem = Memory(1 << 22)
    addrs = [mem.alloc(a) for a in arrays]
    args = [*addrs, *scalars]
    buf = None
    if checked:
        buf = mem.alloc(np.zeros(CHECK_WORDS, np.int32))
        args.append(buf)
    launch(r.asm["ptx"], r.metadata, args, dims, mem=mem)
    out = mem.read_back(addrs[1], arrays[1])
    words = mem.read_back(buf, np.zeros(CHECK_WORDS, np.int32)) if checked else None
    return words, out, r


# ---------------------------------------------------------------- the option

def test_checked_mode_is_an_option_in_the_key_and_the_pipeline():
    assert CompileOptions.resolve(checked=True).key()["checked"] is True
    assert "checked" not in CompileOptions.resolve(checked=False).key()
    assert default_pipeline("sm_90a", checked=True).startswith("canonicalize,checks,")
    assert "checks" not in default_pipeline("sm_90a")
    assert Config.from_env({"TKJIT_CHECKED": "1"}).checked
    assert Config.from_env({"TKJIT_DEBUG": "1"}).checked
    assert not Config.from_env({"TKJIT_DEBUG": "1", "TKJIT_CHECKED": "0"}).checked
    assert not Config.from_env({}).checked


def test_explain_says_what_checked_mode_checks():
    k = tkjit.compile(SHIFT, filename="shift.tk", checked=True, cache=False)
    text = str(k.explain())
    assert "run-time check(s)" in text and "both of which emit them" in text


# ---------------------------------------------------------------- the interpreter

@pytest.mark.parametrize("src,file,scalars,says", BAD_LAUNCHES)
def test_the_interpreter_says_the_same_with_and_without_the_checks(src, file, scalars, says):
    plain, _ = _interpret(src, file, scalars, checked=False)
    checked, _ = _interpret(src, file, scalars, checked=True)
    assert plain is not None and checked is not None
    assert says in plain.message
    assert str(checked) == str(plain)  # the message, file:line:col and carets


# ---------------------------------------------------------------- the simulated GPU

@pytest.mark.parametrize("src,file,scalars,says", BAD_LAUNCHES)
def test_a_checked_launch_reports_the_interpreters_error(src, file, scalars, says):
    words, _, r = _simulate(src, file, scalars)
    error = check_error(words, r.metadata["device_checks"], src, file)
    assert isinstance(error, CheckError) and isinstance(error, InterpreterError)
    expected, _ = _interpret(src, file, scalars, checked=False)
    assert str(error) == str(expected)
    assert error.span.location() == expected.span.location()


@pytest.mark.parametrize("src,file,scalars", [(SHIFT, "shift.tk", (0, 1)), (SHIFT, "shift.tk", (0, 3)),
                                              (LEAD, "lead.tk", (1,)), (DIVIDE, "divide.tk", (3,))])
def test_a_good_checked_launch_computes_what_the_unchecked_one_does(src, file, scalars):
    arrays, _ = _arrays(src)
    words, checked, _ = _simulate(src, file, scalars, arrays=[a.copy() for a in arrays])
    assert not words.any()
    _, plain, _ = _simulate(src, file, scalars, checked=False, arrays=[a.copy() for a in arrays])
    np.testing.assert_array_equal(checked, plain)
    error, _ = _interpret(src, file, scalars, checked=False)
    assert error is None


def test_a_failed_check_lets_the_kernel_finish_and_a_zero_step_loop_not_spin():
    """Step 0 would loop forever on the GPU: in checked mode the loop gets no trip, the rest of
    the kernel runs (the store before the loop happened), and the buffer names the loop."""
    arrays, _ = _arrays(SHIFT)
    words, out, r = _simulate(SHIFT, "shift.tk", (0, 0), arrays=arrays)
    assert words[0] == 1 and "loop step" in r.metadata["device_checks"][words[1]]["message"]
    np.testing.assert_array_equal(out, arrays[0] * 2.0)


def test_unchecked_stores_out_of_range_are_dropped_not_written_outside():
    """Without checked mode a coordinate past either end writes nothing outside the tensor:
    the rows it would cover are clipped (outputs NaN-poisoned around, the simulator asserts
    nothing there was written; tiles no block stores stay NaN)."""
    import torch
    from simkit import lower, simulate
    kernel = lower(SHIFT_ONLY, name="shift_only.tk")
    x = torch.rand(64, 64)
    for s in (-1, 1, -3, 3, -7, 100, -(2**20)):
        (got,) = simulate(kernel, [x, torch.zeros(64, 64), s], [1])
        for t in range(4):
            rows = slice(16 * t, 16 * t + 16)
            if 0 <= t - s < 4:
                torch.testing.assert_close(got[rows], x[16 * (t - s):16 * (t - s) + 16] * 2.0)
            else:
                assert torch.isnan(got[rows]).all(), (s, t)


def test_unchecked_ptx_has_no_check_and_no_error_buffer():
    for src in (SHIFT, LEAD, DIVIDE):
        r = compiler.compile(src, CompileOptions.resolve(cache=False), until="ptx")
        assert "atom." not in r.asm["ptx"] and "_checks" not in r.asm["ptx"]
        assert "device_checks" not in r.metadata
        assert all(p["name"] != "__checks" for p in r.metadata["params"])


# ---------------------------------------------------------------- the general sm_90a lowering

OFFSET_GEMM = """
kernel offset_gemm(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<f32>[M, N], off: i32) {
  for (m, n) in blocks(M / 128, N / 128) {
    acc: rt<f32>[128, 128] = zeros()
    for k in 0 .. K / 64 {
      a: st<bf16>[128, 64] = A.tile(m, k)
      b: st<bf16>[64, 128] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    C.tile(m + off, n) = acc
  }
}
"""


def test_the_general_lowering_emits_the_checks_of_a_wgmma_kernel():
    pytest.importorskip("tkjit.runtime.toolchain")
    from tkjit.runtime.toolchain import find_tool
    try:
        find_tool("ptxas")
    except tkjit.errors.ToolchainError:
        pytest.skip("no ptxas")
    r = compiler.compile(OFFSET_GEMM, CompileOptions.resolve(checked=True, cache=False),
                         filename="offset_gemm.tk", until="cubin")
    assert (r.metadata["backend"], r.metadata.get("lowering")) == ("wgmma", "general")
    checks = r.metadata["device_checks"]
    assert any(c["message"].startswith("store: tile coordinate") for c in checks)
    assert r.asm["ptx"].count("atom.global.cas.b32") >= len(checks)
    assert r.metadata["params"][3]["name"] == "off" and r.metadata["params"][4]["name"] == "__checks"
    plain = compiler.compile(OFFSET_GEMM, CompileOptions.resolve(cache=False), filename="offset_gemm.tk",
                             until="ptx")
    assert "atom." not in plain.asm["ptx"]


def test_the_interpreter_refuses_the_offset_gemm_as_a_checked_gpu_launch_would():
    """What the GPU test compares a checked launch of OFFSET_GEMM with."""
    import torch
    a, b = torch.rand(256, 64).bfloat16(), torch.rand(64, 256).bfloat16()
    c = torch.zeros(256, 256)
    k = tkjit.compile(OFFSET_GEMM, filename="offset_gemm.tk", backend="interpret", checked=True, cache=False)
    with pytest.raises(InterpreterError, match=r"store: tile coordinate 2 of C is out of range: C has 2 "
                                               r"tiles of 128 rows along dimension 0 \(M = 256\)") as info:
        k(a, b, c, 1)
    assert info.value.span.location() == "offset_gemm.tk:10:5"


def test_a_pipeline_of_ones_own_that_names_checks_runs_them_too():
    options = CompileOptions.resolve(pipeline="canonicalize,checks", cache=False)
    assert options.runs_checks and not options.checked
    r = compiler.compile(SHIFT, options, filename="shift.tk", until="ptx")
    assert r.metadata["device_checks"] and "atom.global.cas.b32" in r.asm["ptx"]
    assert not CompileOptions.resolve(pipeline="canonicalize", cache=False).runs_checks


@pytest.mark.parametrize("line,says", [
    ('check {id = 0, message = "x {1}"} %ok, %c0', "the message names value 1, but the check reports 1"),
    ('check {id = 0, message = "x"} %c0', "the condition expected bool"),
    ('check {id = 0, message = "x"} %ok, %ok', "reported value 0 expected i32"),
])
def test_the_verifier_refuses_a_malformed_check(line, says):
    from tkjit.errors import DiagnosticError
    from tkjit.ir.parser import parse_kernel
    text = ("kernel @k(%X: gl<f32>[M, 16]) {\n  %c0 = const {value = 0} : i32\n"
            "  %ok = const {value = true} : bool\n  " + line + "\n}\n")
    with pytest.raises(DiagnosticError, match=says):
        parse_kernel(text, "k.tkir")


def test_the_roles_interpreter_runs_the_checks_as_the_general_lowering_schedules_them():
    """interpreter/roles.py runs the IR after the Hopper passes (producer and consumers as
    coroutines over the protocol): with the checks in, a good launch matches the plain
    interpreter and a bad one raises the same located error."""
    import torch

    from tkjit.interpreter.roles import run_roles
    k = tkjit.compile(OFFSET_GEMM, filename="offset_gemm.tk", checked=True, cache=False)
    a, b = torch.rand(256, 64).bfloat16(), torch.rand(64, 256).bfloat16()
    ref, mine = torch.zeros(256, 256), torch.zeros(256, 256)
    k(a, b, ref, 0)
    run_roles(k.ir, [a, b, mine, 0])
    assert torch.equal(ref, mine)
    with pytest.raises(InterpreterError) as plain:
        k(a, b, torch.zeros(256, 256), -1)
    with pytest.raises(InterpreterError) as roles:
        run_roles(k.ir, [a, b, torch.zeros(256, 256), -1])
    assert str(roles.value) == str(plain.value)
