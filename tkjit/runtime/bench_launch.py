"""Launch overhead: a Launcher call against a raw ``cuLaunchKernel`` of the same cubin.

``measure_launch_overhead()`` needs a Hopper GPU; ``measure_host_overhead()`` runs anywhere
(a fake launch function and CPU tensors) and isolates the Python-side cost of checking and
packing. ``python -m tkjit.runtime.bench_launch [--cpu]`` prints either as JSON.
"""
from __future__ import annotations

import ctypes
import json
import statistics
import sys
import time

ADD_F32_PTX = """\
.version 8.0
.target sm_90a
.address_size 64

.visible .entry add_f32(
    .param .u64 p_x,
    .param .u64 p_y,
    .param .u64 p_out,
    .param .s32 p_n
)
.maxntid 128, 1, 1
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<11>;

    ld.param.u64 %rd1, [p_x];
    ld.param.u64 %rd2, [p_y];
    ld.param.u64 %rd3, [p_out];
    ld.param.s32 %r1, [p_n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.s32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd4, %rd1;
    cvta.to.global.u64 %rd5, %rd2;
    cvta.to.global.u64 %rd6, %rd3;
    mul.wide.s32 %rd7, %r5, 4;
    add.s64 %rd8, %rd4, %rd7;
    add.s64 %rd9, %rd5, %rd7;
    add.s64 %rd10, %rd6, %rd7;
    ld.global.f32 %f1, [%rd8];
    ld.global.f32 %f2, [%rd9];
    add.f32 %f3, %f1, %f2;
    st.global.f32 [%rd10], %f3;
DONE:
    ret;
}
"""
"""out[i] = x[i] + y[i] for i < n: parameters x, y, out (f32 [N]) then the named dim N (s32)."""

ADD_F32_SIGNATURE = [{"kind": "global", "name": name, "dtype": "f32", "dims": ["N"]}
                     for name in ("x", "y", "out")]
ADD_F32_GRID = [["cdiv", ["dim", "N"], 128]]
ADD_F32_BLOCK = 128


def _median_us(fns: dict, batches: int, per_batch: int, sync=lambda: None) -> dict[str, float]:
    """Median over batches of the mean time per call, in µs; the functions take turns per batch."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(batches):
        for name, fn in fns.items():
            sync()
            start = time.perf_counter_ns()
            for _ in range(per_batch):
                fn()
            samples[name].append((time.perf_counter_ns() - start) / per_batch / 1000)
    sync()
    return {name: statistics.median(values) for name, values in samples.items()}


def measure_launch_overhead(n: int = 4096, batches: int = 50, per_batch: int = 100) -> dict:
    """Launcher vs raw cuLaunchKernel of the add_f32 cubin on the current GPU (median µs per launch)."""
    import torch

    from . import driver, toolchain
    from .launcher import Launcher

    cubin, report = toolchain.assemble(ADD_F32_PTX, name="add_f32")
    module = driver.Module.load(cubin, ADD_F32_PTX)
    fn = module.get_function("add_f32")
    launcher = Launcher(fn, ADD_F32_SIGNATURE, ADD_F32_GRID, ADD_F32_BLOCK, 0, name="add_f32",
                        device=module.device)
    x, y = (torch.randn(n, device="cuda") for _ in range(2))
    out = torch.empty_like(x)
    launcher(x, y, out)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y), "add_f32 through the Launcher gave a wrong result"

    cu = driver.cu()
    stream = torch.cuda.current_stream().cuda_stream
    values = [ctypes.c_uint64(t.data_ptr()) for t in (x, y, out)] + [ctypes.c_int32(n)]
    pointers = (ctypes.c_void_p * 4)(*[ctypes.addressof(v) for v in values])
    address, grid = ctypes.addressof(pointers), (n + 127) // 128
    driver.check(cu.cuLaunchKernel(fn, grid, 1, 1, 128, 1, 1, 0, stream, address, 0), "raw cuLaunchKernel")

    times = _median_us({
        "raw_us": lambda: cu.cuLaunchKernel(fn, grid, 1, 1, 128, 1, 1, 0, stream, address, 0),
        "launcher_us": lambda: launcher(x, y, out),
        "launcher_explicit_stream_us": lambda: launcher(x, y, out, stream=stream),
        "torch_add_us": lambda: torch.add(x, y, out=out),
    }, batches, per_batch, torch.cuda.synchronize)
    return {"device": torch.cuda.get_device_name(), "n": n, "batches": batches, "per_batch": per_batch,
            "registers": report["add_f32"].registers, "loaded_from_ptx": module.from_ptx, **times,
            "overhead_us": times["launcher_us"] - times["raw_us"],
            "ratio": times["launcher_us"] / times["raw_us"]}


def measure_host_overhead(batches: int = 50, per_batch: int = 2000) -> dict:
    """The Python-side cost of a Launcher call, without a GPU: CPU tensors, a fake launch function."""
    import torch

    from .launcher import Launcher

    def fake_launch(*args):
        return (0,)

    # Device -1 is where CPU tensors say they are (get_device() == -1): they take the fast path.
    launcher = Launcher(object(), ADD_F32_SIGNATURE, ADD_F32_GRID, ADD_F32_BLOCK, 0, name="add_f32", device=-1,
                        launch=fake_launch, current_device=lambda: -1, current_stream=lambda dev: 0)
    x, y, out = (torch.empty(4096) for _ in range(3))
    fn, address = object(), 12345
    times = _median_us({
        "fake_raw_us": lambda: fake_launch(fn, 32, 1, 1, 128, 1, 1, 0, 0, address, 0),
        "launcher_us": lambda: launcher(x, y, out),
        "launcher_explicit_stream_us": lambda: launcher(x, y, out, stream=0),
    }, batches, per_batch)
    return {**times, "host_overhead_us": times["launcher_us"] - times["fake_raw_us"]}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    result = measure_host_overhead() if "--cpu" in argv else measure_launch_overhead()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
