"""On a Hopper GPU: split-K as a schedule option of the general sm_90a lowering (a cluster of SPLIT
CTAs per tile, CTA r running its share of the K loop, partials added through distributed shared
memory over the drained ring, each CTA storing its part). Against float32 torch and the
interpreter, at ragged shapes, C poisoned (NaN) inside a poisoned buffer that must stay so."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support import check_placed as check
from support import placed

import tkjit

pytestmark = pytest.mark.gpu

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

BIAS_RELU_SPLIT = """
kernel gemm_bias_relu_split<BM = 128, BN = 128, BK = 64, SPLIT = 2>(A: gl<bf16>[M, K], B: gl<bf16>[K, N],
                                                                  bias: gl<f32>[N], C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) schedule(grid, split = SPLIT) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<bf16>[BM, BK] = A.tile(m, k)
      b: st<bf16>[BK, BN] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    bv: rv<f32>[BN] = bias.tile(n)
    C.tile(m, n) = cvt<bf16>(relu(add_col(acc, bv)))
  }
}
"""




@pytest.mark.parametrize("bm, bn, split, m, n, k", [
    (128, 256, 2, 1000, 3000, 520),     # the benchmark's ragged shape, split
    (128, 256, 2, 128, 14336, 4096),    # the M = 128 shape @fill_sms splits
    (128, 128, 4, 128, 4096, 4096),
    (64, 64, 2, 200, 312, 1000),        # no dimension a multiple of its tile (rows TMA can address)
    (128, 128, 4, 200, 304, 320),       # 5 K steps over 4 CTAs: 2, 2, 1 and 0 trips
    (128, 128, 4, 128, 256, 64),        # 1 K step: three CTAs add zeros
    (128, 128, 4, 128, 256, 16),        # K below one K tile
])
def test_general_split_k_matches_torch(bm, bn, split, m, n, k):
    kernel = tkjit.load(EXAMPLES / "gemm.tk", constants={"BM": bm, "BN": bn, "SPLIT": split},
                        lowering="general", require_hopper=True)
    torch.manual_seed(0)
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    buf, c = placed(m, n)
    kernel(a, b, c)
    assert kernel.metadata["lowering"] == "general" and kernel.metadata["gemm"]["split"] == split
    check(c, a.float() @ b.float(), buf)
    again = torch.full_like(c, float("nan"))
    kernel(a, b, again)
    torch.cuda.synchronize()
    assert torch.equal(c, again), "the partials are added in a fixed order"


def test_general_split_k_with_an_epilogue_matches_torch_and_the_interpreter():
    kernel = tkjit.compile(BIAS_RELU_SPLIT, lowering="general", require_hopper=True)
    torch.manual_seed(0)
    m, n, k = 300, 520, 1000
    a = torch.randn(m, k, dtype=torch.bfloat16)
    b = torch.randn(k, n, dtype=torch.bfloat16)
    bias = torch.randn(n)
    buf, c = placed(m, n)
    kernel(a.cuda(), b.cuda(), bias.cuda(), c)
    assert kernel.metadata["lowering"] == "general"
    check(c, torch.relu(a.float().cuda() @ b.float().cuda() + bias.cuda()), buf)
    cpu = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    kernel(a, b, bias, cpu)   # the interpreter
    err = ((c.cpu().float() - cpu.float()).norm() / cpu.float().norm()).item()
    assert err < 1e-2
