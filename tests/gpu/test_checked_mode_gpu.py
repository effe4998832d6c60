"""On a Hopper GPU: checked mode (tkjit.compile(..., checked=True)) on both backends.

A bad launch raises CheckError (an InterpreterError) with the interpreter's message at the same
line:col, without hanging (the warp-specialized wgmma kernel's roles finish their protocol), and
the context stays usable: a good launch right after computes what the unchecked kernel does.
The register-tile kernels come from tests/test_checked_mode.py (where the PTX simulator runs
them on the CPU); the wgmma one is a general-lowering GEMM whose store row is offset by a scalar.
"""
from __future__ import annotations

import re

import pytest
import torch
from test_checked_mode import BAD_LAUNCHES, DIVIDE, LEAD, OFFSET_GEMM, SHIFT, _arrays

import tkjit
from tkjit.errors import CheckError, InterpreterError

pytestmark = pytest.mark.gpu


def _cuda(src):
    arrays, _ = _arrays(src)
    return [torch.from_numpy(a).cuda() for a in arrays]


def _interpreter_error(src, file, tensors, scalars):
    k = tkjit.compile(src, filename=file, backend="interpret", cache=False)
    with pytest.raises(InterpreterError) as info:
        k(*[t.cpu() for t in tensors], *scalars)
    return info.value


@pytest.mark.parametrize("src,file,scalars,says", BAD_LAUNCHES)
def test_register_tile_checked_launch_raises_the_interpreters_error(src, file, scalars, says):
    k = tkjit.compile(src, filename=file, checked=True)
    tensors = _cuda(src)
    with pytest.raises(CheckError) as info:
        k(*tensors, *scalars)
    assert k.metadata["backend"] == "mma.sync"
    expected = _interpreter_error(src, file, tensors, scalars)
    assert says in info.value.message
    if src is DIVIDE:  # every block fails, each with its own dividend: the GPU reports whichever came first
        assert info.value.span.location() == expected.span.location()
        assert re.fullmatch(r"mod: integer division by zero \(\d+ % 0\)", info.value.message)
    else:  # one block fails, or all with the same values
        assert str(info.value) == str(expected)
    good = {SHIFT: (0, 1), LEAD: (1,), DIVIDE: (3,)}[src]  # the context is still usable
    again = _cuda(src)
    plain = [t.clone() for t in again]
    k(*again, *good)
    tkjit.compile(src, filename=file)(*plain, *good)
    torch.cuda.synchronize()
    torch.testing.assert_close(again[1], plain[1], rtol=0, atol=0)


def _gemm_args(off_rows=256):
    torch.manual_seed(0)
    a = torch.randn(off_rows, 128, device="cuda").bfloat16()
    b = torch.randn(128, 256, device="cuda").bfloat16()
    return a, b, torch.full((off_rows, 256), float("nan"), device="cuda")


def test_general_lowering_checked_launch_raises_the_interpreters_error():
    k = tkjit.compile(OFFSET_GEMM, filename="offset_gemm.tk", checked=True, require_hopper=True)
    a, b, c = _gemm_args()
    for off in (1, -1):  # one row of blocks fails, every one of them with the same values
        with pytest.raises(CheckError) as info:
            k(a, b, c, off)
        assert k.metadata["backend"] == "wgmma" and k.metadata["lowering"] == "general"
        expected = _interpreter_error(OFFSET_GEMM, "offset_gemm.tk", [a, b, c], (off,))
        assert str(info.value) == str(expected)
        assert info.value.span.location() == "offset_gemm.tk:10:5"


def test_general_lowering_good_checked_launch_matches_unchecked():
    checked = tkjit.compile(OFFSET_GEMM, filename="offset_gemm.tk", checked=True, require_hopper=True)
    plain = tkjit.compile(OFFSET_GEMM, filename="offset_gemm.tk", require_hopper=True)
    a, b, c1 = _gemm_args()
    c2 = c1.clone()
    checked(a, b, c1, 0)
    plain(a, b, c2, 0)
    torch.cuda.synchronize()
    torch.testing.assert_close(c1, c2, rtol=0, atol=0)
    torch.testing.assert_close(c1, a.float() @ b.float(), rtol=2e-2, atol=2e-2)


def test_unchecked_out_of_range_stores_are_dropped_on_both_backends():
    """No checks: a store past either end of C writes nothing outside it (C sits in a larger
    buffer of sentinels), and the rows no block stores keep their NaN."""
    plain = tkjit.compile(OFFSET_GEMM, filename="offset_gemm.tk", require_hopper=True)
    a, b, _ = _gemm_args()
    for off in (1, -1, 7, -(2**20)):
        buf = torch.full((3 * 256 * 256,), 7.0, device="cuda")
        c = buf[256 * 256:2 * 256 * 256].view(256, 256)
        c.fill_(float("nan"))
        plain(a, b, c, off)
        torch.cuda.synchronize()
        assert (buf[:256 * 256] == 7.0).all() and (buf[2 * 256 * 256:] == 7.0).all()
        want = (a.float() @ b.float())
        for t in range(2):
            rows = slice(128 * t, 128 * t + 128)
            if 0 <= t - off < 2:
                src = slice(128 * (t - off), 128 * (t - off) + 128)
                torch.testing.assert_close(c[rows], want[src], rtol=2e-2, atol=2e-2)
            else:
                assert torch.isnan(c[rows]).all()
