"""Every example through its driver's ``check`` once, at a small ragged shape, in one process: the
process compute-sanitizer wraps (benchmarks/sanitize.py runs memcheck, racecheck and synccheck
over it).

    compute-sanitizer --tool racecheck python3 tests/gpu/examples_sanitize.py [NAME ...]
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SIZES = {
    "gemm": [300, 520, 200], "attention": [1, 2, 1, 300], "layernorm": [300], "softmax": [300],
    "rotary": [1, 2, 300], "gemm_bias_gelu": [300, 264, 136], "gemm_bias_silu": [300, 264, 136],
    "bmm": [2, 200, 264, 136], "gemm_alpha_beta": [300, 264, 136], "gemm_atb": [200, 264, 136],
    "mlp": [200, 256], "gemm_fp8": [200, 304, 256], "rmsnorm": [300], "residual_layernorm": [300],
    "attention_nol": [1, 2, 1, 300], "attention_window": [1, 2, 1, 300], "attention_softcap": [1, 2, 1, 300],
    "attention_alibi": [1, 2, 1, 300], "attention_exp": [1, 2, 1, 300], "attention_mask": [1, 2, 1, 300],
    "attention_f16": [1, 2, 1, 300], "attention_bwd": [1, 2, 1, 300],
}


def main(names: list[str]) -> int:
    bad = 0
    for name, sizes in SIZES.items():
        if names and name not in names:
            continue
        spec = importlib.util.spec_from_file_location(f"tkjit_example_{name}", EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        try:
            shape, err = module.check("cuda", sizes)
        except TypeError:  # a driver whose sizes take another form: its default small shape
            shape, err = module.check("cuda")
        ok = err < 1e-2
        bad += not ok
        print(f"{name} {shape}: relative error {err:.2e} {'ok' if ok else 'WRONG'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
