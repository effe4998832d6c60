#!/usr/bin/env python3
"""Host cost of a kernel launch on strided views against the same launch on contiguous tensors (CPU).

    python3 benchmarks/strided_host.py [--profile] [--out PATH]

No GPU: the GEMM example's kernel object (examples/gemm.tk, @fill_sms dispatch included) launches
through its real launcher, with the GPU's driver calls stood in for (a no-op cuLaunchKernel from the
native extension, a recording tensor-map encoder, device -1 where plain CPU tensors say they are,
gpu_available/ensure_context/num_sms answered without a driver). What is timed is everything the
host does per launch from ``kernel(*args)`` to cuLaunchKernel: argument checks, the shape
dispatch, the strided checks, the maps (from the encoder's cache: no map is encoded while timing,
which the script checks), the parameter block. The GPU's own driver calls on the Python route
(cuDeviceGetCount, cuCtxGetCurrent, torch.cuda.is_available, ...) are not in these figures.

Arguments are those of benchmarks/strided.py's ``gemm 4096x4096x1024`` case: A a column slice, B
every other row, C contiguous (``--c-view``: a window of a wider buffer), against contiguous copies.
Times are medians over batches of the mean per call, the two sides alternating per batch.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

import tkjit  # noqa: E402
from tkjit.kernel import CompiledKernel  # noqa: E402
from tkjit.runtime import driver, native  # noqa: E402
from tkjit.runtime.launcher import Launcher  # noqa: E402
from tkjit.runtime.tensormap import MAP_BYTES  # noqa: E402


def stand_in_gpu(encodes: list) -> None:
    """The GPU's driver calls replaced (this process only): see the module docstring."""
    noop = native.module().noop_launch_address() if native.module() is not None else None

    def encode(spec, ptr, dims, strides):
        encodes.append((ptr, dims, strides))
        return bytes(MAP_BYTES)

    def make_launcher(self, drv):
        meta = self._result.metadata
        launch = dict(launch=noop, launch_api="native") if noop is not None else \
            dict(launch=lambda *a: (0,), launch_api="bindings")
        return Launcher(0x1234, meta["params"], meta["grid"], meta["block"], int(meta.get("smem_bytes", 0)),
                        name=self.name, device=-1, on_refusal=self._refused, current_device=lambda: -1,
                        current_stream=lambda dev: 0, encode_map=encode, num_sms=132, **launch)
    backend_for = CompiledKernel._backend_for
    CompiledKernel._make_launcher = make_launcher
    CompiledKernel._backend_for = lambda self, args: (backend_for(self, args), "gpu")[1]  # CPU tensors: "GPU"
    driver.gpu_available = lambda: True
    driver.ensure_context = lambda: -1
    driver.num_sms = lambda device=None: 132


def median_us(fns: dict, batches: int, per_batch: int) -> dict:
    samples = {name: [] for name in fns}
    for _ in range(batches):
        for name, fn in fns.items():
            start = time.perf_counter_ns()
            for _ in range(per_batch):
                fn()
            samples[name].append((time.perf_counter_ns() - start) / per_batch / 1000)
    return {name: statistics.median(values) for name, values in samples.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--c-view", action="store_true", help="C a window of a wider buffer too")
    parser.add_argument("--profile", action="store_true", help="cProfile the view launches")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    status = native.prepare()
    encodes: list = []
    stand_in_gpu(encodes)
    m, n, k = 4096, 4096, 1024

    def bf(*shape):
        return torch.empty(*shape, dtype=torch.bfloat16)
    c = bf(m, n + 64)[:, :n] if args.c_view else bf(m, n)
    views = [bf(m, k + 64)[:, 64:], bf(2 * k, n)[::2], c]
    copies = [v.contiguous() for v in views]
    kernel = tkjit.load(REPO / "examples" / "gemm.tk")
    kernel(*copies)
    kernel(*views)
    if args.profile:
        import cProfile
        import pstats
        profile = cProfile.Profile()
        profile.runcall(lambda: [kernel(*views) for _ in range(3000)])
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)
    before = len(encodes)
    times = median_us({"contiguous_us": lambda: kernel(*copies), "views_us": lambda: kernel(*views)},
                      args.batches, 500)
    result = {"case": f"gemm {m}x{n}x{k}" + (" C view" if args.c_view else ""), **times,
              "ratio": times["views_us"] / times["contiguous_us"], "maps_encoded_while_timing": len(encodes) - before,
              "native_status": status, "host": platform.processor() or platform.machine(),
              "python": platform.python_version(), "torch": torch.__version__}
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps({"date": datetime.date.today().isoformat(), "rows": [result]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
