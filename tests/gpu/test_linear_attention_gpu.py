"""On a GPU: the chunked causal linear attention (examples/linear_attention.tk) through the general
sm_90a lowering -- the D x D state carried in registers, stored each chunk to a shared tile the
consumers write (the protocol's TileWrite step) for wgmma's B operand -- against float64 torch on
two heads at the largest N (ragged: not a multiple of the chunk) and at N below one chunk, outputs
NaN-poisoned, with nothing written outside them; repeated launches bit-identical; and the tile
write of a wider tile (two swizzle panels) through a small kernel. tests/test_linear_attention.py
checks the protocol, the PTX lint, the write's addresses and the SASS on the CPU."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tkjit

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LARGEST_N, SMALL_N = 16384 - 37, 40
D = 64


def _general():
    k = tkjit.load(EXAMPLES / "linear_attention.tk", require_hopper=True)
    k.binary  # noqa: B018 - compile now: a refusal fails here, not in the launch
    assert k.metadata.get("lowering") == "general", k.metadata.get("lowering")
    return k


def _exact(q, k, v):
    """O[i] = sum over j <= i of (q_i . k_j) v_j per head, float64, chunk by chunk (no rounding)."""
    q, k, v = (t.double() for t in (q, k, v))
    state = torch.zeros(*q.shape[:-2], D, D, dtype=torch.float64, device=q.device)
    out = torch.empty_like(q)
    for c0 in range(0, q.shape[-2], 64):
        qc, kc, vc = (t[..., c0:c0 + 64, :] for t in (q, k, v))
        out[..., c0:c0 + 64, :] = qc @ state + (qc @ kc.transpose(-1, -2)).tril() @ vc
        state = state + kc.transpose(-1, -2) @ vc
    return out


def _poisoned(b, h, n, pad=4096):
    """An output view inside a NaN buffer with ``pad`` elements either side."""
    buf = torch.full((b * h * n * D + 2 * pad,), float("nan"), dtype=torch.bfloat16, device="cuda")
    return buf, buf[pad:pad + b * h * n * D].view(b, h, n, D)


@pytest.mark.parametrize("n", [LARGEST_N, 4096, SMALL_N])
def test_linear_attention_against_float64(n):
    torch.manual_seed(0)
    q, k, v = ((torch.randn(1, 2, n, D, device="cuda") * D ** -0.5).bfloat16() for _ in range(3))
    buf, o = _poisoned(1, 2, n)
    kernel = _general()
    kernel(q, k, v, o)
    torch.cuda.synchronize()
    assert not torch.isnan(o).any(), "an output element was never written"
    edges = torch.cat([buf[:4096], buf[4096 + o.numel():]])
    assert torch.isnan(edges.float()).all(), "an element outside the output was written"
    ref = _exact(q, k, v)
    err = ((o.double() - ref).norm() / ref.norm()).item()
    assert err < 1e-2, f"N={n}: relative error {err:.3g}"


def test_many_heads_and_repeated_launches_are_bit_identical():
    """More (batch, head) tiles than SMs (the persistent walk), fresh inputs; a second launch into
    a fresh poisoned output gives the same bits (no race between the write and the wgmma)."""
    torch.manual_seed(1)
    b, h, n = 3, 64, 1000
    q, k, v = ((torch.randn(b, h, n, D, device="cuda") * D ** -0.5).bfloat16() for _ in range(3))
    kernel = _general()
    outs = []
    for _ in range(3):
        o = torch.full((b, h, n, D), float("nan"), dtype=torch.bfloat16, device="cuda")
        kernel(q, k, v, o)
        outs.append(o)
    torch.cuda.synchronize()
    assert all(torch.equal(outs[0], o) for o in outs[1:])
    heads = [(0, 0), (b - 1, h - 1)]
    for bi, hi in heads:
        ref = _exact(q[bi, hi], k[bi, hi], v[bi, hi])
        err = ((outs[0][bi, hi].double() - ref).norm() / ref.norm()).item()
        assert err < 1e-2, f"head ({bi}, {hi}): relative error {err:.3g}"


WIDE = """
@consumers(1)
kernel wide<W = 128>(A: gl<bf16>[N, 64], B: gl<bf16>[N, W], O: gl<f32>[64, W]) {
  for i in blocks(1) {
    acc: rt<f32>[64, W] = zeros()
    for c in 0 .. N / 64 {
      a: st<bf16>[64, 64] = A.tile(c, 0)
      b: st<bf16>[64, W] = B.tile(c, 0)
      s: st<bf16>[64, W] = cvt<bf16>(acc)
      acc = mma_AB(a, s, mma_AB(a, b, acc))
    }
    O.tile(0, 0) = acc
  }
}
"""


def test_two_consumers_writing_one_tile_against_float64():
    """Each of two consumer warpgroups writes its 64 rows of a 128 x 128 tile that both read
    whole as wgmma's B (meetings of 256 threads): tests/test_linear_attention.py's kernel."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from test_linear_attention import TWO_CONSUMERS, written_recurrence
    k = tkjit.compile(TWO_CONSUMERS, lowering="general", require_hopper=True)
    torch.manual_seed(3)
    a, b = ((torch.randn(1000, 128) * 0.08).bfloat16() for _ in range(2))
    o = torch.full((128, 128), float("nan"), device="cuda")
    k(a.cuda(), b.cuda(), o)
    torch.cuda.synchronize()
    ref = written_recurrence(a, b, 128)
    # the last chunk's A rows 104..127 are padding, so the accumulator's rows 104..127 are too
    # (the interpreter never stores them): compare the rows every backend defines
    valid = 1000 % 128
    err = ((o[:valid].cpu().double() - ref[:valid]).norm() / ref[:valid].norm()).item()
    assert err < 1e-2, f"relative error {err:.3g}"


@pytest.mark.parametrize("width", [32, 64, 128])
def test_a_written_tile_as_wgmma_b_against_float64(width):
    """acc <- A_c (A_c B_c + acc) + A_c bf16(acc) ... : each trip stores the running accumulator
    (bf16) into a shared tile read as B by the next product; widths 32 (64-byte swizzle), 64 and
    128 (two 128-byte panels). Checked against the same recurrence in float64 with the same
    bf16 rounding of the state."""
    k = tkjit.compile(WIDE, constants={"W": width}, lowering="general", require_hopper=True)
    torch.manual_seed(2)
    n = 256
    a = (torch.randn(n, 64, device="cuda") * 0.125).bfloat16()
    b = (torch.randn(n, width, device="cuda") * 0.125).bfloat16()
    o = torch.full((64, width), float("nan"), device="cuda")
    k(a, b, o)
    torch.cuda.synchronize()
    acc = torch.zeros(64, width, dtype=torch.float64, device="cuda")
    for c0 in range(0, n, 64):
        ac = a[c0:c0 + 64].double()
        s = acc.to(torch.bfloat16).double()
        acc = ac @ s + (ac @ b[c0:c0 + 64].double() + acc)
    err = ((o.double() - acc).norm() / acc.norm()).item()
    assert err < 1e-2, f"W={width}: relative error {err:.3g}"
