"""Issue 20, item 5: a division whose divisor is known at launch (tensor dimensions and constants)
is refused before the launch when that divisor is 0, with one message on the interpreter, the
generated launcher and the native (C) launcher; the GPU used to divide by zero silently. (What
depends on block or loop indices -- an out-of-range tile coordinate, H % HKV != 0 in attention --
needs the device-side checked mode: docs/reliability.md.)"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tkjit
from support import fake_cuda_tensor_class
from tkjit.errors import LaunchError
from tkjit.frontend import lower_source
from tkjit.runtime import native
from tkjit.runtime.launch_checks import divisor_checks, launch_checks
from tkjit.runtime.launcher import Launcher

ATTENTION = (Path(__file__).resolve().parent.parent / "examples" / "attention.tk").read_text()
GQA = """
kernel gqa(Q: gl<f32>[H, 16, 64], K: gl<f32>[HKV, 16, 64], O: gl<f32>[H, 16, 64]) {
  for h in blocks(H) {
    g = h // (H // HKV)
    q: rt<f32>[16, 64] = Q.tile(h, 0, 0)
    k: rt<f32>[16, 64] = K.tile(g, 0, 0)
    O.tile(h, 0, 0) = q + k
  }
}
"""
FakeCuda = fake_cuda_tensor_class()

CASES = {  # (H, HKV) -> the refusal, or None
    (4, 2): None,
    (4, 0): "gqa: at gqa.tk:4:15, `H // HKV` divides by `HKV`, which is 0 at this launch (HKV = 0)",
    (1, 2): "gqa: at gqa.tk:4:9, `h // (H // HKV)` divides by `H // HKV`, which is 0 at this launch "
            "(H = 1, HKV = 2)",
}


def args(h, hkv):
    return [torch.zeros(h, 16, 64), torch.zeros(hkv, 16, 64), torch.zeros(h, 16, 64)]


def interpreter(h, hkv):
    try:
        tkjit.compile(GQA, filename="gqa.tk", cache=False)(*args(h, hkv))
    except LaunchError as e:
        return e.message
    return None


def gpu(h, hkv, api):
    kernel = lower_source(GQA, "gqa.tk")
    signature = [{"kind": "global", "name": n, "dtype": "f32", "dims": d, **w}
                 for n, d, w in (("Q", ["H", 16, 64], {}), ("K", ["HKV", 16, 64], {}),
                                 ("O", ["H", 16, 64], {"writes": True}))]
    launcher = Launcher(0xF00D, signature, [["dim", "H"]], 128, 0, name="gqa",
                        launch=(lambda *a: (0,)) if api == "bindings" else None, launch_api=api,
                        current_device=lambda: 0, current_stream=lambda dev: 1,
                        checks=launch_checks(kernel))
    tensors = []
    for t in args(h, hkv):
        t = t.as_subclass(FakeCuda)
        t.fake_device = 0
        tensors.append(t)
    try:
        launcher(*tensors)
    except LaunchError as e:
        return e.message
    return None


@pytest.mark.parametrize("shape", list(CASES))
def test_the_interpreter_refuses_a_zero_divisor_at_launch(shape):
    assert interpreter(*shape) == CASES[shape]


@pytest.mark.parametrize("shape", list(CASES))
def test_the_gpu_launcher_refuses_it_with_the_same_message(shape):
    assert gpu(*shape, "bindings") == CASES[shape]


@pytest.mark.skipif(native.module() is None, reason=native.status())
@pytest.mark.parametrize("shape", list(CASES))
def test_the_native_launcher_refuses_it_too(shape, monkeypatch):
    import ctypes
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                             ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)
    callback = proto(lambda *a: 0)
    monkeypatch.setattr("tkjit.runtime.launcher._native_launch_address",
                        lambda launch: ctypes.cast(callback, ctypes.c_void_p).value)
    assert gpu(*shape, "native") == CASES[shape]


def test_the_compiled_kernel_carries_its_divisors():
    kernel = tkjit.compile(ATTENTION, filename="attention.tk", constants={"D": 64}, cache=False)
    kernel.asm["ptx"]  # noqa: B018 - the stage that writes the metadata
    checks = kernel._result.metadata["launch_checks"]
    assert [c.get("divisor") for c in checks[:2]] == ["HKV", "H // HKV"]
    assert [(c["tensor"], c["axis"], c["side"]) for c in checks[2:]] == [("K", 1, "high"), ("V", 1, "high")]


def test_constant_divisors_and_run_time_divisors_are_not_launch_checks():
    src = GQA.replace("g = h // (H // HKV)", "g = (h // 2) // (h + 1)")
    assert divisor_checks(lower_source(src, "gqa.tk")) == []


COORDINATES = {  # (H, HKV) -> the refusal: g = h // (H // HKV) reaches HKV when H % HKV != 0
    (3, 2): "gqa: at gqa.tk:6:26, index 0 of K (`h // (H // HKV)`) reaches 2 at this launch, but K has "
            "2 entries along dimension 0 (HKV = 2)",
    (6, 4): "gqa: at gqa.tk:6:26, index 0 of K (`h // (H // HKV)`) reaches 5 at this launch, but K has "
            "4 entries along dimension 0 (HKV = 4)",
    (8, 4): None,
    (0, 2): None,  # an empty grid runs nothing: nothing to refuse
    (0, 0): None,
}


@pytest.mark.parametrize("shape", list(COORDINATES))
def test_a_block_index_coordinate_leaving_its_tensor_is_refused_alike(shape, monkeypatch):
    expected = COORDINATES[shape]
    assert interpreter(*shape) == expected
    assert gpu(*shape, "bindings") == expected
    if native.module() is not None:
        import ctypes
        proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                                 ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)
        callback = proto(lambda *a: 0)
        monkeypatch.setattr("tkjit.runtime.launcher._native_launch_address",
                            lambda launch: ctypes.cast(callback, ctypes.c_void_p).value)
        assert gpu(*shape, "native") == expected


@pytest.mark.parametrize("coordinate, refusal", [
    ("X.tile(i - 1, 0)", "k: at <string>:3:26, tile coordinate 0 of X (`i - 1`) goes down to -1 at "
                         "this launch; it must be at least 0"),
    ("X.tile(5, 0)", "k: at <string>:3:26, tile coordinate 0 of X (`5`) reaches 5 at this launch, but X "
                     "has 2 tiles of 16 rows along dimension 0 (N = 32)"),
    ("X.tile(i, 0)", None),
])
def test_coordinates_from_block_indices_and_constants(coordinate, refusal):
    src = ("kernel k(X: gl<f32>[N, 64], Y: gl<f32>[N, 64]) {\n  for i in blocks(N / 16) {\n"
           f"    x: rt<f32>[16, 64] = {coordinate}\n    Y.tile(i, 0) = x\n  }}\n}}\n")
    kernel = tkjit.compile(src, cache=False)
    try:
        kernel(torch.zeros(32, 64), torch.zeros(32, 64))
        got = None
    except LaunchError as e:
        got = e.message
    assert got == refusal


def test_a_negative_constant_coordinate_is_a_compile_time_diagnostic():
    from tkjit.errors import DiagnosticError
    src = ("kernel k(X: gl<f32>[N, 64], Y: gl<f32>[N, 64]) {\n  for i in blocks(N / 16) {\n"
           "    x: rt<f32>[16, 64] = X.tile(-1, 0)\n    Y.tile(i, 0) = x\n  }\n}\n")
    with pytest.raises(DiagnosticError) as err:
        tkjit.compile(src, cache=False)
    assert err.value.render().startswith("<string>:3:33: error: tile coordinate 0 is -1")


def test_a_coordinate_under_an_if_is_not_checked_at_launch():
    src = ("kernel k(X: gl<f32>[N, 64], Y: gl<f32>[N, 64]) {\n  for i in blocks(N / 16) {\n"
           "    x: rt<f32>[16, 64] = X.tile(i, 0)\n    if i > 0 {\n      p: rt<f32>[16, 64] = X.tile(i - 1, 0)\n"
           "      x = x + p\n    }\n    Y.tile(i, 0) = x\n  }\n}\n")
    tkjit.compile(src, cache=False)(torch.ones(32, 64), torch.zeros(32, 64))
