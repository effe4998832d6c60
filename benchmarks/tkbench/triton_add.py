"""A trivial Triton kernel, out = x + y over 4096 floats: the same work as tkjit's launch-overhead
kernel (``tkjit/runtime/bench_launch.py``), for comparing launch and first-call costs.

Run as a script (in a fresh process, with TRITON_CACHE_DIR set by the caller) it times the first
call after import and context set-up — compile (or cache load) + launch + synchronize — checks
the result, and prints one JSON line."""
import time

_BEGIN = time.perf_counter()
import json  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

IMPORT_S = time.perf_counter() - _BEGIN
N = 4096
BLOCK = 128


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def launch(x, y, out) -> None:
    add_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK)


def first_call() -> dict:
    x, y = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
    out = torch.full_like(x, float("nan"))
    torch.cuda.synchronize()
    begin = time.perf_counter()
    launch(x, y, out)
    torch.cuda.synchronize()
    first = time.perf_counter() - begin
    begin = time.perf_counter()
    launch(x, y, out)
    torch.cuda.synchronize()
    second = time.perf_counter() - begin
    if not torch.equal(out, x + y):
        raise SystemExit("the Triton add kernel gave a wrong result")
    return {"import_s": IMPORT_S, "first_call_s": first, "second_call_s": second,
            "triton": triton.__version__}


if __name__ == "__main__":
    print(json.dumps(first_call()))
    sys.exit(0)
