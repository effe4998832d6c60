"""The examples added for issues 17 and 18 on the register-tile (mma.sync) backend, on the CPU:
each one's PTX at its default constants assembles under ptxas for sm_90a without spills or
local memory, and runs on the PTX simulator (tests/ptxsim.py) at a small ragged shape with
smaller tiles, outputs poisoned, against the same float64 torch reference as the interpreter
test (tests/test_examples_interpreter.py). gemm_fp8 takes the general Hopper lowering (tests/test_general_lowering.py); the register-tile
backend refuses it with a diagnostic at the product."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from simkit import assemble, lower, simulate
from support import needs_cuda_tools
from test_examples_interpreter import BF16_TOL, CASES

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
RUNNABLE = ["gemm_bias_gelu", "gemm_bias_silu", "bmm", "gemm_alpha_beta", "gemm_atb", "mlp", "rmsnorm",
            "residual_layernorm", "attention_nol", "attention_window", "attention_softcap",
            "attention_alibi", "attention_bwd_prep", "linear_attention"]
SIM = {  # constants and shape of the simulated run (a subset of the interpreter's cases)
    "attention_nol": ({"D": 64, "CAUSAL": True, "BQ": 64, "BKV": 32}, (1, 2, 1, 150)),
    "attention_window": ({"D": 64, "BQ": 64, "BKV": 32}, (1, 1, 1, 300)),
    "rmsnorm": ({"D": 256}, (20,)),
    "residual_layernorm": ({"D": 256}, (20,)),
    "mlp": ({"D": 64, "BF": 32}, (70, 200)),
    "linear_attention": ({}, (1, 1, 100)),
}

ON_MMA_SYNC = {  # constants other than the defaults for the spill check on this backend
    "attention_nol": {"BKV": 128},  # its D = 128 default, 176 keys (attention.tk's, for the general
                                    # lowering since session 12), spills on mma.sync as attention.tk's does
}


def _kernel(name: str, constants: dict):
    path = EXAMPLES / f"{name}.tk"
    return lower(path.read_text(), constants, path.name)


@needs_cuda_tools
@pytest.mark.parametrize("name", RUNNABLE)
def test_example_assembles_without_spills(name):
    fn = assemble(_kernel(name, ON_MMA_SYNC.get(name, {})))
    assert fn.spill_store_bytes == 0 and fn.spill_load_bytes == 0 and fn.stack_frame_bytes == 0


@pytest.mark.parametrize("name", RUNNABLE)
def test_example_on_the_simulated_ptx(name):
    case = CASES[name]
    constants, shape = SIM.get(name, (case.constants[0], case.shapes[-1]))
    torch.manual_seed(0)
    args, outputs, refs = case.make(shape, constants)
    index = [next(i for i, a in enumerate(args) if a is out) for out in outputs]
    inout = tuple(i for i, out in zip(index, outputs) if not torch.isnan(out.double()).all())
    got = simulate(_kernel(name, constants), args, index, max_ctas=128, inout=inout)
    for out, ref in zip(got, refs):
        out = out.double()
        assert not torch.isnan(out).any(), "an output element was never written"
        err = ((out - ref).norm() / ref.norm()).item()
        assert err <= BF16_TOL, f"relative error {err:.3g}"


def test_fp8_gemm_is_refused_by_the_register_tile_backend_at_the_product():
    from tkjit.codegen import emit_ptx
    from tkjit.errors import NotAvailableError
    with pytest.raises(NotAvailableError) as err:
        emit_ptx(_kernel("gemm_fp8", {}))
    assert "e4m3 x e4m3 products are not supported by the mma.sync backend" in err.value.message
    assert err.value.render().startswith("gemm_fp8.tk:12:")
