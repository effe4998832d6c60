"""On a GPU: the examples added for issues 17 and 18, each through its driver's ``check`` at a
ragged shape (NaN-poisoned outputs, float32 torch reference), whichever backend the compiler
picks; and the activations and index/select ops on the hardware's approximate ex2/rcp, against
float64 torch (the bound tests/test_activations.py states)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TESTS = Path(__file__).resolve().parents[1]

SIZES = {
    "gemm_bias_gelu": [1000, 600, 520], "gemm_bias_silu": [1000, 600, 520], "bmm": [3, 500, 300, 200],
    "gemm_alpha_beta": [1000, 600, 520], "gemm_atb": [1000, 600, 520], "mlp": [1000, 500],
    "gemm_fp8": [1000, 600, 512], "rmsnorm": [1000], "residual_layernorm": [1000],
    "attention_nol": [1, 4, 2, 1000], "attention_window": [1, 4, 2, 1000],
    "attention_softcap": [1, 4, 2, 1000], "attention_alibi": [1, 4, 2, 1000],
    "attention_exp": [1, 4, 2, 1000], "attention_mask": [1, 4, 2, 1000], "attention_f16": [1, 4, 2, 1000],
    "attention_bwd": [1, 4, 2, 1000], "linear_attention": [1, 4, 1000],
}


def _driver(name: str):
    spec = importlib.util.spec_from_file_location(f"tkjit_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(SIZES))
def test_example_on_the_gpu(name):
    shape, err = _driver(name).check("cuda", SIZES[name])
    assert err < 1e-2, f"{name} {shape}: relative error {err:.3g}"


def test_attention_nol_causal_on_the_gpu():
    shape, err = _driver("attention_nol").check("cuda", [1, 4, 2, 1000], causal=True)
    assert err < 1e-2, f"{shape}: relative error {err:.3g}"


def _cpu_test(module: str):
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    return importlib.import_module(module)


def test_activations_on_the_gpu_within_1e_4_of_float64():
    import tkjit
    acts = _cpu_test("test_activations")
    kernel = tkjit.compile(acts.SRC)
    args = [a.cuda() if isinstance(a, torch.Tensor) else a for a in acts._inputs()]
    kernel(*args)
    torch.cuda.synchronize()
    x = args[0].cpu().double()
    for i, (name, ref) in zip((1, 2, 3, 4), acts.REFS.items()):
        torch.testing.assert_close(args[i].cpu().double(), ref(x), rtol=1e-4, atol=1e-30, msg=name)


def test_masks_on_the_gpu():
    import tkjit
    masks = _cpu_test("test_masks")
    kernel = tkjit.compile(masks.SRC)
    args = masks._inputs()
    gpu = [a.cuda() if isinstance(a, torch.Tensor) else a for a in args]
    kernel(*gpu)
    torch.cuda.synchronize()
    masks._check([gpu[i].cpu() for i in (1, 2, 3, 4)], args)
