"""One GEMM through the Hopper path, checked against torch: a small process for compute-sanitizer.

    compute-sanitizer --tool memcheck python3 tests/gpu/hopper_sanitize.py M N K [stream_k]

``stream_k``: the example at its default tiles with grid{stream_k=1} (codegen/hopper/lower_stream_k.py).
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

import tkjit

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gemm.tk"


def main(m: int, n: int, k: int, stream_k: bool = False) -> int:
    if stream_k:
        from tkjit.passes import default_pipeline
        gemm = tkjit.compile(EXAMPLE.read_text(), filename="gemm.tk", constants={"BM": 128, "BN": 256},
                             pipeline=default_pipeline("sm_90a").replace("grid", "grid{stream_k=1}"))
    else:
        gemm = tkjit.load(EXAMPLE)
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    gemm(a, b, c)
    torch.cuda.synchronize()
    ref = a.float() @ b.float()
    err = ((c.float() - ref).norm() / ref.norm()).item()
    print(f"{m}x{n}x{k} ({gemm.metadata['backend']}): relative error {err:.2e}")
    return 0 if err <= 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main(*(int(x) for x in sys.argv[1:4]), stream_k="stream_k" in sys.argv[4:]))
