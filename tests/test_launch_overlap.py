"""Issue 20, item 4: an output that shares memory with another argument -- by part, or the same
tensor passed twice -- is refused at launch, with one message on the interpreter, the generated
Python launcher and the native (C) launcher; read-only inputs may share memory."""
from __future__ import annotations

import pytest
import torch

import tkjit
from support import fake_cuda_tensor_class
from tkjit.errors import LaunchError
from tkjit.runtime import native
from tkjit.runtime.launcher import Launcher

ADD = """
kernel add(X: gl<f32>[N, 64], Y: gl<f32>[N, 64], O: gl<f32>[N, 64]) {
  for i in blocks(N / 16) {
    x: rt<f32>[16, 64] = X.tile(i, 0)
    y: rt<f32>[16, 64] = Y.tile(i, 0)
    O.tile(i, 0) = x + y
  }
}
"""
SIGNATURE = [{"kind": "global", "name": n, "dtype": "f32", "dims": ["N", 64], **w}
             for n, w in (("X", {}), ("Y", {}), ("O", {"writes": True}))]
FakeCuda = fake_cuda_tensor_class()


def cases():
    """name -> (x, y, o) views of CPU buffers, and whether the launch is refused."""
    buf = torch.zeros(96, 64)
    x, y = torch.zeros(64, 64), torch.zeros(64, 64)
    return {
        "separate": ((x, y, torch.zeros(64, 64)), None),
        "output overlaps X by half": ((buf[:64], y, buf[32:]), "argument 2 ('O') is written by the kernel and overlaps argument 0 ('X')"),
        "output overlaps Y by half": ((x, buf[:64], buf[32:96]), "argument 2 ('O') is written by the kernel and overlaps argument 1 ('Y')"),
        "output is X": ((x, y, x), "argument 2 ('O') is written by the kernel and is the same memory as argument 0 ('X')"),
        "X and Y are one tensor (read only)": ((x, x, torch.zeros(64, 64)), None),
    }


def interpreter_outcome(args):
    kernel = tkjit.compile(ADD, cache=False)
    try:
        kernel(*args)
    except LaunchError as e:
        return str(e)
    return None


def launcher_outcome(args, api):
    launcher = Launcher(0xF00D, SIGNATURE, [["cdiv", ["dim", "N"], 16]], 128, 0, name="add",
                        launch=(lambda *a: (0,)) if api != "native" else None, launch_api=api,
                        current_device=lambda: 0,
                        current_stream=lambda dev: 1)
    cuda = []
    for t in args:
        c = t.as_subclass(FakeCuda)
        c.fake_device = 0
        cuda.append(c)
    try:
        launcher(*cuda)
    except LaunchError as e:
        return str(e)
    return None


@pytest.mark.parametrize("name", list(cases()))
def test_the_interpreter_refuses_an_output_sharing_memory(name):
    args, refused = cases()[name]
    got = interpreter_outcome(args)
    if refused is None:
        assert got is None
    else:
        assert got is not None and got.startswith("error: add: " + refused), got


@pytest.mark.parametrize("name", list(cases()))
def test_the_gpu_launcher_refuses_the_same_with_the_same_message(name):
    args, refused = cases()[name]
    got = launcher_outcome(args, "bindings")
    assert got == interpreter_outcome(cases()[name][0])
    assert (got is None) == (refused is None) and (refused is None or refused in got)


@pytest.mark.skipif(native.module() is None, reason=native.status())
@pytest.mark.parametrize("name", list(cases()))
def test_the_native_launcher_refuses_the_same(name, monkeypatch):
    import ctypes
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                             ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)
    callback = proto(lambda *a: 0)
    monkeypatch.setattr("tkjit.runtime.launcher._native_launch_address",
                        lambda launch: ctypes.cast(callback, ctypes.c_void_p).value)
    args, refused = cases()[name]
    got = launcher_outcome(args, "native")
    assert got == interpreter_outcome(cases()[name][0])
    assert (got is None) == (refused is None) and (refused is None or refused in got)


def test_the_compiled_kernel_marks_its_outputs():
    from tkjit.codegen.abi import param_entries
    kernel = tkjit.compile(ADD, cache=False)._result.tkir
    writes = [meta.get("writes", False) for _, _, meta, _ in param_entries(kernel) if meta["kind"] == "global"]
    assert writes == [False, False, True]
