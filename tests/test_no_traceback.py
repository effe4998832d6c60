"""Issue 20: inputs that gave a Python traceback, an unlocated error or a hang now give a located
diagnostic (or, for a launch, the same LaunchError on both backends)."""
from __future__ import annotations

import os
import time

import pytest
import torch

import tkjit
from support import fake_cuda_tensor_class
from tkjit.cache import DiskCache
from tkjit.cli import main
from tkjit.config import get_config, reset_config
from tkjit.errors import DiagnosticError, LaunchError, TkError, VerifyError
from tkjit.frontend.parser import MAX_NESTING

SCALE = """kernel k<S = 1.0>(X: gl<f32>[N, 64], Y: gl<f32>[N, 64]) {
  for i in blocks(N / 16) {
    x: rt<f32>[16, 64] = X.tile(i, 0)
    Y.tile(i, 0) = x * S
  }
}
"""


def body(inner: str) -> str:
    return ("kernel k(X: gl<f32>[N, 64], Y: gl<f32>[N, 64]) {\n  for i in blocks(N / 16) {\n"
            f"    x: rt<f32>[16, 64] = X.tile(i, 0)\n{inner}\n    Y.tile(i, 0) = x\n  }}\n}}\n")


def located(source: str, **kw) -> str:
    """The first line of the diagnostic compiling ``source`` gives; it must be located."""
    with pytest.raises(DiagnosticError) as err:
        tkjit.compile(source, **kw)
    first = err.value.render().splitlines()[0]
    assert first.startswith("<string>:") and ": error: " in first, first
    return first


# --- constants --------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_constant_is_a_located_diagnostic(value):
    first = located(SCALE, constants={"S": value})
    assert first.startswith("<string>:1:10: error: constants: S = ") and "not a finite number" in first


def test_a_nan_constant_from_the_command_line(tmp_path, capsys):
    path = tmp_path / "scale.tk"
    path.write_text(SCALE)
    assert main(["compile", str(path), "-D", "S=nan", "--emit", "tkir"]) != 0
    err = capsys.readouterr().err
    assert f"{path}:1:10: error: constants: S = nan is not a finite number" in err
    assert "Traceback" not in err


# --- nesting and literals ---------------------------------------------------------------------

@pytest.mark.parametrize("inner", [
    "    x = " + "max(" * 300 + "x" + ", x)" * 300,
    "    x = x * " + "(1.0 + " * 600 + "1.0" + ")" * 600,
    "    " + "if true {\n" * 300 + "x = x\n" + "}\n" * 300,
    "    " + "".join(f"for j{d} in 0 .. 1 {{\n" for d in range(300)) + "x = x\n" + "}\n" * 300,
    "    x = " + "-" * 300 + "x",
])
def test_deep_nesting_is_refused_where_it_goes_too_deep(inner):
    first = located(body(inner), cache=False)
    assert f"nested too deeply: more than {MAX_NESTING}" in first and not first.startswith("<string>:1:1:")


@pytest.mark.parametrize("inner", [
    "    x = " + "max(" * 90 + "x" + ", x)" * 90,
    "    " + "if true {\n" * 90 + "x = x + 1.0\n" + "}\n" * 90,
    "    x = " + "-" * 90 + "x",
])
def test_nesting_under_the_limit_compiles(inner):
    tkjit.compile(body(inner), cache=False).asm["opt"]  # noqa: B018


def test_a_very_long_expression_is_located_at_its_line():
    first = located(body("    x = x" + " + x" * 3000), cache=False)
    assert first.startswith("<string>:4:") and "nested too deeply" in first


def test_an_integer_literal_of_thousands_of_digits():
    first = located(body("    c = " + "9" * 5000), cache=False)
    assert first == "<string>:4:9: error: an integer literal of 5000 digits: at most 100 are read"


# --- what the GPU path cannot take is refused at the front end, located -----------------------

def test_a_bool_scalar_parameter():
    src = body("").replace("Y: gl<f32>[N, 64])", "Y: gl<f32>[N, 64], flag: bool)")
    assert located(src, cache=False).startswith("<string>:1:48: error: parameter 'flag': a kernel cannot take a bool")


def test_an_fp8_register_tile():
    src = body("    z: rt<e4m3>[16, 64] = cvt<e4m3>(x)\n    x = cvt<f32>(z)")
    assert located(src, cache=False).startswith("<string>:4:27: error: e4m3 values in registers")


def test_consumers_pinned_without_a_matrix_product_is_no_crash():
    kernel = tkjit.compile("@consumers(2)\n" + body(""), cache=False)
    assert kernel.asm["ptx"]
    assert "no matrix product" in kernel.explain() and "crashed" not in kernel.explain()


# --- textual IR -------------------------------------------------------------------------------

DIM_IR = """kernel @k(%X: gl<f32>[N, 64], %Y: gl<f32>[N, 64]) {
  %N = dim {name = "N"} : i32
  %Q = dim {name = "Q"} : i32
  %c16 = const {value = 16} : i32
  %0 = cdiv %Q, %c16 : i32
  blocks {schedule = "grid"} %0 {
  ^(%i: i32):
    %c0 = const {value = 0} : i32
    %x = load %X, %i, %c0 : rt<f32>[16, 64]
    store %Y, %x, %i, %c0
  }
}
"""


def test_a_dim_naming_no_parameter_is_refused_by_the_verifier():
    with pytest.raises(VerifyError) as err:
        tkjit.compile(DIM_IR, filename="k.tkir", cache=False)
    assert err.value.render().startswith("k.tkir:3:3: error: dim: names no dimension of a parameter: 'Q'")


# --- f32 scalar arguments: the same refusal on both backends ----------------------------------

SCALED = body("").replace("Y: gl<f32>[N, 64])", "Y: gl<f32>[N, 64], s: f32)").replace(
    "Y.tile(i, 0) = x", "Y.tile(i, 0) = x * s")


def _gpu_launch(value):
    from tkjit.runtime.launcher import Launcher
    fake = fake_cuda_tensor_class()
    sig = [{"kind": "global", "name": "X", "dtype": "f32", "dims": ["N", 64]},
           {"kind": "global", "name": "Y", "dtype": "f32", "dims": ["N", 64], "writes": True},
           {"kind": "scalar", "name": "s", "dtype": "f32"}]
    launcher = Launcher(0xF00D, sig, [["cdiv", ["dim", "N"], 16]], 128, 0, name="k",
                        launch=lambda *a: (0,), launch_api="bindings", current_device=lambda: 0,
                        current_stream=lambda dev: 1)
    x, y = torch.zeros(16, 64).as_subclass(fake), torch.zeros(16, 64).as_subclass(fake)
    x.fake_device = y.fake_device = 0
    launcher(x, y, value)


@pytest.mark.parametrize("value", [10**400, 1e40, -1e39])
def test_an_f32_argument_out_of_range_is_refused_alike_on_both_backends(value):
    kernel = tkjit.compile(SCALED, cache=False)
    with pytest.raises(LaunchError) as interp:
        kernel(torch.zeros(16, 64), torch.zeros(16, 64), value)
    with pytest.raises(LaunchError) as gpu:
        _gpu_launch(value)
    assert interp.value.message == gpu.value.message
    assert interp.value.message.startswith("k: argument 2 ('s'): ") and "does not fit in f32" in gpu.value.message


def test_f32_infinity_itself_still_passes():
    y = torch.zeros(16, 64)
    tkjit.compile(SCALED, cache=False)(torch.ones(16, 64), y, float("inf"))
    assert torch.isinf(y).all()


# --- the cache directory ----------------------------------------------------------------------

def test_a_cache_dir_that_is_a_regular_file_turns_the_cache_off(tmp_path, monkeypatch):
    path = tmp_path / "not-a-dir"
    path.write_text("")
    monkeypatch.setenv("TKJIT_CACHE_DIR", str(path))
    reset_config()
    with pytest.warns(RuntimeWarning, match="is not a directory; the disk cache is off"):
        config = get_config()
    assert config.no_cache
    assert tkjit.compile(SCALED).asm["ptx"]
    reset_config()


def test_a_world_writable_cache_dir_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "shared"
    path.mkdir()
    path.chmod(0o777)
    monkeypatch.setenv("TKJIT_CACHE_DIR", str(path))
    reset_config()
    with pytest.warns(RuntimeWarning, match="writable by every user"):
        assert get_config().no_cache
    reset_config()


@pytest.mark.parametrize("plant", ["fifo", "dev-zero"])
def test_a_fifo_or_a_link_to_dev_zero_in_an_entry_does_not_hang(tmp_path, plant):
    cache = DiskCache(tmp_path / "cache")
    key = "ab" * 32
    entry = cache.put(key, {"kernel.cubin": b"\0" * 64}, {"name": "k"})
    target = entry.path / "kernel.cubin"
    target.unlink()
    if plant == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/zero")
    start = time.monotonic()
    ((_, ok, reason),) = cache.verify()
    assert not ok and "not a regular file" in reason
    assert cache.get(key) is None
    assert time.monotonic() - start < 5
    assert not isinstance(cache.entries(), TkError)


def _nested_ir(n: int) -> str:
    lines = ["kernel @k(%X: gl<f32>[N, 64], %Y: gl<f32>[N, 64]) {", '  %N = dim {name = "N"} : i32',
             "  %c16 = const {value = 16} : i32", "  %0 = cdiv %N, %c16 : i32",
             '  blocks {schedule = "grid"} %0 {', "  ^(%i: i32):", "    %c0 = const {value = 0} : i32",
             "    %c1 = const {value = 1} : i32"]
    for d in range(n):
        lines += ["    for %c0, %c1, %c1 {", f"    ^(%j{d}: i32):"]
    lines += ["      yield", "    }"] * n + ["  }", "}"]
    return "\n".join(lines) + "\n"


def test_ir_regions_nested_a_thousand_deep_are_refused_where_they_go_too_deep():
    with pytest.raises(DiagnosticError) as err:
        tkjit.compile(_nested_ir(1000), filename="deep.tkir", cache=False)
    assert err.value.render().startswith("deep.tkir:207:23: error: regions nested more than 100 deep")


def test_ir_regions_nested_under_the_limit_compile():
    assert tkjit.compile(_nested_ir(95), filename="deep.tkir", cache=False).asm["ptx"]
