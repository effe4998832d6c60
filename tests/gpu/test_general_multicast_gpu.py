"""On a Hopper GPU: the multicast pair (grid{multicast=2}) as a schedule option of the general
sm_90a lowering -- clusters of 2 CTAs on tile rows 2mp and 2mp + 1, each loading half of the
shared B stage with .multicast::cluster into both, releasing on both CTAs' barriers. Against
float32 torch, the same kernel unpaired and the interpreter, at tile multiples and ragged shapes,
odd tile-row counts (the off-edge CTA loads its half of B, stores nothing), one tile row, K below
one K tile, more units than pairs; C poisoned (NaN) inside a poisoned buffer that must stay so,
repeated launches bit-identical; rows TMA cannot address (the variant the kernel object
compiles for them declines the pair and runs unpaired with the copying producer)."""
from __future__ import annotations

import pytest
import torch
from support import check_placed as check
from support import placed
from test_general_multicast import ABT, BIAS, GEMM, MULTICAST

import tkjit

pytestmark = pytest.mark.gpu
# The kernels are the CPU tests' (tests/test_general_multicast.py); BIAS there defaults to 64 x 64
# tiles, launched here at 128 x 256.


def pair(source=GEMM, lowering="general", **constants):
    return tkjit.compile(source, filename="gemm.tk", pipeline=MULTICAST, constants=constants or None,
                         lowering=lowering, require_hopper=lowering == "general")


@pytest.mark.parametrize("abt", [False, True], ids=["mma_AB", "mma_ABt"])
@pytest.mark.parametrize("bm, bn, m, n, k", [
    (128, 256, 4096, 4096, 4096),      # tile multiples
    (128, 256, 1000, 3000, 520),       # ragged: 8 tile rows, 12 columns
    (128, 256, 384, 512, 256),         # 3 tile rows: the last pair's second CTA is off the edge
    (128, 256, 128, 1024, 320),        # one tile row: every pair's second CTA is off the edge
    (128, 256, 256, 512, 16),          # K below one K tile
    (128, 256, 8192, 8192, 256),       # 32 x 32 tiles: 512 units over the co-resident pairs
    (64, 64, 130, 70, 130),            # 3 tile rows of 64, ragged everywhere
])
def test_the_general_pair_matches_torch(abt, bm, bn, m, n, k):
    kernel = pair(ABT if abt else GEMM, BM=bm, BN=bn)
    torch.manual_seed(0)
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda") if abt else \
        torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    buf, c = placed(m, n)
    kernel(a, b, c)
    md = kernel.metadata
    assert md["lowering"] == "general" and md["gemm"].get("multicast") == 2, md.get("gemm")
    check(c, a.float() @ (b.float().t() if abt else b.float()), buf)
    again = torch.full_like(c, float("nan"))
    kernel(a, b, again)
    torch.cuda.synchronize()
    assert torch.equal(c, again), "repeated launches differ"


@pytest.mark.parametrize("m, n, k", [(1000, 3000, 520), (384, 512, 256), (4096, 4096, 4096)])
def test_the_general_pair_agrees_with_the_unpaired_kernel(m, n, k):
    """(Until 2026-11-27 against the GEMM template's pair, deleted that day.)"""
    general = pair(BM=128, BN=256)
    unpaired = tkjit.compile(GEMM, filename="gemm.tk", constants={"BM": 128, "BN": 256}, lowering="general",
                             require_hopper=True)
    torch.manual_seed(1)
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    buf, c = placed(m, n)
    general(a, b, c)
    ref = torch.full_like(c, float("nan"))
    unpaired(a, b, ref)
    check(c, ref.float(), buf)
    assert unpaired.metadata["lowering"] == "general" and "multicast" not in unpaired.metadata["gemm"]


@pytest.mark.parametrize("m, n, k", [(1000, 1500, 700), (130, 258, 66), (129, 257, 65)])
def test_rows_tma_cannot_address_run_the_unpaired_copying_variant(m, n, k):
    """A launch with such rows compiles the variant with the copying producer, which declines the
    pair (passes/pairs.py): correct against torch, nothing written outside C."""
    kernel = pair(lowering="auto", BM=128, BN=256)
    torch.manual_seed(4)
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    buf, c = placed(m, n)
    kernel(a, b, c)
    variant = kernel._with_unaligned_rows()
    assert variant is not None
    # metadata is the backend's once the PTX is made (a cubin from the disk cache makes none)
    assert ".multicast::cluster" not in variant.asm["ptx"]
    assert variant.metadata["lowering"] == "general"
    check(c, a.float() @ b.float(), buf)


def test_the_general_pair_with_row_and_column_vectors_matches_torch_and_the_interpreter():
    kernel = tkjit.compile(BIAS, pipeline=MULTICAST, lowering="general", require_hopper=True,
                           constants={"BM": 128, "BN": 256})
    torch.manual_seed(2)
    m, n, k = 300, 520, 1000                  # 3 tile rows (off-edge CTA), ragged N and K
    a, b = torch.randn(m, k, dtype=torch.bfloat16), torch.randn(k, n, dtype=torch.bfloat16)
    rb, cb = torch.randn(m), torch.randn(n)
    buf, c = placed(m, n)
    kernel(a.cuda(), b.cuda(), rb.cuda(), cb.cuda(), c)
    assert kernel.metadata["gemm"].get("multicast") == 2
    ref = torch.relu(a.float() @ b.float() + cb + rb[:, None])
    check(c, ref.cuda(), buf)
    interp = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    kernel(a, b, rb, cb, interp)              # CPU tensors: the interpreter
    assert torch.allclose(c.cpu().float(), interp.float(), rtol=1e-2, atol=1e-2)
