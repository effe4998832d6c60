"""On a GPU: kernels on strided views (docs/api.md, "Strided tensors"). The GEMM and attention
templates and a general-lowering kernel take views their TMA maps can address as they are (no
copy: no warning); the register-tile backend takes views through its variant with stride
parameters; what neither can take is copied around the launch (a warning) and still correct;
a transposed last dimension, an output overlapping itself or an input, are refused. Outputs are
poisoned, and the memory around every output view is checked untouched.
(The CPU side: tests/test_strided_views.py, tests/test_strided.py.)"""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import tkjit
from tkjit.errors import LaunchError

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEV = "cuda"


def nan(*shape, dtype=torch.bfloat16):
    return torch.full(shape, float("nan"), dtype=dtype, device=DEV)


def rand(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, dtype=dtype, device=DEV)


def run_quietly(kernel, *args):
    """Launch and return the tkjit warnings raised (a copy of a view warns; a view taken as it
    is does not)."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        kernel(*args)
        torch.cuda.synchronize()
    return [str(w.message) for w in got if "copied to a contiguous tensor" in str(w.message)]


@pytest.fixture(scope="module")
def gemm():
    return tkjit.load(EXAMPLES / "gemm.tk")


@pytest.mark.parametrize("m, n, k", [(1024, 1024, 512), (1000, 3000, 520)])
def test_gemm_on_sliced_operands_takes_them_as_they_are(gemm, m, n, k):
    a_base, b_base = rand(m, k + 128), rand(2 * k, n)
    a, b = a_base[:, 64:64 + k], b_base[::2]                # a column slice (offset 128 B), every other row
    c_base = nan(m + 2, n + 64)
    c = c_base[1:1 + m, 32:32 + n]                          # the output: a window of a larger buffer
    a_before, b_before = a_base.clone(), b_base.clone()
    copied = run_quietly(gemm, a, b, c)
    # TMA reads the operand views themselves; C too where the variant @fill_sms picks stores it
    # through TMA (a split-K variant stores registers by pointer: C is then copied back)
    assert not [w for w in copied if "('A')" in w or "('B')" in w], copied
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-1)
    assert c_base[0].isnan().all() and c_base[-1].isnan().all()
    assert c_base[:, :32].isnan().all() and c_base[:, 32 + n:].isnan().all()
    assert torch.equal(a_base, a_before) and torch.equal(b_base, b_before)


def test_gemm_on_a_view_tma_cannot_take_copies_it_and_is_correct(gemm):
    m, n, k = 512, 768, 256
    a = rand(m, k + 3)[:, :k]                               # rows 2 * (k + 3) bytes apart: not 16-byte units
    b = rand(k, n)
    c_base = nan(m, n + 8)
    c = c_base[:, :n]
    copied = run_quietly(gemm, a, b, c)
    assert copied and "argument 0 ('A')" in copied[0] and "dim 0 has stride 259" in copied[0]
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-1)
    assert c_base[:, n:].isnan().all()


def test_a_transposed_last_dimension_is_refused(gemm):
    a = rand(256, 512).t()                                   # 512 x 256 with stride (1, 512)
    with pytest.raises(LaunchError, match=r"argument 0 \('A'\): the tensor's last dimension must be "
                                          r"contiguous \(stride 1\), got stride 512"):
        gemm(a, rand(256, 256), nan(512, 256))


def test_outputs_overlapping_themselves_or_an_input_are_refused(gemm):
    buf = rand(512, 1024)
    with pytest.raises(LaunchError, match=r"argument 2 \('C'\) is written by the kernel and overlaps argument 0"):
        gemm(buf[:, :256], rand(256, 256), buf[:, 512:768])
    with pytest.raises(LaunchError, match=r"argument 2 \('C'\): the kernel stores into it, but its elements overlap"):
        gemm(rand(512, 256), rand(256, 256), nan(1, 256).expand(512, 256))


@pytest.mark.parametrize("d, causal", [(128, False), (64, True)])
def test_attention_on_views_of_a_fused_qkv_projection(d, causal):
    attention = tkjit.load(EXAMPLES / "attention.tk", constants={"D": d, "CAUSAL": causal})
    bsz, n, h = 2, 1000, 4
    qkv = rand(bsz, n, 3 * h * d)
    q, k, v = qkv.view(bsz, n, 3, h, d).permute(2, 0, 3, 1, 4)   # (B, H, N, D) views
    assert not (q.is_contiguous() or k.is_contiguous() or v.is_contiguous())
    o, lse = nan(bsz, h, n, d), nan(bsz, h, n, dtype=torch.float32)
    before = qkv.clone()
    assert run_quietly(attention, q, k, v, o, lse, d ** -0.5) == []
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    torch.testing.assert_close(o.float(), expected, rtol=2e-2, atol=2e-2)
    assert not lse.isnan().any() and torch.equal(qkv, before)
    # the output through a transpose of a (B, N, H, D) buffer: the general lowering stores O
    # through a TMA map of the view's strides (the strided variant), so nothing is copied and
    # nothing around it written
    o_base = nan(bsz, n, h + 1, d)
    o_view = o_base[:, :, :h].transpose(1, 2)
    assert run_quietly(attention, q, k, v, o_view, lse, d ** -0.5) == []
    torch.testing.assert_close(o_view.float(), expected, rtol=2e-2, atol=2e-2)
    assert o_base[:, :, h].isnan().all()


def test_a_general_lowering_kernel_on_views():
    kernel = tkjit.load(EXAMPLES / "gemm_bias_gelu.tk")
    m, n, k = 1000, 768, 320
    a = rand(m, 2 * k)[:, k:]
    b = rand(k, n + 64)[:, 64:]
    bias = rand(n)
    c_base = nan(m, 2 * n)
    c = c_base[:, n:]                                        # the right half of a wider buffer
    assert run_quietly(kernel, a, b, bias, c) == []
    expected = F.gelu(a.float() @ b.float() + bias.float())
    torch.testing.assert_close(c.float(), expected, rtol=2e-2, atol=2e-1)
    assert c_base[:, :n].isnan().all()


def test_a_register_tile_kernel_takes_views_through_its_strided_variant():
    softmax = tkjit.load(EXAMPLES / "softmax.tk", constants={"C": 256})
    x_base = rand(300, 3 * 256)
    x = x_base[:, 256:512]                                   # the middle third of each row
    y_base = nan(2 * 300, 256)
    y = y_base[::2]                                          # every other row
    assert run_quietly(softmax, x, y) == []
    torch.testing.assert_close(y.float(), torch.softmax(x.float(), -1), rtol=2e-2, atol=1e-3)
    assert y_base[1::2].isnan().all()
    assert softmax._strided is not None and softmax._strided.metadata["params"][0]["strides"] == "param"
    contiguous_y = nan(300, 256)                             # contiguous launches keep the default kernel
    softmax(x.contiguous(), contiguous_y)
    torch.testing.assert_close(contiguous_y.float(), y.float(), rtol=0, atol=0)


def test_the_general_lowering_reads_and_writes_a_view_through_its_strided_variant():
    """gemm_alpha_beta loads and stores C from registers (by pointer): a window of a larger C is
    taken by the variant with stride parameters, read and written in place."""
    kernel = tkjit.load(EXAMPLES / "gemm_alpha_beta.tk")
    m, n, k = 1000, 768, 256
    a, b = rand(m, k), rand(k, n)
    c_base = rand(m + 1, n + 40)
    c = c_base[1:, 40:]
    expected = 0.5 * (a.float() @ b.float()) + 2.0 * c.float()
    around = (c_base[0].clone(), c_base[1:, :40].clone())
    assert run_quietly(kernel, a, b, c, 0.5, 2.0) == []
    torch.testing.assert_close(c.float(), expected, rtol=2e-2, atol=2e-1)
    assert torch.equal(c_base[0], around[0]) and torch.equal(c_base[1:, :40], around[1])
    assert kernel._strided is not None and kernel._strided.metadata["lowering"] == "general"
