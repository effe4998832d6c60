"""On a Hopper GPU: GEMMs through the warp-specialized TMA + wgmma path against torch.matmul.

Fresh random bf16 inputs, C poisoned with NaN and placed inside a larger poisoned buffer whose
surroundings must stay untouched; shapes that divide the tiles and shapes that do not, K below
one K tile, rows TMA cannot address (the producer's copy fallback, in the variant that a kernel
compiled for aligned rows makes at the first launch needing it), both B layouts, both
schedules, f32 output. Under ``lowering="auto"``: the general lowering (these tests first ran
the GEMM template, deleted on 2026-11-27).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support import check_placed as check
from support import placed

import tkjit

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

ABT = """
kernel gemm_abt(A: gl<bf16>[M, K], B: gl<bf16>[N, K], C: gl<bf16>[M, N]) {
  const BM = 128, BN = 256, BK = 64
  for (m, n) in blocks(M / BM, N / BN) schedule(persistent, group = 4) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      a: st<bf16>[BM, BK] = A.tile(m, k)
      b: st<bf16>[BN, BK] = B.tile(n, k)
      acc = mma_ABt(a, b, acc)
    }
    C.tile(m, n) = cvt<bf16>(acc)
  }
}
"""

GRID_F32 = """
kernel gemm_f32(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<f32>[M, N]) {
  const BM = 128, BN = 128, BK = 64
  for (m, n) in blocks(M / BM, N / BN) {
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


@pytest.fixture(scope="module")
def gemm():
    kernel = tkjit.load(EXAMPLES / "gemm.tk")
    kernel.binary  # noqa: B018 - assemble now
    assert kernel.metadata["backend"] == "wgmma", kernel.explain()
    return kernel




def same_bits_three_times(kernel, m, n, k, why=None):
    """Three launches on the same inputs, each into a fresh poisoned C: right, and bit-identical."""
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    first = None
    for _ in range(3):
        buf, c = placed(m, n)
        kernel(a, b, c)
        check(c, a.float() @ b.float(), buf)
        first = c.clone() if first is None else first
        assert torch.equal(c, first), why


def run_ab(kernel, m, n, k, out_dtype=torch.bfloat16):
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    buf, c = placed(m, n, out_dtype)
    kernel(a, b, c)
    check(c, a.float() @ b.float(), buf)


def run_abt(kernel, m, n, k):
    """mma_ABt: B given as [N, K] (K-major)."""
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
    buf, c = placed(m, n)
    kernel(a, b, c)
    check(c, a.float() @ b.float().T, buf)


@pytest.mark.parametrize("m, n, k", [
    (128, 256, 64), (256, 512, 128), (128, 128, 128), (512, 512, 512), (1024, 2048, 256),
    (4096, 4096, 4096), (8192, 8192, 1024), (128, 8192, 512), (8192, 256, 2048),
    (1000, 1000, 1000), (384, 640, 4096), (1000, 1504, 704), (200, 304, 64)])
def test_gemm_matches_torch(gemm, m, n, k):
    run_ab(gemm, m, n, k)


@pytest.mark.parametrize("m, n, k", [(128, 256, 32), (300, 520, 8), (256, 256, 16)])
def test_k_below_one_tile(gemm, m, n, k):
    run_ab(gemm, m, n, k)


@pytest.mark.parametrize("m, n, k", [(1000, 1500, 700), (200, 300, 100), (130, 258, 66), (129, 257, 65)])
def test_rows_tma_cannot_address_take_the_copy_path(gemm, m, n, k):
    run_ab(gemm, m, n, k)


def test_8192_cubed(gemm):
    run_ab(gemm, 8192, 8192, 8192)


def test_mma_abt_and_f32_output_on_a_plain_grid():
    abt = tkjit.compile(ABT)
    run_abt(abt, 1000, 1500, 512)
    assert abt.metadata["backend"] == "wgmma"
    f32 = tkjit.compile(GRID_F32)
    run_ab(f32, 640, 384, 320, torch.float32)
    assert f32.metadata["backend"] == "wgmma"


def test_repeated_launches_reuse_tensor_maps(gemm):
    a = torch.randn(512, 256, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(256, 768, dtype=torch.bfloat16, device="cuda")
    for _ in range(3):
        buf, c = placed(512, 768)
        gemm(a, b, c)
        check(c, a.float() @ b.float(), buf)


@pytest.mark.parametrize("m, n, k", [(128, 256, 64), (1024, 2048, 512), (1000, 1504, 704), (200, 300, 100)])
def test_grid_gemm_with_16_bit_c(m, n, k):
    """Not persistent: smem-plan puts C's staging tile over the drained ring; the emitter, which
    has no consumer barrier for that, stages beside the ring by its own plan."""
    source = (EXAMPLES / "gemm.tk").read_text().replace("schedule(persistent, group = 8, split = SPLIT)",
                                                         "schedule(split = SPLIT)")
    assert "persistent" not in source
    kernel = tkjit.compile(source)
    kernel.binary  # noqa: B018 - assemble now (the metadata is complete after it)
    assert kernel.metadata["backend"] == "wgmma", kernel.explain()
    run_ab(kernel, m, n, k)


# -- split-K: a cluster of SPLIT CTAs per tile, partials added through distributed shared memory

@pytest.mark.parametrize("bm, bn, split, m, n, k", [
    (128, 128, 4, 128, 4096, 4096),     # the M = 128 shape the model splits
    (128, 64, 2, 128, 4096, 14336),
    (128, 256, 2, 128, 1024, 4096),
    (64, 64, 2, 200, 300, 1000),        # no dimension a multiple of its tile; 16 K steps, odd split
    (128, 128, 4, 300, 520, 1000),      # ceil(16 / 4) = 4 steps each
    (128, 128, 4, 200, 304, 320),       # 5 K steps over 4 CTAs: 2, 2, 1 and 0 trips
    (128, 128, 4, 128, 256, 64),        # K smaller than one split: 1 step, three CTAs add zeros
    (128, 128, 4, 128, 256, 16),        # K below one K tile
    (64, 128, 2, 130, 258, 66),         # rows TMA cannot address: the copying producer, split
])
def test_split_k_matches_torch(bm, bn, split, m, n, k):
    kernel = tkjit.load(EXAMPLES / "gemm.tk", constants={"BM": bm, "BN": bn, "SPLIT": split})
    kernel.binary  # noqa: B018 - assemble now
    assert kernel.metadata["gemm"]["split"] == split, kernel.explain()
    run_ab(kernel, m, n, k)


def test_split_k_repeated_launches_give_the_same_bits():
    kernel = tkjit.load(EXAMPLES / "gemm.tk", constants={"BM": 128, "BN": 128, "SPLIT": 4})
    same_bits_three_times(kernel, 256, 512, 2048, "the partials are added in a fixed order")


def test_fill_sms_splits_k_at_m_128(gemm):
    run_ab(gemm, 128, 4096, 4096)
    text = gemm.explain()
    assert "SPLIT = 4" in text or "SPLIT = 2" in text, text


# -- 2-CTA clusters with B multicast (grid{multicast=2}): pairs of tiles along M share B's stages

def multicast_pipeline() -> str:
    from tkjit.passes import default_pipeline
    return default_pipeline("sm_90a").replace("grid", "grid{multicast=2}")


@pytest.fixture(scope="module")
def gemm_multicast():
    """The example at its default tiles (pinned, so @fill_sms keeps them), pairs multicasting B."""
    kernel = tkjit.compile((EXAMPLES / "gemm.tk").read_text(), filename="gemm.tk",
                           constants={"BM": 128, "BN": 256}, pipeline=multicast_pipeline())
    kernel.binary  # noqa: B018 - assemble now
    assert kernel.metadata["gemm"].get("multicast") == 2, kernel.explain()
    return kernel


@pytest.mark.parametrize("m, n, k", [
    (256, 256, 64),        # one pair unit
    (384, 512, 256),       # 3 tile rows: the last unit's second tile lies past M (odd tail)
    (128, 512, 128),       # one tile row: every rank-1 tile is off the edge
    (1000, 1000, 1000),    # no dimension a multiple of its tile, 8 tile rows
    (1160, 1504, 704),     # 10 tile rows, the last partial; 11 K steps
    (200, 304, 64),
    (4096, 4096, 4096),    # 128 units over <= 66 clusters: ~2 units per pair
    (8192, 8192, 1024),    # 512 units: many per pair, ring phases carried on
    (8192, 256, 2048),
    (4096, 4096, 64),      # one K step per tile
])
def test_multicast_gemm_matches_torch(gemm_multicast, m, n, k):
    run_ab(gemm_multicast, m, n, k)


@pytest.mark.parametrize("m, n, k", [(128, 256, 32), (300, 520, 8), (1000, 1500, 700), (130, 258, 66)])
def test_multicast_short_k_and_the_copy_path(gemm_multicast, m, n, k):
    """K below one tile; rows TMA cannot address (the variant for them declines the pair,
    passes/pairs.py, and each CTA copies its own stage, unpaired)."""
    run_ab(gemm_multicast, m, n, k)


def test_multicast_repeated_launches_give_the_same_bits(gemm_multicast):
    same_bits_three_times(gemm_multicast, 1152, 2048, 1024)


def test_multicast_with_k_major_b_and_fill_sms_variants():
    """mma_ABt: K-major B, each CTA multicasts half of B's rows; and the example unpinned, whose
    @fill_sms variants carry the pipeline (BN = 64 has one panel: no multicast, said why)."""
    abt = tkjit.compile(ABT, pipeline=multicast_pipeline())
    for m, n, k in [(1000, 1500, 512), (384, 768, 192), (4096, 4096, 1024)]:
        run_abt(abt, m, n, k)
    assert abt.metadata["gemm"].get("multicast") == 2, abt.explain()
    unpinned = tkjit.compile((EXAMPLES / "gemm.tk").read_text(), filename="gemm.tk",
                             pipeline=multicast_pipeline())
    for m, n, k in [(128, 4096, 4096), (1024, 4096, 4096), (200, 300, 1000)]:
        run_ab(unpinned, m, n, k)


# -- ping-pong consumers (warp-spec{mode=pingpong}) ------------------------------------------
def pingpong_pipeline(extra: str = "") -> str:
    from tkjit.passes import default_pipeline
    passes = default_pipeline("sm_90a").split(",")
    out = ",".join("warp-spec{mode=pingpong}" if p == "warp-spec" else p for p in passes)
    return out.replace("grid", f"grid{{{extra}}}") if extra else out


def pingpong_kernel(bm: int, bn: int, source: str | None = None, extra: str = ""):
    text = source or (EXAMPLES / "gemm.tk").read_text()
    consts = {"BM": bm, "BN": bn} if source is None else None
    kernel = tkjit.compile(text, filename="gemm.tk", constants=consts, pipeline=pingpong_pipeline(extra))
    kernel.binary  # noqa: B018 - assemble now
    return kernel


def pingpong_taken(kernel) -> bool:
    """Whether the emitted kernel runs ping-pong consumers: the general lowering follows the
    mbarrier pass's protocol (its ring says so; the GEMM template, which logged its own schedule,
    was deleted on 2026-11-27)."""
    assert kernel.metadata.get("lowering") == "general", kernel.explain()
    return "the one consumer whose tile the fill is for (ping-pong)" in kernel.explain()


@pytest.fixture(scope="module", params=[(128, 128), (64, 256)], ids=["128x128", "64x256"])
def gemm_pingpong(request):
    kernel = pingpong_kernel(*request.param)
    assert kernel.metadata["backend"] == "wgmma", kernel.explain()
    assert pingpong_taken(kernel), kernel.explain()
    return kernel


@pytest.mark.parametrize("m, n, k", [
    (128, 256, 64),        # 1-2 tiles: one CTA per tile, consumer 1 has none
    (384, 256, 256),       # 3 tile rows
    (1000, 1000, 1000),    # no dimension a multiple of its tile
    (4096, 4096, 4096),    # 1024 tiles (512 at 64x256) over 132 CTAs: 7 or 8 each, odd and even
    (4224, 4096, 512),     # 33 x 32 tiles: some CTAs an odd count, consumer 0 one more
    (8192, 8192, 1024),    # many tiles per CTA: ring phases carried across both consumers
    (4096, 4096, 64),      # one K step per tile
    (1160, 1504, 704),     # 11 K steps, partial last tile row and column
])
def test_pingpong_gemm_matches_torch(gemm_pingpong, m, n, k):
    run_ab(gemm_pingpong, m, n, k)


@pytest.mark.parametrize("m, n, k", [(128, 256, 32), (300, 520, 8), (4096, 1024, 16), (130, 258, 66),
                                     (1000, 1500, 700)])
def test_pingpong_short_k_and_the_copy_path(gemm_pingpong, m, n, k):
    """K below one tile (one zero-filled K step per tile); rows TMA cannot address (the copying
    producer fills the ring for both consumers; the epilogue stores registers)."""
    run_ab(gemm_pingpong, m, n, k)


def test_pingpong_repeated_launches_give_the_same_bits(gemm_pingpong):
    same_bits_three_times(gemm_pingpong, 2176, 2048, 1024)


def test_pingpong_k_major_b_and_f32_output():
    """mma_ABt (K-major B) and an f32 C (register stores) with ping-pong consumers."""
    abt = pingpong_kernel(0, 0, ABT.replace("BN = 256", "BN = 128"))
    f32 = pingpong_kernel(0, 0, GRID_F32.replace("blocks(M / BM, N / BN)",
                                                 "blocks(M / BM, N / BN) schedule(persistent, group = 8)"))
    for kernel in (abt, f32):
        assert pingpong_taken(kernel), kernel.explain()
    for m, n, k in [(1000, 1500, 512), (4096, 4096, 1024), (300, 200, 40)]:
        run_abt(abt, m, n, k)
        run_ab(f32, m, n, k, torch.float32)


def test_pingpong_with_split_k_or_multicast_stays_correct():
    """split-K keeps cooperative consumers (warp-spec says why); multicast is not combined with
    ping-pong (the mbarrier pass says why); both still compute C."""
    split = tkjit.compile((EXAMPLES / "gemm.tk").read_text(), filename="gemm.tk",
                          constants={"BM": 128, "BN": 128, "SPLIT": 2}, pipeline=pingpong_pipeline())
    assert "split-K gives each tile a cluster of its own" in split.explain()
    run_ab(split, 128, 4096, 4096)
    paired = pingpong_kernel(128, 128, extra="multicast=2")
    assert "not with ping-pong consumers" in paired.explain()
    for m, n, k in [(1000, 1000, 1000), (4096, 4096, 512)]:
        run_ab(paired, m, n, k)


# -- stream-K over the last wave: tests/gpu/test_general_stream_k_gpu.py


# -- rows TMA cannot address, met by a kernel compiled for aligned rows (the default) ----------

def test_unaligned_rows_switch_a_kernel_to_its_variant_with_the_fallback():
    """The launcher refuses them to the kernel object, which compiles the variant with the copying
    producer and the register-store epilogue once and launches it from then on, for any rows."""
    kernel = tkjit.compile((EXAMPLES / "gemm.tk").read_text().replace("@fill_sms(BM, BN, SPLIT)", ""),
                           filename="gemm.tk")
    run_ab(kernel, 512, 512, 256)
    assert kernel.metadata["assumes_aligned_rows"] and kernel._general is None
    run_ab(kernel, 300, 520, 100)        # K = 100: A's rows are 200 bytes
    assert kernel._general is not None and kernel._general.options.unaligned_rows
    run_ab(kernel, 512, 512, 256)        # aligned again: through the variant, still right
    run_ab(kernel, 129, 257, 64)         # N = 257: B's and C's rows


@pytest.mark.parametrize("m, n, k", [(1000, 1500, 700), (129, 257, 65), (4096, 4096, 64)])
def test_fill_sms_variants_take_unaligned_rows_too(m, n, k):
    kernel = tkjit.compile((EXAMPLES / "gemm.tk").read_text(), filename="gemm.tk")
    run_ab(kernel, m, n, k)
    run_ab(kernel, m, n, k + 8 - k % 8 if k % 8 else k)
