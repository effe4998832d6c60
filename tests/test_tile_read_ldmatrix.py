"""A 16-bit shared tile read into registers with ldmatrix (codegen/hopper/lower_tile_read.py,
``ldmatrix_reads``): every element lands in the register of the wgmma fragment layout that holds
it, under each swizzle the layout pass chooses (32, 64, 128 bytes; several panels a row), for a
one-shot tile (an epilogue's residual), a ring tile read every trip, and the register-tile grids
of kernels with no product (bands not interleaved, warps splitting the columns: a last odd chunk
an x2). Proved on the PTX simulator against the input, where a wrong lane row, chunk or XOR moves
elements; f32 and fp8 tiles keep their pair loads."""
from __future__ import annotations

import re

import pytest
import torch

import tkjit
from tkjit.passes import default_pipeline

from unseen_corpus import BY_NAME

LDSM = r"ldmatrix\.sync\.aligned\.m8n8\.x(\d)\.shared\.b16"


def _ldmatrix(ptx: str) -> list[str]:
    """The ldmatrix widths the PTX uses, in order ('4', '2', ...)."""
    return re.findall(LDSM, ptx)


def _swizzle(ptx: str) -> int:
    return int(re.search(r"\(\d+ x \d+, (\d+)B swizzle\) into registers with ldmatrix", ptx).group(1))


def _simulate(monkeypatch, k, args, outs):
    import ptxsim
    from simkit import simulate
    monkeypatch.setattr(ptxsim, "SKIP_WGMMA", True)
    return simulate(k._result.tkir, args, outs, ptx_meta=(k.asm["ptx"], dict(k.metadata)))


RESIDUAL = """
kernel residual_read<BM = 128, BN = 64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], R: gl<bf16>[M, N],
                                        C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / 64 {
      a: st<bf16>[BM, 64] = A.tile(m, k)
      b: st<bf16>[64, BN] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    rs: st<bf16>[BM, BN] = R.tile(m, n)
    r: rt<f32>[BM, BN] = rs
    C.tile(m, n) = cvt<bf16>(acc + r)
  }
}
"""
"""A residual loaded once per tile as a shared tile and read after the K loop. With the wgmmas
skipped the accumulator stays 0, so C is the residual as the consumers read it, bit for bit."""


@pytest.mark.parametrize("bm, bn, consumers, swizzle, x4", [
    (128, 16, 0, 32, 1), (128, 32, 0, 64, 2), (128, 64, 0, 128, 4), (128, 128, 0, 128, 8), (128, 48, 0, 32, 3),
    (256, 64, 0, 128, 4), (128, 64, 1, 128, 8), (256, 32, 1, 64, 8),
], ids=["32B", "64B", "128B", "128B-2-panels", "32B-3-panels", "4-consumers", "2-slabs", "4-slabs"])
def test_a_one_shot_tile_read_lands_every_element_in_its_register(monkeypatch, bm, bn, consumers, swizzle, x4):
    """Ragged M and N (TMA fills the rows and columns past the tensor with zeros and the store
    clips them); the accumulator's layout: one band a warp where the tile's 64-row slabs have a
    consumer each, else a warp's bands 64 rows apart (``@consumers(1)``: one warpgroup holds 2 or 4
    slabs); ldmatrix.x4 only, no ld.shared.b32."""
    src = (f"@consumers({consumers})\n" if consumers else "") + RESIDUAL.lstrip()
    k = tkjit.compile(src, constants={"BM": bm, "BN": bn}, lowering="general", require_hopper=True, cache=False)
    ptx = k.asm["ptx"]
    assert _swizzle(ptx) == swizzle
    assert _ldmatrix(ptx) == ["4"] * x4 and "ld.shared.b32" not in ptx
    torch.manual_seed(0)
    m, n, kk = 2 * bm - 40, 3 * bn - 8, 64
    r = torch.randn(m, n).bfloat16()
    args = [torch.randn(m, kk).bfloat16(), torch.randn(kk, n).bfloat16(), r, torch.empty(m, n).bfloat16()]
    (c,) = _simulate(monkeypatch, k, args, [3])
    assert torch.equal(c, r), (c.float() != r.float()).nonzero()[:8].tolist()


RING_SUM = """
kernel ring_sum<BM = 128, BN = 128, BK = 64>(X: gl<bf16>[M, K], W: gl<bf16>[K, N], Y: gl<bf16>[M, N],
                                             S: gl<f32>[M, BK]) {
  for (m, n) in blocks(M / BM, N / BN) {
    acc: rt<f32>[BM, BN] = zeros()
    s: rt<f32>[BM, BK] = zeros()
    for k in 0 .. K / BK {
      x: st<bf16>[BM, BK] = X.tile(m, k)
      w: st<bf16>[BK, BN] = W.tile(k, n)
      xr: rt<f32>[BM, BK] = x
      s = s + xr
      acc = mma_AB(x, w, acc)
    }
    S.tile(m, 0) = s
    Y.tile(m, n) = cvt<bf16>(acc)
  }
}
"""
"""The A tile the product reads from its ring also read into registers every trip and summed
elementwise: S is the sum of X's BK-column blocks, so an element read from a wrong place shows."""


@pytest.mark.parametrize("bk, consumers, swizzle, x4", [(16, 2, 32, 1), (32, 2, 64, 2), (64, 2, 128, 4),
                                                        (128, 2, 128, 8), (32, 1, 64, 4)],
                         ids=["32B", "64B", "128B", "128B-2-panels", "2-slabs"])
def test_a_ring_tile_read_lands_every_element_in_its_register(monkeypatch, bk, consumers, swizzle, x4):
    """Five trips over the ring's stages, ragged M; the cooperative schedule (two consumers of 64
    rows each: one band a warp; or one consumer of both 64-row slabs: two bands a warp, 64 rows
    apart); the decision log names ldmatrix."""
    pipeline = str(default_pipeline("sm_90a")).replace("warp-spec", "warp-spec{mode=cooperative}")
    k = tkjit.compile(f"@consumers({consumers})\n" + RING_SUM.lstrip(), constants={"BK": bk}, lowering="general",
                      require_hopper=True, cache=False, pipeline=pipeline)
    ptx = k.asm["ptx"]
    assert _swizzle(ptx) == swizzle and _ldmatrix(ptx) == ["4"] * x4 and "ld.shared.b32" not in ptx
    assert "tile read: %x at <string>:10:7: ldmatrix.x4 from ring k's stage" in str(k.explain())
    torch.manual_seed(0)
    m, n, kk = 200, 256, 5 * bk
    x = torch.randn(m, kk).bfloat16()
    args = [x, torch.randn(kk, n).bfloat16(), torch.empty(m, n).bfloat16(), torch.empty(m, bk)]
    (s,) = _simulate(monkeypatch, k, args, [3])
    want = torch.zeros(m, bk)
    for i in range(kk // bk):  # the kernel's order: exact in f32
        want = want + x[:, i * bk:(i + 1) * bk].float()
    assert torch.equal(s, want), (s - want).abs().max()


COPY = """
kernel copy_st<BM = 128, BN = 32>(X: gl<bf16>[M, N], Y: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) {
    x: st<bf16>[BM, BN] = X.tile(m, n)
    r: rt<bf16>[BM, BN] = x
    Y.tile(m, n) = r
  }
}
"""
"""st -> rt -> store with no product: the register-tile backend's warp grid over the consumer
warpgroup (bands a warp holds contiguous, not a warpgroup's slabs; warps may split the columns)."""


@pytest.mark.parametrize("bm, bn, grid, widths", [
    (128, 32, "4x1", ["4"] * 4),            # two bands a warp, 32 rows apart from the next warp's
    (16, 32, "1x4", ["2"]),                 # one chunk a warp: an x2
    (32, 48, "2x2", ["4", "2"]),            # three chunks a warp: an x4 and an x2
    (48, 32, "1x4", ["2"] * 3),             # three bands of one chunk
    (32, 64, "2x2", ["4", "4"]),
], ids=["4x1", "1x4-x2", "2x2-x4-x2", "3-bands-x2", "2x2"])
def test_a_tile_read_by_a_kernel_with_no_product_lands_every_element(monkeypatch, bm, bn, grid, widths):
    k = tkjit.compile(COPY, constants={"BM": bm, "BN": bn}, lowering="general", require_hopper=True,
                      cache=False)
    ptx = k.asm["ptx"]
    assert f"consumer layout: {grid} warps, fragment columns" in str(k.explain())
    assert _ldmatrix(ptx) == widths and "ld.shared.b32" not in ptx
    torch.manual_seed(0)
    m, n = 3 * bm - 5, 2 * bn
    x = torch.randn(m, n).bfloat16()
    (y,) = _simulate(monkeypatch, k, [x, torch.empty(m, n).bfloat16()], [1])
    assert torch.equal(y, x), (y.float() != x.float()).nonzero()[:8].tolist()


@pytest.mark.parametrize("name, x4, widen", [("rms_linear_read", 8, "off"), ("rms_linear_read", 4, "auto"),
                                             ("gemm_dequant_a", 4, "auto"), ("ssd_copy", 4, "auto")])
def test_the_corpus_ring_reads_take_ldmatrix(name, x4, widen):
    """A thread's pairs of the ring tile, 4 an ldmatrix.x4 (rms_linear as written: 128 x 64 over one
    ping-pong consumer warpgroup, 32 pairs a thread; widened to 256 columns by tile-split, two
    cooperative consumers of 64 rows: 16, as gemm_dequant_a and ssd_copy), and no pair load left."""
    from tkjit.passes import default_pipeline
    k = tkjit.compile(BY_NAME[name].source, cache=False, require_hopper=True,
                      pipeline=default_pipeline("sm_90a").replace("tile-split", f"tile-split{{widen={widen}}}"))
    ptx = k.asm["ptx"]
    assert _ldmatrix(ptx) == ["4"] * x4
    assert "ld.shared.b32" not in ptx


@pytest.mark.parametrize("name, instr", [("gemm_f32a", "ld.shared.v2.f32"), ("gemm_fp8a", "ld.shared.b16")])
def test_f32_and_fp8_tiles_keep_their_pair_loads(name, instr):
    """ldmatrix hands a lane 4 bytes of a matrix row: one f32 of a pair, or 4 fp8 columns where
    the fragment wants 2; those tiles keep one load a pair, and the decision log says which."""
    k = tkjit.compile(BY_NAME[name].source, cache=False, require_hopper=True)
    ptx = k.asm["ptx"]
    assert not _ldmatrix(ptx) and re.search(rf"^\s*{re.escape(instr)} ", ptx, re.M)
    assert re.search(rf"tile read: %a at \S+: {re.escape(instr)} from ring k's stage", str(k.explain()))
