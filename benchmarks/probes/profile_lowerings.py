"""Three launches of one generality example under each lowering (auto, then general), for ncu.

    ncu -k regex:attention_nol --launch-skip 2 --launch-count 4 \\
        python3 benchmarks/probes/profile_lowerings.py attention_nol '{"B": 4, "H": 16, "N": 4096, "D": 128, "causal": true}'
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

import tkjit

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from tkbench.generality import SPECS, constants_of  # noqa: E402

if __name__ == "__main__":
    name, shape = sys.argv[1], json.loads(sys.argv[2])
    p = dict(kernel=name, **shape)
    source = (ROOT / "examples" / f"{name}.tk").read_text()
    args = SPECS[name].make(p, "cuda")
    for low in ("auto", "general"):
        k = tkjit.compile(source, filename=f"{name}.tk", constants=constants_of(p) or None, lowering=low)
        for _ in range(3):
            k(*args)
    torch.cuda.synchronize()
