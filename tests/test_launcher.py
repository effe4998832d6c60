"""The Launcher's checking and packing, without a GPU: the driver calls are injected.

CUDA tensors are faked by a torch.Tensor subclass over CPU (or meta) storage that reports a CUDA
device; the launch function records the grid, block, stream and the values in the parameter
block. Host overhead on a CPU: ``python -m tkjit.runtime.bench_launch --cpu`` (about 1.7 µs for
three tensors on the CI machine, against 0.08 µs for calling the fake launch directly).
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
import torch

from tkjit.errors import LaunchError, NotAvailableError, TkError
from tkjit.runtime.launcher import Launcher, compile_grid, named_dims, parse_signature
from support import fake_cuda_tensor_class

FN = object()
STREAM = 1234


FakeCuda = fake_cuda_tensor_class()


def cuda(t: torch.Tensor, device: int = 0) -> FakeCuda:
    out = t.as_subclass(FakeCuda)
    out.fake_device = device
    return out


class Recorder:
    """A stand-in for cuLaunchKernel that decodes the parameter block as it is at launch time."""

    def __init__(self, kinds: str, result=0):
        self.kinds, self.result, self.calls = kinds, result, []

    def __call__(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        self.calls.append(dict(fn=fn, grid=(gx, gy, gz), block=(bx, by, bz), smem=smem, stream=stream,
                               values=self.decode(params), extra=extra))
        return (self.result,)

    def decode(self, params: int) -> list:
        pointers = (ctypes.c_void_p * len(self.kinds)).from_address(params)
        ctype = {"p": ctypes.c_uint64, "f": ctypes.c_float, "i": ctypes.c_int32}
        return [ctype[k].from_address(pointers[i]).value for i, k in enumerate(self.kinds)]


def glb(name, dims, dtype="f32"):
    return {"kind": "global", "name": name, "dtype": dtype, "dims": dims}


def scalar(name, dtype):
    return {"kind": "scalar", "name": name, "dtype": dtype}


ADD = [glb("x", ["N"]), glb("y", ["N"]), glb("out", ["N"])]
GEMM = [glb("a", ["M", "K"], "bf16"), glb("b", ["K", "N"], "bf16"), glb("c", ["M", "N"]),
        scalar("alpha", "f32"), scalar("steps", "i32")]


def make(signature, grid=(["cdiv", ["dim", "N"], 128],), kinds="pppi", **kw):
    rec = Recorder(kinds, kw.pop("result", 0))
    kw.setdefault("current_device", lambda: 0)
    kw.setdefault("current_stream", lambda dev: STREAM)
    launcher = Launcher(FN, signature, list(grid), kw.pop("block", 128), kw.pop("smem", 0), name="k",
                        launch=rec, **kw)
    return launcher, rec


def gemm_args(m=256, k=64, n=128):
    return (cuda(torch.zeros(m, k, dtype=torch.bfloat16)), cuda(torch.zeros(k, n, dtype=torch.bfloat16)),
            cuda(torch.zeros(m, n)), 0.5, 3)


# ---------------------------------------------------------------- the happy path

def test_add_launch_packs_pointers_and_the_named_dim():
    launcher, rec = make(ADD)
    x, y, out = (cuda(torch.zeros(1000)) for _ in range(3))
    launcher(x, y, out)
    (call,) = rec.calls
    assert call["fn"] is FN and call["extra"] == 0
    assert call["grid"] == (8, 1, 1) and call["block"] == (128, 1, 1) and call["smem"] == 0
    assert call["stream"] == STREAM
    assert call["values"] == [x.data_ptr(), y.data_ptr(), out.data_ptr(), 1000]


def test_gemm_signature_binds_dims_in_order_of_first_appearance():
    sig = parse_signature(GEMM)
    assert named_dims(sig) == ("M", "K", "N")
    launcher, rec = make(GEMM, grid=(["cdiv", ["dim", "N"], 64], ["cdiv", ["dim", "M"], 128]),
                         kinds="pppfiiii", block=(384,), smem=100_000)
    a, b, c, alpha, steps = gemm_args()
    launcher(a, b, c, alpha, steps)
    call = rec.calls[0]
    assert call["grid"] == (2, 2, 1) and call["block"] == (384, 1, 1) and call["smem"] == 100_000
    assert call["values"] == [a.data_ptr(), b.data_ptr(), c.data_ptr(), 0.5, 3, 256, 64, 128]


def test_second_call_rewrites_the_same_block():
    launcher, rec = make(ADD)
    launcher(*(cuda(torch.zeros(128)) for _ in range(3)))
    launcher(*(cuda(torch.zeros(300)) for _ in range(3)))
    assert [c["grid"] for c in rec.calls] == [(1, 1, 1), (3, 1, 1)]
    assert rec.calls[1]["values"][3] == 300


def test_scalars_are_normalized():
    launcher, rec = make(GEMM, kinds="pppfiiii")
    a, b, c, _, _ = gemm_args()
    launcher(a, b, c, 2, np.int64(7))  # an int for f32, a numpy int for i32
    assert rec.calls[0]["values"][3:5] == [2.0, 7]
    launcher(a, b, c, np.float32(1.5), 7)
    assert rec.calls[1]["values"][3] == 1.5


def test_empty_grid_launches_nothing():
    launcher, rec = make(ADD)
    launcher(*(cuda(torch.zeros(0)) for _ in range(3)))
    assert rec.calls == []


# ---------------------------------------------------------------- refusals

def refused(launcher, *args, **kw) -> str:
    with pytest.raises(LaunchError) as info:
        launcher(*args, **kw)
    return str(info.value)


def test_wrong_number_of_arguments():
    launcher, rec = make(ADD)
    msg = refused(launcher, cuda(torch.zeros(4)))
    assert "expected 3 arguments" in msg and "got 1" in msg and "x: f32 tensor [N]" in msg
    assert rec.calls == []


def test_not_a_tensor():
    launcher, _ = make(ADD)
    msg = refused(launcher, cuda(torch.zeros(4)), [1.0, 2.0], cuda(torch.zeros(4)))
    assert "argument 1 ('y')" in msg and "expected a torch.Tensor" in msg and "list" in msg


def test_wrong_dtype():
    launcher, _ = make(ADD)
    msg = refused(launcher, cuda(torch.zeros(4)), cuda(torch.zeros(4)), cuda(torch.zeros(4, dtype=torch.float16)))
    assert "argument 2 ('out')" in msg and "expected dtype f32" in msg and "torch.float16" in msg


@pytest.mark.parametrize("dtype,name", [(torch.bfloat16, "bf16"), (torch.float16, "f16"), (torch.float32, "f32"),
                                        (torch.float8_e4m3fn, "e4m3"), (torch.float8_e5m2, "e5m2"),
                                        (torch.int32, "i32")])
def test_dtype_map(dtype, name):
    launcher, rec = make([glb("x", [16], name)], grid=(1,), kinds="p")
    launcher(cuda(torch.zeros(16, dtype=dtype)))
    assert len(rec.calls) == 1


def test_cpu_tensors_are_refused_before_any_launch():
    launcher, rec = make(ADD)
    msg = refused(launcher, torch.zeros(4), torch.zeros(4), torch.zeros(4))
    assert "argument 0 ('x')" in msg and "not on a CUDA device" in msg
    assert rec.calls == []


def test_cpu_tensors_are_refused_with_the_default_device_hooks():
    # torch here has no CUDA: the default current_device() reports none, the checker names the argument.
    launcher = Launcher(FN, ADD, [["cdiv", ["dim", "N"], 128]], 128, 0, name="k", launch=Recorder("pppi"))
    assert "not on a CUDA device" in refused(launcher, torch.zeros(4), torch.zeros(4), torch.zeros(4))
    scalars_only = Launcher(FN, [scalar("n", "i32")], [1], 32, 0, name="k", launch=Recorder("i"))
    with pytest.raises(NotAvailableError, match="no CUDA device"):
        scalars_only(3)


def test_tensor_on_another_device():
    launcher, _ = make(ADD)
    msg = refused(launcher, cuda(torch.zeros(4)), cuda(torch.zeros(4), device=1), cuda(torch.zeros(4)))
    assert "argument 1 ('y')" in msg and "cuda:1" in msg and "current device is cuda:0" in msg


def test_kernel_loaded_on_another_device():
    launcher, _ = make(ADD, device=1)
    msg = refused(launcher, *(cuda(torch.zeros(4)) for _ in range(3)))
    assert "loaded on cuda:1" in msg and "current device is cuda:0" in msg


def test_wrong_rank():
    launcher, _ = make(ADD)
    msg = refused(launcher, cuda(torch.zeros(2, 2)), cuda(torch.zeros(4)), cuda(torch.zeros(4)))
    assert "argument 0 ('x')" in msg and "expected 1 dimensions [N]" in msg and "[2, 2]" in msg


def test_dimension_disagreeing_with_an_earlier_binding_names_both():
    launcher, _ = make(GEMM, kinds="pppfiiii")
    a, _, c, alpha, steps = gemm_args(k=64)
    b = cuda(torch.zeros(32, 128, dtype=torch.bfloat16))
    msg = refused(launcher, a, b, c, alpha, steps)
    assert "argument 1 ('b'): dim 0 (K) is 32" in msg and "argument 0 ('a') dim 1 set K = 64" in msg


def test_dimension_disagreeing_with_a_constant():
    launcher, _ = make([glb("q", ["S", 64], "bf16")], grid=(["dim", "S"],), kinds="pi")
    msg = refused(launcher, cuda(torch.zeros(8, 32, dtype=torch.bfloat16)))
    assert "argument 0 ('q'): dim 1 is 32 but the kernel requires 64" in msg


def test_not_contiguous():
    launcher, _ = make(GEMM, kinds="pppfiiii")
    a, b, c, alpha, steps = gemm_args(m=64, k=64)
    msg = refused(launcher, a.t(), b, c, alpha, steps)
    assert "argument 0 ('a')" in msg and "contiguous" in msg


def test_misaligned_data_pointer():
    launcher, _ = make(ADD)
    base = torch.zeros(17)
    msg = refused(launcher, cuda(base[1:]), cuda(torch.zeros(16)), cuda(torch.zeros(16)))
    assert "argument 0 ('x')" in msg and "16-byte aligned" in msg


def test_dimension_too_large_for_s32():
    launcher, _ = make([glb("x", ["N"])], kinds="pi")
    huge = cuda(torch.empty(2**31, device="meta"))
    msg = refused(launcher, huge)
    assert "argument 0 ('x')" in msg and "below 2^31" in msg


@pytest.mark.parametrize("alpha,steps,expect", [
    ("0.5", 3, "argument 3 ('alpha'): expected a Python float (f32), got str"),
    (True, 3, "argument 3 ('alpha'): expected a Python float (f32), got bool"),
    (torch.tensor(0.5), 3, "got Tensor"),
    (1e39, 3, "does not fit in f32"),
    (0.5, 1.5, "argument 4 ('steps'): expected a Python int (i32), got float"),
    (0.5, 2**31, "argument 4 ('steps'): 2147483648 does not fit in i32"),
    (0.5, False, "expected a Python int (i32), got bool"),
])
def test_scalar_of_the_wrong_kind(alpha, steps, expect):
    launcher, rec = make(GEMM, kinds="pppfiiii")
    a, b, c, _, _ = gemm_args()
    assert expect in refused(launcher, a, b, c, alpha, steps)
    assert rec.calls == []


def test_grid_out_of_range():
    launcher, _ = make([glb("x", ["N"])], grid=(1, ["dim", "N"]), kinds="pi")
    assert "out of range" in refused(launcher, cuda(torch.empty(70000, device="meta")))


# ---------------------------------------------------------------- streams

def test_stream_keyword_accepts_handles_and_stream_objects():
    launcher, rec = make(ADD)
    args = [cuda(torch.zeros(4)) for _ in range(3)]

    class FakeStream:
        cuda_stream = 99
        device = torch.device("cuda", 0)

    class Handle:  # e.g. cuda.bindings' CUstream
        def __int__(self):
            return 77

    launcher(*args, stream=5)
    launcher(*args, stream=FakeStream())
    launcher(*args, stream=Handle())
    launcher(*args)
    assert [c["stream"] for c in rec.calls] == [5, 99, 77, STREAM]


def test_stream_keyword_refusals():
    launcher, _ = make(ADD)
    args = [cuda(torch.zeros(4)) for _ in range(3)]

    class OtherDeviceStream:
        cuda_stream = 99
        device = torch.device("cuda", 1)

    assert "stream= must be" in refused(launcher, *args, stream="default")
    assert "is negative" in refused(launcher, *args, stream=-1)
    assert "belongs to cuda:1" in refused(launcher, *args, stream=OtherDeviceStream())


def test_default_stream_is_asked_for_the_current_device():
    asked = []
    launcher, rec = make(ADD, current_device=lambda: 3, current_stream=lambda dev: asked.append(dev) or 42)
    launcher(*(cuda(torch.zeros(4), device=3) for _ in range(3)))
    assert asked == [3] and rec.calls[0]["stream"] == 42


# ---------------------------------------------------------------- driver errors, metadata

def test_launch_failure_names_the_driver_error():
    from tkjit.runtime.driver import DriverError, cu
    launcher, _ = make(ADD, result=cu().CUresult.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
    with pytest.raises(DriverError, match="CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES") as info:
        launcher(*(cuda(torch.zeros(4)) for _ in range(3)))
    assert info.value.name == "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES" and "cuLaunchKernel of 'k'" in str(info.value)


@pytest.mark.parametrize("signature,grid,block,match", [
    ([{"kind": "tensormap", "name": "tmA"}], [1], 128, "tensor maps"),
    ([glb("x", ["N"], "f64")], [1], 128, "unsupported tensor dtype"),
    ([glb("x", ["N-1"])], [1], 128, "bad dimension"),
    ([scalar("s", "bf16")], [1], 128, "unsupported dtype"),
    (ADD, [["dim", "M"]], 128, "no parameter has"),
    (ADD, [["pow", 2, 3]], 128, "bad grid expression"),
    (ADD, [1], 2048, "bad block"),
    (ADD, [1, 1, 1, 1], 128, "1 to 3"),
])
def test_bad_metadata(signature, grid, block, match):
    with pytest.raises(TkError, match=match):
        Launcher(FN, signature, grid, block, 0, launch=Recorder(""), current_device=lambda: 0,
                 current_stream=lambda dev: 0)


def test_grid_expressions():
    names = ("M", "N")
    grid = compile_grid([["cdiv", ["dim", "M"], 128], ["min", ["mul", ["dim", "N"], 2], ["num_sms"]],
                         ["max", ["add", 1, 2], 5]], names, num_sms=132)
    assert grid(M=1, N=10) == (1, 20, 5)
    assert grid(M=129, N=100) == (2, 132, 5)
    assert grid(M=0, N=0) == (0, 0, 5)
    assert compile_grid([7], ())() == (7, 1, 1)
    choose = compile_grid([["min", ["dim", "M"], ["max", ["num_sms"], ["mul", ["dim", "M"], ["gt", ["dim", "N"], 8]]]]],
                          names, num_sms=132)  # num_sms CTAs at N <= 8, M past it
    assert choose(M=1000, N=8) == (132, 1, 1) and choose(M=1000, N=9) == (1000, 1, 1)
    assert choose(M=100, N=8) == (100, 1, 1)


def test_num_sms_is_used_in_the_fast_path():
    launcher, rec = make(ADD, grid=(["min", ["cdiv", ["dim", "N"], 128], ["num_sms"]],), num_sms=4)
    launcher(*(cuda(torch.zeros(100_000)) for _ in range(3)))
    assert rec.calls[0]["grid"] == (4, 1, 1)


def test_good_arguments_never_reach_the_checker():
    launcher, rec = make(GEMM, kinds="pppfiiii")

    def checker(args):
        raise AssertionError("the fast path refused good arguments")

    launcher.check_args = checker
    launcher(*gemm_args())
    launcher(*gemm_args(), stream=3)
    assert len(rec.calls) == 2


# ---------------------------------------------------------------- driver helpers (a fake cuda-python)

class FakeDriverModule:
    """Just enough of cuda.bindings.driver for Module.load: the cubin gets ``cubin_result``."""

    def __init__(self, cubin_result):
        from tkjit.runtime.driver import cu
        self.CUresult = cu().CUresult
        self.cubin_result, self.images = cubin_result, []

    def cuModuleLoadData(self, image):
        self.images.append(image)
        if image.endswith(b"\0"):
            return (self.CUresult.CUDA_SUCCESS, "ptx module")
        return (self.cubin_result, None) if self.cubin_result else (self.cubin_result, "cubin module")

    def cuGetErrorString(self, err):
        return (self.CUresult.CUDA_SUCCESS, b"described")


@pytest.fixture
def fake_driver(monkeypatch):
    from tkjit.runtime import driver

    def install(cubin_result):
        fake = FakeDriverModule(cubin_result)
        monkeypatch.setattr(driver, "_cu", fake)
        monkeypatch.setattr(driver, "ensure_context", lambda: 0)
        return fake
    return install


def test_module_load_falls_back_to_ptx_with_a_warning(fake_driver):
    from tkjit.runtime.driver import Module, cu
    fake = fake_driver(cu().CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU)
    with pytest.warns(RuntimeWarning, match="refused the cubin .CUDA_ERROR_NO_BINARY_FOR_GPU."):
        module = Module.load(b"\x7fELF...", ".version 8.0")
    assert module.from_ptx and module.handle == "ptx module" and fake.images[-1] == b".version 8.0\0"


def test_module_load_cubin_and_other_errors(fake_driver):
    from tkjit.runtime.driver import DriverError, Module, cu
    fake_driver(cu().CUresult.CUDA_SUCCESS)
    assert Module.load(b"\x7fELF...", ".version 8.0").from_ptx is False
    fake_driver(cu().CUresult.CUDA_ERROR_OUT_OF_MEMORY)
    with pytest.raises(DriverError, match="CUDA_ERROR_OUT_OF_MEMORY .described.") as info:
        Module.load(b"\x7fELF...", ".version 8.0")
    assert info.value.name == "CUDA_ERROR_OUT_OF_MEMORY"


def test_check_unwraps_results():
    from tkjit.runtime.driver import DriverError, check, cu
    ok, bad = cu().CUresult.CUDA_SUCCESS, cu().CUresult.CUDA_ERROR_INVALID_VALUE
    assert check((ok,)) is None and check((ok, 5)) == 5 and check((ok, 1, 2)) == (1, 2) and check(ok) is None
    with pytest.raises(DriverError, match="cuFoo failed: CUDA_ERROR_INVALID_VALUE"):
        check((bad, None), "cuFoo")


def test_gpu_available_never_raises():
    from tkjit.runtime.driver import gpu_available
    assert gpu_available() in (True, False)


def test_host_overhead_benchmark_runs():
    from tkjit.runtime.bench_launch import measure_host_overhead
    result = measure_host_overhead(batches=3, per_batch=10)
    assert result["launcher_us"] > 0 and "host_overhead_us" in result


# ---------------------------------------------------------------- parameter blocks without a lock

def test_a_launch_inside_a_launch_gets_its_own_parameter_block():
    inner_args = [cuda(torch.zeros(300)) for _ in range(3)]
    outer_args = [cuda(torch.zeros(100)) for _ in range(3)]
    holder = {}

    class Nested(Recorder):
        def __call__(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
            if not self.calls and "launcher" in holder:
                holder.pop("launcher")(*inner_args)  # re-entered while the outer block is taken
            return super().__call__(fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra)

    rec = Nested("pppi")
    launcher = Launcher(FN, ADD, [["cdiv", ["dim", "N"], 128]], 128, 0, name="k", launch=rec,
                        current_device=lambda: 0, current_stream=lambda dev: STREAM)
    holder["launcher"] = launcher
    launcher(*outer_args)
    inner, outer = rec.calls
    assert inner["values"] == [a.data_ptr() for a in inner_args] + [300]
    assert outer["values"] == [a.data_ptr() for a in outer_args] + [100]
    assert len(launcher._pool) == 2  # both blocks are back


def test_threads_launching_at_once_never_see_each_others_arguments():
    import sys
    import threading
    import time

    class Slow(Recorder):
        def __call__(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
            time.sleep(0)  # let another thread pack between our pack and our read
            self.calls.append({"thread": threading.get_ident(), "values": self.decode(params)})
            return (0,)

    rec = Slow("pppi")
    launcher = Launcher(FN, ADD, [["cdiv", ["dim", "N"], 128]], 128, 0, name="k", launch=rec,
                        current_device=lambda: 0, current_stream=lambda dev: STREAM)
    per_thread = [[cuda(torch.zeros(16 * (t + 1))) for _ in range(3)] for t in range(4)]
    start = threading.Barrier(len(per_thread))
    own = {}

    def work(args):
        own[threading.get_ident()] = [a.data_ptr() for a in args] + [len(args[0])]
        start.wait()
        for _ in range(200):
            launcher(*args)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(args,)) for args in per_thread]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert len(rec.calls) == 800 and all(c["values"] == own[c["thread"]] for c in rec.calls)


def test_refused_calls_go_to_on_refusal():
    refused = []

    def on_refusal(args, stream, checked):
        refused.append((args, stream, checked))
        return "handled"

    rec = Recorder("pppi")
    launcher = Launcher(FN, ADD, [["cdiv", ["dim", "N"], 128]], 128, 0, name="k", launch=rec,
                        current_device=lambda: 0, current_stream=lambda dev: STREAM, on_refusal=on_refusal)
    good = [cuda(torch.zeros(8)) for _ in range(3)]
    cpu = [torch.zeros(8) for _ in range(3)]
    assert launcher(*good) is None and launcher(*cpu, stream=7) == "handled"
    assert len(rec.calls) == 1 and refused == [(tuple(cpu), 7, False)]
    with pytest.raises(LaunchError, match="not on a CUDA device"):
        launcher.slow(tuple(cpu), None)


def test_the_ctypes_launch_api_passes_handles_as_pointers():
    calls = []

    def cu_launch(fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        pointers = (ctypes.c_void_p * 4).from_address(params.value)
        values = [ctypes.c_uint64.from_address(pointers[i]).value for i in range(3)]
        values.append(ctypes.c_int32.from_address(pointers[3]).value)
        calls.append((fn.value, (gx, gy, gz), (bx, by, bz), smem, stream and stream.value, values, extra))
        return 0

    launcher = Launcher(0x1234, ADD, [["cdiv", ["dim", "N"], 128]], 128, 0, name="k", launch=cu_launch,
                        launch_api="ctypes", current_device=lambda: 0, current_stream=lambda dev: 0)
    args = [cuda(torch.zeros(200)) for _ in range(3)]
    launcher(*args)
    launcher(*args, stream=0xABC)
    ptrs = [a.data_ptr() for a in args]
    assert calls == [(0x1234, (2, 1, 1), (128, 1, 1), 0, None, ptrs + [200], None),
                     (0x1234, (2, 1, 1), (128, 1, 1), 0, 0xABC, ptrs + [200], None)]
    with pytest.raises(TkError, match="unknown launch_api 'cffi'"):
        Launcher(0x1234, ADD, [1], 128, 0, launch=cu_launch, launch_api="cffi")


def test_a_constant_grid_out_of_range_is_a_metadata_error():
    with pytest.raises(TkError, match="constant grid size 0 is out of range"):
        make(ADD, grid=(0,))
    with pytest.raises(TkError, match="constant grid size 70000 is out of range"):
        make(ADD, grid=(["dim", "N"], 70000))
