"""Arguments by parameter name, ``kernel(X=x, Y=y)``: on the interpreter, and through both GPU fast
paths (the generated Python function and the native one), which hand a call with names to the
slow path to be bound to positions; what does not fit is a LaunchError that names it."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tkjit
from tkjit.errors import LaunchError
from tkjit.runtime import native
from tkjit.runtime.launcher import Launcher
from support import fake_cuda_tensor_class

SCALE = """
kernel scale(X: gl<f32>[R, 16], Y: gl<f32>[R, 16], a: f32) {
  for i in blocks(R / 16) {
    x: rt<f32>[16, 16] = X.tile(i, 0)
    Y.tile(i, 0) = x * a
  }
}"""


@pytest.fixture(scope="module")
def scale():
    return tkjit.compile(SCALE)


@pytest.mark.parametrize("call", [
    lambda k, x, y: k(X=x, Y=y, a=2.0),
    lambda k, x, y: k(x, a=2.0, Y=y),
    lambda k, x, y: k(x, y, a=2.0),
])
def test_by_name_on_the_interpreter(scale, call):
    x = np.arange(32 * 16, dtype=np.float32).reshape(32, 16)
    y = np.zeros_like(x)
    call(scale, x, y)
    np.testing.assert_array_equal(y, 2 * x)


@pytest.mark.parametrize("kwargs, positional, message", [
    ({"Z": 1}, 0, r"kernel 'scale' has no parameter 'Z' \(its parameters: X, Y, a\)"),
    ({"X": 1}, 1, "X given both by position and by name"),
    ({"a": 1.0}, 1, "missing Y"),
])
def test_what_does_not_fit_is_a_launch_error(scale, kwargs, positional, message):
    x = np.zeros((16, 16), np.float32)
    with pytest.raises(LaunchError, match=message):
        scale(*[x] * positional, **kwargs)


FakeCuda = fake_cuda_tensor_class()
ADD = [{"kind": "global", "name": n, "dtype": "f32", "dims": ["N"]} for n in ("x", "y", "out")]


def cuda(t):
    out = t.as_subclass(FakeCuda)
    out.fake_device = 0
    return out


def apis():
    yield "bindings"
    if native.module() is not None:
        yield "native"


@pytest.mark.parametrize("api", list(apis()))
def test_the_fast_paths_hand_names_to_the_slow_path(api):
    calls = []

    def launch(fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        calls.append((gx, stream))
        return 0 if api == "native" else (0,)
    if api == "native":
        import ctypes
        proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                                 ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)
        launch = proto(launch)
    launcher = Launcher(0xF00D if api == "native" else object(), ADD, [["cdiv", ["dim", "N"], 128]], 128, 0,
                        name="add", launch=launch, launch_api=api, current_device=lambda: 0,
                        current_stream=lambda dev: 77)
    x, y, out = (cuda(torch.zeros(1000)) for _ in range(3))
    launcher.fast(x, y, out)
    launcher.fast(x, out=out, y=y)
    launcher.fast(out=out, y=y, x=x, stream=5)
    assert calls == [(8, 77), (8, 77), (8, 5)]
    with pytest.raises(LaunchError, match="kernel 'add' has no parameter 'z'"):
        launcher.fast(x, y, z=out)
