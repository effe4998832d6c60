"""Every kernel of tests/general_corpus.py through the general lowering once, at a ragged shape
(rows TMA can address), checked against torch: a small process for compute-sanitizer.

    compute-sanitizer --tool racecheck python3 tests/gpu/general_sanitize.py [NAME ...]
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import tkjit  # noqa: E402
from general_corpus import CASES  # noqa: E402


def main(names: list[str]) -> int:
    bad = 0
    for case in CASES:
        if names and case.name not in names:
            continue
        shape = {k: -(-v // 8) * 8 for k, v in case.cpu_shape.items()}
        k = tkjit.compile(case.source, constants=case.constants or None, lowering="general",
                          require_hopper=True)
        args = case.make(shape, "cuda")
        want = case.reference(args)
        k(*args)
        torch.cuda.synchronize()
        for i, ref in zip(case.outputs, want):
            err = ((args[i].float() - ref).norm() / ref.norm()).item()
            ok = err < 1e-2
            bad += not ok
            print(f"{case.name} {shape}: relative error {err:.2e} {'ok' if ok else 'WRONG'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
