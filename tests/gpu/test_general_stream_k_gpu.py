"""On a Hopper GPU: stream-K through the general sm_90a lowering (``grid{stream_k=1}`` with
``lowering="general"``, codegen/hopper/lower_stream_k.py): the last wave's K trips split over
every CTA, partials through the module's workspace and flags. Against float32 torch at tile
multiples and ragged shapes, C poisoned (NaN) inside a poisoned buffer that must stay so,
repeated launches bit-identical (the flags are left zero, the partials added in a fixed order),
a side stream and a CUDA graph, and against the same kernel without stream-K (until 2026-11-27
against the GEMM template's stream-K, deleted that day once these had passed)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support import check_placed as check
from support import placed

import tkjit

pytestmark = pytest.mark.gpu

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

GRID_F32_PERSISTENT = """
kernel gemm_f32(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<f32>[M, N]) {
  const BM = 128, BN = 256, BK = 64
  for (m, n) in blocks(M / BM, N / BN) schedule(persistent) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<bf16>[BM, BK] = A.tile(m, k)
      b: st<bf16>[BK, BN] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    C.tile(m, n) = acc
  }
}
"""


def stream_k_kernel(lowering: str = "general", source: str | None = None, **constants):
    from tkjit.passes import default_pipeline
    kernel = tkjit.compile(source or (EXAMPLES / "gemm.tk").read_text(), filename="gemm.tk",
                           constants=constants or ({"BM": 128, "BN": 256} if source is None else None),
                           pipeline=default_pipeline("sm_90a").replace("grid", "grid{stream_k=1}"),
                           lowering=lowering, require_hopper=True)
    kernel.binary  # noqa: B018 - assemble now
    md = kernel.metadata
    assert md["gemm"].get("stream_k") and md.get("serial_launches") is True, kernel.explain()
    assert (md.get("lowering") == "general") == (lowering == "general")
    return kernel




@pytest.fixture(scope="module")
def general_sk():
    return stream_k_kernel()


@pytest.mark.parametrize("m, n, k", [
    (4096, 4096, 4096),     # 512 tiles on the SMs: the tail's 64-trip tiles over every CTA
    (2304, 4352, 1000),     # a partial last K tile
    (1000, 8000, 704),      # edge tiles along M and N, 11 trips
    (1000, 3000, 520),      # the benchmark's ragged shape
    (1000, 8000, 702),      # rows TMA cannot address: the copying producer walks the units too
    (896, 4864, 128),       # one tail tile of 2 trips: most CTAs' ranges empty
    (4096, 4096, 64),       # 1 trip: not split (every tile whole)
    (4096, 4096, 136),      # 3 trips
    (512, 512, 512),        # fewer tiles than SMs: every tile whole
    (8192, 8192, 1024),
])
def test_general_stream_k_matches_torch(general_sk, m, n, k):
    torch.manual_seed(0)
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    buf, c = placed(m, n)
    general_sk(a, b, c)
    check(c, a.float() @ b.float(), buf)
    again = torch.full_like(c, float("nan"))
    general_sk(a, b, again)
    torch.cuda.synchronize()
    assert torch.equal(c, again), "the partials are added in a fixed order and every flag is left zero"


@pytest.mark.parametrize("tile", [(64, 64), (128, 64)])
def test_general_stream_k_other_tiles(tile):
    kernel = stream_k_kernel(BM=tile[0], BN=tile[1])
    torch.manual_seed(1)
    for m, n, k in [(2048, 2176, 1000), (1000, 1000, 520), (200, 312, 1000)]:
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
        buf, c = placed(m, n)
        kernel(a, b, c)
        check(c, a.float() @ b.float(), buf)


def test_general_stream_k_f32_output():
    """C in f32 (stored as the accumulator is), a persistent grid written in the source."""
    kernel = stream_k_kernel(source=GRID_F32_PERSISTENT)
    torch.manual_seed(4)
    m, n, k = 2304, 4352, 1000
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    buf, c = placed(m, n, torch.float32)
    kernel(a, b, c)
    check(c, a.float() @ b.float(), buf)


def test_general_stream_k_is_repeatable_on_streams_and_in_graphs(general_sk):
    m, n, k = 2304, 4352, 1000
    torch.manual_seed(2)
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    buf, c = placed(m, n)
    general_sk(a, b, c)
    check(c, a.float() @ b.float(), buf)
    first = c.clone()
    for _ in range(5):
        c.fill_(float("nan"))
        general_sk(a, b, c)
        torch.cuda.synchronize()
        assert torch.equal(c, first)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        c.fill_(float("nan"))
        general_sk(a, b, c)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    assert torch.equal(c, first)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        general_sk(a, b, out)
        general_sk(a, b, out)
    for _ in range(3):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, first)


def test_general_stream_k_agrees_with_whole_tiles():
    """The same kernel without stream-K (every tile whole): within bf16 rounding of the adds."""
    general = stream_k_kernel("general")
    whole = tkjit.compile((EXAMPLES / "gemm.tk").read_text(), filename="gemm.tk",
                             constants={"BM": 128, "BN": 256}, lowering="general", require_hopper=True)
    torch.manual_seed(3)
    for m, n, k in [(4096, 4096, 4096), (1000, 8000, 704)]:
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
        _, c1 = placed(m, n)
        _, c2 = placed(m, n)
        general(a, b, c1)
        whole(a, b, c2)
        torch.cuda.synchronize()
        err = ((c1.float() - c2.float()).norm() / c2.float().norm()).item()
        assert err <= 2e-3, f"stream-K vs whole tiles: relative difference {err:.3e}"
