"""On a GPU: arguments by parameter name through the kernel object, on the first launch and on
the fast path installed after it (native or Python), and through @fill_sms's dispatch (gemm)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tkjit

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_softmax_by_name_twice():
    softmax = tkjit.load(EXAMPLES / "softmax.tk")
    x = torch.randn(40, 1024, dtype=torch.bfloat16, device="cuda")
    for _ in range(2):  # the second call goes through the fast path installed by the first
        y = torch.full_like(x, float("nan"))
        softmax(Y=y, X=x)
        torch.cuda.synchronize()
        torch.testing.assert_close(y.float(), torch.softmax(x.float(), -1), rtol=2e-2, atol=2e-3)


def test_gemm_by_name_through_fill_sms():
    gemm = tkjit.load(EXAMPLES / "gemm.tk")
    a = torch.randn(256, 128, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(128, 512, dtype=torch.bfloat16, device="cuda")
    for _ in range(2):
        c = torch.full((256, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
        gemm(a, C=c, B=b)
        torch.cuda.synchronize()
        torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-1)
    with pytest.raises(tkjit.LaunchError, match="no parameter 'D'"):
        gemm(a, b, D=c)
