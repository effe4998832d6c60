"""On a Hopper GPU: the hand-written add_f32 kernel through ptxas, Module.load and the Launcher.

Results are compared with torch on fresh random inputs with a poisoned (NaN) output. The launch
overhead benchmark only has to run here; its numbers are printed (run pytest with -s).
"""
from __future__ import annotations

import json
import threading

import pytest
import torch

from tkjit.errors import LaunchError
from tkjit.runtime import driver, toolchain
from tkjit.runtime.bench_launch import (ADD_F32_BLOCK, ADD_F32_GRID, ADD_F32_PTX, ADD_F32_SIGNATURE,
                                        measure_launch_overhead)
from tkjit.runtime.launcher import Launcher

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def add_kernel():
    cubin, report = toolchain.assemble(ADD_F32_PTX, name="add_f32")
    module = driver.Module.load(cubin, ADD_F32_PTX)
    return module, module.get_function("add_f32"), report


def launcher_for(module, fn, smem: int = 0, launch_api: str | None = None) -> Launcher:
    return Launcher(fn, ADD_F32_SIGNATURE, ADD_F32_GRID, ADD_F32_BLOCK, smem, name="add_f32", device=module.device,
                    launch_api=launch_api)


def inputs(n: int):
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    return x, y, torch.full_like(x, float("nan"))


def test_cubin_loads_as_assembled(add_kernel):
    module, fn, report = add_kernel
    assert not module.from_ptx
    # the driver's count should be ptxas's "Used N registers" (at least that, if it rounds up)
    assert driver.function_attribute(fn, "NUM_REGS") >= report["add_f32"].registers > 0
    assert driver.num_sms() > 0


@pytest.mark.parametrize("n", [1, 127, 128, 1000, 1 << 20])
def test_add_matches_torch(add_kernel, n):
    module, fn, _ = add_kernel
    x, y, out = inputs(n)
    launcher_for(module, fn)(x, y, out)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)


@pytest.mark.parametrize("launch_api", ["bindings", "ctypes", "native"])
def test_every_launch_api(add_kernel, launch_api):
    from tkjit.runtime import native
    if launch_api == "native" and native.module() is None:
        pytest.skip(native.status())
    module, fn, _ = add_kernel
    launch = launcher_for(module, fn, launch_api=launch_api)
    side = torch.cuda.Stream()
    for n, stream in ((1000, None), (4096, side)):
        x, y, out = inputs(n)
        launch(x, y, out, stream=stream)
        torch.cuda.synchronize()
        torch.testing.assert_close(out, x + y, rtol=0, atol=0)


def test_kernel_object_fast_path_and_its_refusals():
    import tkjit
    from tkjit.runtime.bench_launch import ADD_TK
    kernel = tkjit.compile(ADD_TK, filename="add.tk")
    x, y = torch.randn(40, 64, device="cuda"), torch.randn(40, 64, device="cuda")
    out = torch.full_like(x, float("nan"))
    kernel(x, y, out)
    assert kernel._gpu_fast is not None
    kernel(x, y, out, stream=torch.cuda.Stream())  # the fast path with a stream
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)
    with pytest.raises(LaunchError, match="argument 2 .'O'.: expected dtype f32"):
        kernel(x, y, out.half())
    out_cpu = torch.full((40, 64), float("nan"))
    kernel(x.cpu(), y.cpu(), out_cpu)  # refused by the GPU path, run by the interpreter
    torch.testing.assert_close(out_cpu, (x + y).cpu(), rtol=0, atol=0)
    with pytest.raises(LaunchError, match="on the GPU but"):
        kernel(x, y.cpu(), out)


def test_streams(add_kernel):
    module, fn, _ = add_kernel
    launch = launcher_for(module, fn)
    side = torch.cuda.Stream()
    x, y, out = inputs(4096)
    with torch.cuda.stream(side):  # the default is torch's current stream
        launch(x, y, out)
    side.synchronize()
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)
    out.fill_(float("nan"))
    launch(x, y, out, stream=side)
    launch(x, y, out, stream=side.cuda_stream)
    side.synchronize()
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)


def test_cuda_graph_capture(add_kernel):
    module, fn, _ = add_kernel
    launch = launcher_for(module, fn)
    x, y, out = inputs(4096)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch(x, y, out)
    x.copy_(torch.randn_like(x))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)


def test_launch_from_another_thread(add_kernel):
    module, fn, _ = add_kernel
    launch = launcher_for(module, fn)
    x, y, out = inputs(4096)
    torch.cuda.synchronize()
    errors = []

    def work():
        try:
            launch(x, y, out)
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert not errors, errors
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)


def test_large_dynamic_shared_memory(add_kernel):
    module, fn, _ = add_kernel
    driver.set_dynamic_smem(fn, 100 * 1024)
    x, y, out = inputs(1000)
    launcher_for(module, fn, smem=100 * 1024)(x, y, out)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)
    with pytest.raises(LaunchError, match="dynamic shared memory"):
        driver.set_dynamic_smem(fn, 300 * 1024)


def test_refusals_on_real_tensors(add_kernel):
    module, fn, _ = add_kernel
    launch = launcher_for(module, fn)
    x, y, out = inputs(64)
    with pytest.raises(LaunchError, match="not on a CUDA device"):
        launch(x.cpu(), y, out)
    with pytest.raises(LaunchError, match="16-byte aligned"):
        launch(x[1:], y[1:], out[1:])


def test_refused_cubin_falls_back_to_ptx():
    sm80_ptx = ADD_F32_PTX.replace(".target sm_90a", ".target sm_80")
    sm80_cubin, _ = toolchain.assemble(sm80_ptx, arch="sm_80", name="add_f32_sm80")
    with pytest.warns(RuntimeWarning, match="refused the cubin"):
        module = driver.Module.load(sm80_cubin, ADD_F32_PTX)
    assert module.from_ptx
    fn = module.get_function("add_f32")
    x, y, out = inputs(1000)
    launcher_for(module, fn)(x, y, out)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)


def test_bad_image_without_ptx_is_a_driver_error():
    with pytest.raises(driver.DriverError, match="CUDA_ERROR_"):
        driver.Module.load(b"\x7fELF not really a cubin")


def test_the_default_launch_path_is_native_where_it_builds(add_kernel):
    from tkjit.runtime import native
    module, fn, _ = add_kernel
    print(native.status())
    assert launcher_for(module, fn).launch_api == ("native" if native.module() is not None else "bindings")


def test_launch_overhead_benchmark_runs():
    result = measure_launch_overhead()
    print(json.dumps(result, indent=2))
    assert result["raw_us"] > 0 and result["launcher_us"] > 0 and result["ratio"] > 0
