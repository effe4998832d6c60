"""Strided global tensors: the interpreter reads and writes through any strides whose last
dimension is contiguous (views of a fused QKV projection, transposes of leading dimensions, row
slices), refuses a non-contiguous last dimension and an output that overlaps itself; a GPU
launcher whose kernel has no stride parameters for a tensor refuses a view of it as a
StridedArgument naming the argument and the stride (the kernel object then takes its strided
variant or copies: tests/test_strided_views.py, tests/gpu/test_strided_gpu.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tkjit
from tkjit.errors import LaunchError, StridedArgument
from tkjit.runtime.launcher import Launcher
from support import fake_cuda_tensor_class

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def nan(*shape, dtype=torch.bfloat16):
    return torch.full(shape, float("nan"), dtype=dtype)


def test_gemm_on_row_slices_writes_only_its_view():
    gemm = tkjit.load(EXAMPLES / "gemm.tk")
    m, n, k = 70, 90, 40
    a = torch.randn(m, k + 24, dtype=torch.bfloat16)[:, 8:8 + k]     # row stride 64, an offset of 8
    b = torch.randn(2 * k, n, dtype=torch.bfloat16)[::2]              # every other row
    c_full = nan(m, n + 10)
    c = c_full[:, 5:5 + n]
    assert not (a.is_contiguous() or b.is_contiguous() or c.is_contiguous())
    gemm(a, b, c)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=1e-1)
    assert c_full[:, :5].isnan().all() and c_full[:, 5 + n:].isnan().all()  # untouched around it


def test_attention_on_views_of_a_fused_qkv_projection():
    bsz, n, h, d = 1, 100, 2, 64
    attention = tkjit.load(EXAMPLES / "attention.tk", constants={"D": d})
    qkv = torch.randn(bsz, n, 3 * h * d, dtype=torch.bfloat16)
    q, k, v = qkv.view(bsz, n, 3, h, d).permute(2, 0, 3, 1, 4)       # (B, H, N, D) each, strided
    o_bnhd = nan(bsz, n, h, d)
    o = o_bnhd.transpose(1, 2)                                        # written through a transpose
    lse = torch.empty(bsz, h, n)
    attention(q, k, v, o, lse, d ** -0.5)
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
    torch.testing.assert_close(o.float(), expected, rtol=2e-2, atol=2e-2)
    assert not o_bnhd.isnan().any()


def test_softmax_on_a_numpy_row_slice():
    softmax = tkjit.compile("""
kernel softmax(X: gl<f32>[R, 32], Y: gl<f32>[R, 32]) {
  for i in blocks(R / 16) {
    x: rt<f32>[16, 32] = X.tile(i, 0)
    p = exp(sub_row(x, row_max(x)))
    Y.tile(i, 0) = div_row(p, row_sum(p))
  }
}""")
    x = np.random.default_rng(0).standard_normal((40, 32)).astype(np.float32)[::2]
    y = np.zeros((20, 64), np.float32)[:, 16:48]
    softmax(x, y)
    np.testing.assert_allclose(y, torch.softmax(torch.from_numpy(x.copy()), -1).numpy(), rtol=1e-5, atol=1e-6)


def test_the_interpreter_refuses_what_it_cannot_read():
    gemm = tkjit.load(EXAMPLES / "gemm.tk")
    a, b = torch.randn(32, 16, dtype=torch.bfloat16), torch.randn(16, 24, dtype=torch.bfloat16)
    with pytest.raises(LaunchError, match=r"argument 0 \('A'\): the tensor's last dimension must be contiguous \(stride 1\), "
                                          r"got stride 32"):
        gemm(torch.randn(16, 32, dtype=torch.bfloat16).t(), b, nan(32, 24))
    with pytest.raises(LaunchError, match=r"argument 2 \('C'\): the kernel stores into it, but its elements overlap"):
        gemm(a, b, nan(1, 24).expand(32, 24))
    gemm(a, b, c := nan(32, 24))       # an input may overlap itself: a broadcast is only read
    gemm(torch.randn(1, 16, dtype=torch.bfloat16).expand(32, 16), b, c)
    torch.testing.assert_close(c[0].float(), c[31].float())


FakeCuda = fake_cuda_tensor_class()


def test_a_launcher_without_stride_parameters_refuses_a_view_naming_the_argument_and_the_stride():
    def launch(*a):
        raise AssertionError("a strided tensor must not be launched")
    params = [{"kind": "global", "name": n, "dtype": "f32", "dims": ["M", "K"]} for n in ("x", "out")]
    launcher = Launcher(object(), params, [1], 128, 0, name="copy", launch=launch,
                        current_device=lambda: 0, current_stream=lambda dev: 1)
    x = torch.zeros(64, 96)[:, :64].as_subclass(FakeCuda)
    x.fake_device = 0
    out = torch.zeros(64, 64).as_subclass(FakeCuda)
    out.fake_device = 0
    with pytest.raises(StridedArgument, match=r"copy: argument 0 \('x'\): this kernel addresses the tensor row-major "
                                              r"\(it has no stride parameters for it\): dim 0 has stride 96, "
                                              r"row-major needs 64"):
        launcher(x, out)


def test_a_strided_output_sharing_a_buffer_with_an_input_is_refused():
    """Column blocks of one buffer interleave row by row: the byte spans meet, and overlap.py
    refuses (a bound: never a wrong answer)."""
    gemm = tkjit.load(EXAMPLES / "gemm.tk")
    buf = torch.randn(32, 48, dtype=torch.bfloat16)
    with pytest.raises(LaunchError, match=r"argument 2 \('C'\) is written by the kernel and overlaps argument 0"):
        gemm(buf[:, :16], torch.randn(16, 24, dtype=torch.bfloat16), buf[:, 16:40])
