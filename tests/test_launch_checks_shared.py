"""Issue 20, item 3: every bad launch goes through the interpreter and through the GPU launcher's
checks (the generated Python path and, where it builds, the C one; CPU tensors dressed as CUDA
tensors, a stand-in for cuLaunchKernel, the compiler's real metadata), and each refuses it with
the same message (runtime/launch_checks.py, runtime/overlap.py)."""
from __future__ import annotations

import ctypes

import pytest
import torch

import tkjit
from support import fake_cuda_tensor_class
from tkjit.errors import LaunchError
from tkjit.runtime import native
from tkjit.runtime.launcher import Launcher

SRC = """
kernel k(X: gl<f32>[N, 64], W: gl<f32>[M, 64], Y: gl<f32>[N, 64], s: f32, n: i32) {
  for i in blocks(N / 16) {
    x: rt<f32>[16, 64] = X.tile(i, 0)
    w: rt<f32>[16, 64] = W.tile(i // (N // M), 0)
    Y.tile(i, 0) = x * s + w
  }
}
"""
FakeCuda = fake_cuda_tensor_class()


def good(**change):
    args = dict(X=torch.zeros(64, 64), W=torch.zeros(32, 64), Y=torch.zeros(64, 64), s=0.5, n=3)
    args.update(change)
    return list(args.values())


def bad_launches():
    buf = torch.zeros(96, 64)
    return {
        "too few arguments": good()[:4],
        "dtype": good(X=torch.zeros(64, 64, dtype=torch.float16)),
        "rank": good(W=torch.zeros(32, 64, 1)),
        "fixed dim": good(X=torch.zeros(64, 32)),
        "named dim": good(Y=torch.zeros(48, 64)),
        "not contiguous": good(X=torch.zeros(64, 64).T),
        "i32 given a float": good(n=1.5),
        "i32 given a bool": good(n=True),
        "i32 too big": good(n=2**31),
        "f32 given a str": good(s="0.5"),
        "f32 too big": good(s=1e40),
        "f32 far too big": good(s=10**400),
        "output overlaps X": good(X=buf[:64], Y=buf[32:]),
        "output is X": (lambda x: good(X=x, Y=x))(torch.zeros(64, 64)),
        "divisor 0": good(W=torch.zeros(128, 64)),
        "coordinate out of range": good(W=torch.zeros(48, 64)),
    }


@pytest.fixture(scope="module")
def kernel():
    k = tkjit.compile(SRC, filename="k.tk", cache=False)
    k.asm["ptx"]  # noqa: B018 - the stage that writes the metadata
    return k


def interpreter(kernel, args):
    try:
        kernel(*args)
    except LaunchError as e:
        return e.message
    return None


def gpu(kernel, args, api, monkeypatch=None):
    meta = kernel._result.metadata
    launch = (lambda *a: (0,))
    if api == "native":
        proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                                 ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)
        callback = proto(lambda *a: 0)
        monkeypatch.setattr("tkjit.runtime.launcher._native_launch_address",
                            lambda _: ctypes.cast(callback, ctypes.c_void_p).value)
        launch = None
    launcher = Launcher(0xF00D, meta["params"], meta["grid"], meta["block"], 0, name=kernel.name,
                        launch=launch, launch_api=api, current_device=lambda: 0,
                        current_stream=lambda dev: 1, checks=meta.get("launch_checks", ()))
    dressed = []
    for a in args:
        if isinstance(a, torch.Tensor):
            a = a.as_subclass(FakeCuda)
            a.fake_device = 0
        dressed.append(a)
    try:
        launcher(*dressed)
    except LaunchError as e:
        return e.message
    return None


def test_the_good_launch_passes_everywhere(kernel, monkeypatch):
    assert interpreter(kernel, good()) is None and gpu(kernel, good(), "bindings") is None
    if native.module() is not None:
        assert gpu(kernel, good(), "native", monkeypatch) is None


@pytest.mark.parametrize("case", list(bad_launches()))
def test_every_bad_launch_is_refused_alike(kernel, case, monkeypatch):
    args = bad_launches()[case]
    on_interpreter = interpreter(kernel, args)
    assert on_interpreter is not None and on_interpreter.startswith("k: "), on_interpreter
    assert gpu(kernel, args, "bindings") == on_interpreter
    if native.module() is not None:
        assert gpu(kernel, args, "native", monkeypatch) == on_interpreter
