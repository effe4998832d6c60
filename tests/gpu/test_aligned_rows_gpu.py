"""On a Hopper GPU: the GEMM compiled for rows of whole 16-byte units (the default) meets rows TMA
cannot address. The launcher refuses them to the kernel object, which compiles the variant with
the copying producer and the register-store epilogue once and launches it from then on, for any
rows. Fresh random inputs, C poisoned with NaN."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tkjit

pytestmark = pytest.mark.gpu
SOURCE = (Path(__file__).resolve().parents[2] / "examples" / "gemm.tk").read_text()


def run(kernel, m, n, k):
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    kernel(a, b, c)
    torch.cuda.synchronize()
    ref = a.float() @ b.float()
    err = ((c.float() - ref).norm() / ref.norm()).item()
    assert err <= 1e-2 and not torch.isnan(c).any(), f"{m}x{n}x{k}: relative error {err:.3e}"


def test_unaligned_rows_switch_a_kernel_to_its_variant_with_the_fallback():
    kernel = tkjit.compile(SOURCE.replace("@fill_sms(BM, BN, SPLIT)", ""), filename="gemm.tk")
    run(kernel, 512, 512, 256)
    assert kernel.metadata["assumes_aligned_rows"] and kernel._general is None
    run(kernel, 300, 520, 100)           # K = 100: A's rows are 200 bytes
    assert kernel._general is not None and kernel._general.options.unaligned_rows
    run(kernel, 512, 512, 256)           # aligned again: through the variant, still right
    run(kernel, 129, 257, 64)            # N = 257: B's and C's rows


@pytest.mark.parametrize("m, n, k", [(1000, 1500, 700), (129, 257, 65), (4096, 4096, 64)])
def test_fill_sms_variants_take_unaligned_rows_too(m, n, k):
    kernel = tkjit.compile(SOURCE, filename="gemm.tk")
    run(kernel, m, n, k)
    run(kernel, m, n, k + 8 - k % 8 if k % 8 else k)
