"""How close short-K GEMMs are to the cost of writing C at all (GPU), same run.

    python3 benchmarks/write_roofline.py [4096x4096x64 4096x4096x128 ...]

At M = N = 4096 and K <= 256 a GEMM writes 32 MB of C and reads about 1-4 MB of A and B, so the
floor under any kernel is the time to write C. Beside cuBLAS and tkjit's GEMM (examples/gemm.tk,
the variant @fill_sms picks) this times ``C.fill_(1.0)`` and ``C.zero_()`` on the same C (a write of
exactly those bytes by PyTorch's own kernels) and the device-to-device copy of C (its bytes read
and written). Batches of 20 launches timed with CUDA events, the functions interleaved batch by
batch, inputs rotated past the L2 (gemm_variants.py's harness). One JSON line per shape: the
microseconds, each GEMM's ratio to cuBLAS, and ``floor_ratio``: cuBLAS's time over the fastest
write of C, the most any kernel could gain over cuBLAS if it only wrote C.
"""
from __future__ import annotations

import argparse
import json

import torch

from gemm_variants import L2_BYTES, timed_together, variant_kernel

DEFAULT_SHAPES = ("4096x4096x64", "4096x4096x128", "4096x4096x256")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shapes", nargs="*", default=list(DEFAULT_SHAPES))
    args = ap.parse_args()
    kernel = variant_kernel("")
    torch.zeros(1, device="cuda")
    for shape in args.shapes:
        m, n, k = (int(x) for x in shape.split("x"))
        set_bytes = 2 * (m * k + k * n + 2 * m * n)
        count = max(2, -(-2 * L2_BYTES // set_bytes))
        sets = [(torch.randn(m, k, dtype=torch.bfloat16, device="cuda"),
                 torch.randn(k, n, dtype=torch.bfloat16, device="cuda"),
                 torch.empty(m, n, dtype=torch.bfloat16, device="cuda"),
                 torch.randn(m, n, device="cuda").to(torch.bfloat16)) for _ in range(count)]
        ref = sets[0][0].float() @ sets[0][1].float()
        sets[0][2].fill_(float("nan"))
        kernel(*sets[0][:3])
        torch.cuda.synchronize()
        err = ((sets[0][2].float() - ref).norm() / ref.norm()).item()
        fns = {"cublas": lambda a, b, c, d: torch.matmul(a, b, out=c),
               "tkjit": lambda a, b, c, d: kernel(a, b, c),
               "fill": lambda a, b, c, d: c.fill_(1.0),
               "zero": lambda a, b, c, d: c.zero_(),
               "copy": lambda a, b, c, d: c.copy_(d)}
        us = timed_together(fns, sets)
        write_bytes = 2 * m * n
        floor = min(us["fill"], us["zero"])
        print(json.dumps({
            "shape": shape, "tkjit_err": err, **{f"{name}_us": round(t, 2) for name, t in us.items()},
            "tkjit_ratio": round(us["cublas"] / us["tkjit"], 3),
            "floor_ratio": round(us["cublas"] / floor, 3),
            "write_TBps": round(write_bytes / floor / 1e6, 2),
            "copy_TBps": round(2 * write_bytes / us["copy"] / 1e6, 2)}), flush=True)


if __name__ == "__main__":
    main()
