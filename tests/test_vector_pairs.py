"""Row vectors of 16-bit tensors loaded a column pair at a time (codegen/vector_pairs.py): the
bias of examples/gemm_bias_gelu.tk on the PTX simulator at lengths that end inside a tile, even
and odd (the odd one's last pair is half inside: its first element comes from a 16-bit load),
outputs poisoned, against float64 torch; and the loads the PTX has."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from simkit import lower, simulate
from test_examples_interpreter import BF16_TOL, make_gemm_epilogue

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gemm_bias_gelu.tk"
CONSTANTS = {"BM": 64, "BN": 64}


@pytest.mark.parametrize("shape", [(70, 100, 72), (70, 101, 72), (20, 63, 16)])
def test_the_bias_at_ragged_lengths_on_the_simulated_ptx(shape):
    torch.manual_seed(1)
    args, _, refs = make_gemm_epilogue(F.gelu)(shape, CONSTANTS)
    (got,) = simulate(lower(EXAMPLE.read_text(), CONSTANTS, EXAMPLE.name), args, [3], max_ctas=128)
    got = got.double()
    assert not torch.isnan(got).any(), "an output element was never written"
    err = ((got - refs[0]).norm() / refs[0].norm()).item()
    assert err <= BF16_TOL, f"relative error {err:.3g}"


def test_one_32_bit_load_per_pair_from_one_base():
    from tkjit.codegen import emit_ptx
    ptx, _ = emit_ptx(lower(EXAMPLE.read_text(), CONSTANTS, EXAMPLE.name))
    pairs = re.findall(r"@%p\d+ ld\.global\.b32 %r\d+, \[(%rd\d+)\+(\d+)\];", ptx)
    halves = re.findall(r"@%p\d+ ld\.global\.u16 %r\d+, \[%rd\d+\+\d+\];", ptx)
    assert pairs and len(halves) == len(pairs)
    assert len({base for base, _ in pairs}) == 1 and len({off for _, off in pairs}) == len(pairs)
    assert "ld.global.b16" not in ptx
