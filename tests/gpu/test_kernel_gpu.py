"""On a GPU: tkjit.compile/load → kernel(*cuda_tensors) through the whole stack (front end, passes,
code generator, ptxas, the disk cache, module load, the launcher), checked against PyTorch on
fresh random inputs with poisoned (NaN) outputs. The same kernel object also runs CPU tensors on
the interpreter."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.config import reset_config

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def poisoned(*shape, device="cuda"):
    return torch.full(shape, float("nan"), dtype=torch.bfloat16, device=device)


@pytest.mark.parametrize("m, n, k", [(256, 512, 128), (200, 300, 100)])
def test_gemm_matches_torch(m, n, k):
    gemm = tkjit.load(EXAMPLES / "gemm.tk")
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    c = poisoned(m, n)
    gemm(a, b, c)
    torch.cuda.synchronize()
    expected = (a.double() @ b.double()).to(torch.bfloat16)
    torch.testing.assert_close(c, expected, rtol=1.6e-2, atol=1e-2)


def test_softmax_on_the_gpu_and_on_the_interpreter_agree():
    softmax = tkjit.load(EXAMPLES / "softmax.tk")
    x = torch.randn(40, 1024, dtype=torch.bfloat16, device="cuda")
    y = poisoned(40, 1024)
    softmax(x, y)
    torch.cuda.synchronize()
    expected = torch.softmax(x.float(), dim=1).to(torch.bfloat16)
    torch.testing.assert_close(y, expected, rtol=1.6e-2, atol=1e-3)
    y_cpu = poisoned(40, 1024, device="cpu")
    softmax(x.cpu(), y_cpu)  # the same kernel object, on the CPU interpreter
    torch.testing.assert_close(y_cpu, y.cpu(), rtol=1.6e-2, atol=1e-3)


def test_a_cached_kernel_in_a_new_kernel_object(tmp_path, monkeypatch):
    monkeypatch.setenv("TKJIT_CACHE_DIR", str(tmp_path))
    reset_config()
    first = tkjit.load(EXAMPLES / "softmax.tk")
    first.binary  # noqa: B018 - assembles and stores the entry
    second = tkjit.load(EXAMPLES / "softmax.tk")
    assert second.binary == first.binary
    x = torch.randn(16, 1024, dtype=torch.bfloat16, device="cuda")
    y = poisoned(16, 1024)
    second(x, y)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, torch.softmax(x.float(), dim=1).to(torch.bfloat16), rtol=1.6e-2, atol=1e-3)
