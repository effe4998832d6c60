"""Launch overhead: a Launcher call against a raw ``cuLaunchKernel`` of the same cubin.

``measure_launch_overhead()`` needs a Hopper GPU. It times, interleaved batch by batch, three raw
launches of the same cubin with everything prepared: ``raw_us``, cuda-python's ``cuLaunchKernel``
as a user of cuda-python calls it; ``raw_ctypes_us``, libcuda's symbol through ctypes with
prebuilt handles; ``raw_native_us``, libcuda's symbol called from C by the native extension's
``RawLaunch`` (nothing but the call: the floor a Python caller can reach). The baseline of the
1.3x target, ``raw_best_us``, is the fastest of them. Beside them: the Launcher through each
launch API (``launcher_us`` is the default one: native where it could be built), a
``tkjit.compile``d kernel object against a raw launch of its own function, and ``torch.add``.
``measure_host_overhead()`` runs anywhere (a launch that does nothing and CPU tensors) and
isolates the host-side cost of checking and packing, for the Python path and the native one.
``python -m tkjit.runtime.bench_launch [--cpu]`` prints either as JSON.
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

ADD_TK = """\
# O = X + Y, 16 rows of 64 f32 per block
kernel add(X: gl<f32>[N, 64], Y: gl<f32>[N, 64], O: gl<f32>[N, 64]) {
  for i in blocks(N / 16) {
    x: rt<f32>[16, 64] = X.tile(i, 0)
    y: rt<f32>[16, 64] = Y.tile(i, 0)
    O.tile(i, 0) = x + y
  }
}
"""
"""The same sum in the kernel language, for the kernel object's overhead."""


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
    """Launchers and the kernel object vs raw cuLaunchKernel on the current GPU (median µs per launch)."""
    import datetime

    import torch

    import tkjit

    from . import driver, native, toolchain
    from .launcher import Launcher

    native.prepare()  # a warm installation's launch path, even on a machine that never launched
    cubin, report = toolchain.assemble(ADD_F32_PTX, name="add_f32")
    module = driver.Module.load(cubin, ADD_F32_PTX)
    fn = module.get_function("add_f32")
    apis = ("bindings", "ctypes") + (("native",) if native.module() is not None else ())
    launchers = {api: Launcher(fn, ADD_F32_SIGNATURE, ADD_F32_GRID, ADD_F32_BLOCK, 0, name="add_f32",
                               device=module.device, launch_api=api) for api in apis}
    default = Launcher(fn, ADD_F32_SIGNATURE, ADD_F32_GRID, ADD_F32_BLOCK, 0, name="add_f32",
                       device=module.device).launch_api
    x, y = (torch.randn(n, device="cuda") for _ in range(2))
    out = torch.empty_like(x)
    for launcher in launchers.values():
        out.fill_(float("nan"))
        launcher(x, y, out)
        torch.cuda.synchronize()
        assert torch.equal(out, x + y), f"add_f32 through the {launcher.launch_api} Launcher gave a wrong result"

    cu = driver.cu()
    stream = torch.cuda.current_stream().cuda_stream
    raw = _raw_launch(cu, fn, [x, y, out], [n], stream)
    raw_ctypes = _raw_ctypes_launch(driver, fn, [x, y, out], [n], stream)
    raw_native, keep_alive = _raw_native_launch(driver, native, fn, [x, y, out], [n], stream)

    kernel = tkjit.compile(ADD_TK, filename="bench_add.tk")
    x2, y2, o2 = (t.view(n // 64, 64) for t in (x, y, out))
    o2.fill_(float("nan"))
    kernel(x2, y2, o2)
    torch.cuda.synchronize()
    assert torch.equal(o2, x2 + y2), "the add kernel object gave a wrong result"
    kernel_launcher = kernel._launchers[torch.cuda.current_device()]
    kernel_raw = _raw_launch(cu, kernel_launcher.function, [x2, y2, o2], [n // 64], stream,
                             grid=kernel_launcher.grid(N=n // 64), block=kernel_launcher.block,
                             smem=kernel_launcher.smem_bytes)

    fns = {"raw_us": raw, "raw_ctypes_us": raw_ctypes}
    if raw_native is not None:
        fns["raw_native_us"] = raw_native
    fns.update({f"launcher_{api}_us": (lambda launcher: lambda: launcher(x, y, out))(launchers[api])
                for api in apis})
    fns.update({
        "launcher_explicit_stream_us": lambda: launchers[default](x, y, out, stream=stream),
        "kernel_raw_us": kernel_raw,
        "kernel_us": lambda: kernel(x2, y2, o2),
        "torch_add_us": lambda: torch.add(x, y, out=out),
    })
    times = _median_us(fns, batches, per_batch, torch.cuda.synchronize)
    del keep_alive  # the raw native launch's parameter block, alive until here
    raw_best = min(times[k] for k in ("raw_us", "raw_ctypes_us", "raw_native_us") if k in times)
    launcher_us = times[f"launcher_{default}_us"]
    return {"date": datetime.date.today().isoformat(), "device": torch.cuda.get_device_name(),
            "torch": torch.__version__, "n": n, "batches": batches, "per_batch": per_batch,
            "registers": report["add_f32"].registers, "loaded_from_ptx": module.from_ptx,
            "default_launch_api": default, "native_status": native.status(), **times,
            "launcher_us": launcher_us, "raw_best_us": raw_best,
            "overhead_us": launcher_us - raw_best,
            "ratio": launcher_us / raw_best,
            "ratio_vs_cuda_python": launcher_us / times["raw_us"],
            "kernel_ratio": times["kernel_us"] / times["kernel_raw_us"]}


def _param_block(tensors, ints) -> tuple:
    """(ctypes values kept alive, the void*[] of their addresses) for a raw launch."""
    values = [ctypes.c_uint64(t.data_ptr()) for t in tensors] + [ctypes.c_int32(v) for v in ints]
    pointers = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
    return values, pointers


def _raw_launch(cu, fn, tensors, ints, stream, grid=None, block=(ADD_F32_BLOCK, 1, 1), smem: int = 0):
    """A cuda-python cuLaunchKernel call with everything prepared, as a user of cuda-python writes it."""
    from . import driver
    values, pointers = _param_block(tensors, ints)
    address = ctypes.addressof(pointers)
    gx, gy, gz = grid or ((ints[0] + ADD_F32_BLOCK - 1) // ADD_F32_BLOCK, 1, 1)
    bx, by, bz = block
    driver.check(cu.cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, smem, stream, address, 0), "raw cuLaunchKernel")

    def launch():
        return cu.cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, smem, stream, address, 0)
    launch.keep_alive = (values, pointers)
    return launch


def _raw_ctypes_launch(driver, fn, tensors, ints, stream):
    """libcuda's cuLaunchKernel through ctypes, every handle a prebuilt c_void_p: the cheapest raw call."""
    values, pointers = _param_block(tensors, ints)
    launch = driver.launch_function("ctypes")
    handle, params = ctypes.c_void_p(int(fn)), ctypes.c_void_p(ctypes.addressof(pointers))
    cstream = ctypes.c_void_p(stream) if stream else None
    grid = (ints[0] + ADD_F32_BLOCK - 1) // ADD_F32_BLOCK
    err = launch(handle, grid, 1, 1, ADD_F32_BLOCK, 1, 1, 0, cstream, params, None)
    if err:
        raise driver.driver_error(err, "raw cuLaunchKernel through ctypes")

    def raw():
        return launch(handle, grid, 1, 1, ADD_F32_BLOCK, 1, 1, 0, cstream, params, None)
    raw.keep_alive = (values, pointers)
    return raw


def _raw_native_launch(driver, native, fn, tensors, ints, stream):
    """(libcuda's cuLaunchKernel called from C by a prepared RawLaunch, what it points at); the
    caller keeps the second alive while it launches. (None, None) without the extension."""
    if native.module() is None:
        return None, None
    values, pointers = _param_block(tensors, ints)
    address = ctypes.cast(driver.launch_function("ctypes"), ctypes.c_void_p).value
    grid = (ints[0] + ADD_F32_BLOCK - 1) // ADD_F32_BLOCK
    raw = native.module().RawLaunch(address, int(fn), grid, 1, 1, ADD_F32_BLOCK, 1, 1, 0, stream,
                                    ctypes.addressof(pointers))
    err = raw()
    if err:
        raise driver.driver_error(err, "raw cuLaunchKernel through the native extension")
    return raw, (values, pointers)


def measure_host_overhead(batches: int = 50, per_batch: int = 2000) -> dict:
    """The host-side cost of a Launcher call, without a GPU: CPU tensors and launches that do
    nothing (a Python function for the Python path; a C function, where the native extension
    could be built, for the native path and its raw baseline)."""
    import torch

    from . import native
    native.prepare()
    from .launcher import Launcher

    def fake_launch(*args):
        return (0,)

    # Device -1 is where CPU tensors say they are (get_device() == -1): they take the fast path.
    hooks = dict(name="add_f32", device=-1, current_device=lambda: -1,
                 current_stream=lambda dev: 0)
    launcher = Launcher(object(), ADD_F32_SIGNATURE, ADD_F32_GRID, ADD_F32_BLOCK, 0, launch=fake_launch, **hooks)
    x, y, out = (torch.empty(4096) for _ in range(3))
    fn, address = object(), 12345
    fns = {
        "fake_raw_us": lambda: fake_launch(fn, 32, 1, 1, 128, 1, 1, 0, 0, address, 0),
        "launcher_us": lambda: launcher(x, y, out),
        "launcher_explicit_stream_us": lambda: launcher(x, y, out, stream=0),
    }
    if native.module() is not None:
        noop = native.module().noop_launch_address()
        fast = Launcher(0x1234, ADD_F32_SIGNATURE, ADD_F32_GRID, ADD_F32_BLOCK, 0, launch=noop,
                        launch_api="native", **hooks)
        fns["native_raw_us"] = native.module().RawLaunch(noop, 0x1234, 32, 1, 1, 128, 1, 1, 0, 0, 0)
        fns["native_launcher_us"] = lambda: fast(x, y, out)
    times = _median_us(fns, batches, per_batch)
    result = {**times, "host_overhead_us": times["launcher_us"] - times["fake_raw_us"],
              "native_status": native.status()}
    if "native_raw_us" in times:
        result["native_host_overhead_us"] = times["native_launcher_us"] - times["native_raw_us"]
    return result


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    result = measure_host_overhead() if "--cpu" in argv else measure_launch_overhead()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
