"""The launcher's side of TMA tensor maps, on the CPU: tensor-map entries of the metadata are not
arguments; the parameter block points at 64-byte-aligned maps encoded per (pointer, shape) (a
recording fake stands in for the driver's encoder); rows TMA cannot address are refused before
the launch, naming the argument."""
from __future__ import annotations

import ctypes

import pytest
import torch

from test_tensormap import FakeEncode, entry
from tkjit.errors import LaunchError
from tkjit.runtime.launcher import Launcher
from tkjit.runtime.tensormap import tensor_map_encoders
from support import fake_cuda_tensor_class


FakeCuda = fake_cuda_tensor_class()


SIGNATURE = [{"kind": "global", "name": "A", "dtype": "bf16", "dims": ["M", "K"]},
             {"kind": "global", "name": "C", "dtype": "bf16", "dims": ["M", 64]},
             entry(param=0), entry(param=1, box=(64, 64), fallback=True)]


def launcher_with(fake):
    calls = []

    def launch(fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        pointers = (ctypes.c_void_p * 6).from_address(params)  # A, C, M, K, then the two maps
        calls.append([pointers[i] for i in range(6)])
        return (0,)

    launcher = Launcher(object(), SIGNATURE, [["dim", "M"]], 384, 0, name="k", launch=launch,
                        current_device=lambda: 0, current_stream=lambda dev: 0, encode_map=fake)
    return launcher, calls


def test_the_launcher_points_the_parameter_block_at_the_maps():
    fake = FakeEncode()
    launcher, calls = launcher_with(fake)
    a = torch.zeros(256, 128, dtype=torch.bfloat16).as_subclass(FakeCuda)
    c = torch.zeros(256, 64, dtype=torch.bfloat16).as_subclass(FakeCuda)
    launcher(a, c)
    launcher(a, c)
    assert len(calls) == 2 and len(fake.calls) == 2  # one encode per map, then cache hits
    a_map, c_map = calls[0][4], calls[0][5]
    assert a_map % 64 == 0 and c_map % 64 == 0 and calls[1][4:] == [a_map, c_map]
    assert fake.calls[0] == (a.data_ptr(), (128, 256), (256,))
    assert fake.calls[1] == (c.data_ptr(), (64, 256), (128,))
    assert ctypes.c_int32.from_address(calls[0][3]).value == 128  # K still goes as a named dim


def test_the_launcher_refuses_rows_tma_cannot_address():
    launcher, calls = launcher_with(FakeEncode())
    a = torch.zeros(256, 100, dtype=torch.bfloat16).as_subclass(FakeCuda)
    c = torch.zeros(256, 64, dtype=torch.bfloat16).as_subclass(FakeCuda)
    with pytest.raises(LaunchError, match=r"k: argument 0 \('A'\): TMA needs rows of a multiple of 16"):
        launcher(a, c)
    assert calls == []


def test_encoders_come_from_the_signature_in_order():
    encs = tensor_map_encoders(SIGNATURE, 2, "k", FakeEncode())
    assert [e.spec.param for e in encs] == [0, 1] and encs[1].spec.fallback


def test_rows_tma_cannot_address_go_to_on_refusal_as_rows_not_aligned():
    """A kernel without the copying fallback for A (A's K must be a multiple of 8): the fast path
    refuses other K to ``on_refusal`` (where the kernel object takes its variant with the
    fallback), and the checker says why with RowsNotAligned, naming the argument."""
    from tkjit.errors import RowsNotAligned
    refused = []
    launcher = Launcher(object(), SIGNATURE, [["dim", "M"]], 384, 0, name="k", launch=lambda *a: (0,),
                        current_device=lambda: 0, current_stream=lambda dev: 0, encode_map=FakeEncode(),
                        on_refusal=lambda args, stream, checked: refused.append(args))
    assert launcher.row_multiples == {"K": (8, 0)}
    c = torch.zeros(256, 64, dtype=torch.bfloat16).as_subclass(FakeCuda)
    launcher(torch.zeros(256, 128, dtype=torch.bfloat16).as_subclass(FakeCuda), c)
    assert not refused
    bad = torch.zeros(256, 100, dtype=torch.bfloat16).as_subclass(FakeCuda)
    launcher(bad, c)
    assert len(refused) == 1
    with pytest.raises(RowsNotAligned, match=r"k: argument 0 \('A'\): TMA needs rows of a multiple of 16 bytes, "
                                             r"but a row of shape \[256, 100\] is 100 x bf16 = 200 bytes"):
        launcher.check_args((bad, c))
