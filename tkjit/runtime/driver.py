"""The CUDA driver through cuda-python (``cuda.bindings.driver``), imported lazily.

Everything runs on PyTorch's current device and its primary context: torch and tkjit kernels
share memory and streams. ``gpu_available()`` never raises, so a machine without a GPU (or
without cuda-python) can ask. cuda-python calls return ``(CUresult, value...)``; ``check``
unwraps them and turns a failure into a DriverError that names the driver's error.
"""
from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

from ..errors import LaunchError, NotAvailableError, TkError

_cu = None
_primary_contexts: dict[int, object] = {}
_device_attributes: dict[tuple[int, str], int] = {}
_DEFAULT_SMEM_LIMIT = 48 * 1024
_CUBIN_REFUSALS = {"CUDA_ERROR_NO_BINARY_FOR_GPU", "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
                   "CUDA_ERROR_INVALID_IMAGE", "CUDA_ERROR_INVALID_PTX", "CUDA_ERROR_INVALID_SOURCE"}
"""Errors from loading a cubin after which loading the PTX through the driver JIT may work."""


class DriverError(TkError):
    """A CUDA driver call failed; ``name`` is the driver's error name (``CUDA_ERROR_...``)."""

    def __init__(self, message: str, code: int, name: str):
        super().__init__(message)
        self.code = code
        self.name = name


def cu():
    """The ``cuda.bindings.driver`` module; NotAvailableError if cuda-python is missing."""
    global _cu
    if _cu is None:
        try:
            from cuda.bindings import driver
        except ImportError:
            raise NotAvailableError("the GPU backend needs cuda-python's driver bindings "
                                    "(cuda.bindings.driver): pip install tkjit[cuda]") from None
        _cu = driver
    return _cu


DEFAULT_LAUNCH_API = "bindings"
"""How Launchers call cuLaunchKernel unless told otherwise: cuda-python's Cython wrapper. Against
libcuda's symbol through ctypes (no argtypes, handles passed as prebuilt c_void_p) it measured
faster both on the CPU with a stub libcuda (0.37 vs 0.52 µs per call) and on an H200 (bench_launch,
2026-11-21: raw 3.32 vs 3.35 µs, through the Launcher 5.26 vs 5.33 µs); with argtypes set, ctypes
costs ~0.5 µs more."""
_ctypes_launch = None


def default_launch_api() -> str:
    return DEFAULT_LAUNCH_API


def launch_function(api: str):
    """The raw cuLaunchKernel of a launch API: ``"bindings"`` (cuda-python; returns
    ``(CUresult,)``) or ``"ctypes"`` (libcuda's symbol; returns the CUresult as an int, takes the
    function, stream and parameter block as c_void_p or None and the sizes as Python ints)."""
    global _ctypes_launch
    if api == "bindings":
        return cu().cuLaunchKernel
    if api != "ctypes":
        raise TkError(f"unknown launch API {api!r} (expected bindings or ctypes)")
    if _ctypes_launch is None:
        import ctypes
        try:
            function = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
        except OSError as e:
            raise NotAvailableError(f"cannot load libcuda.so.1 through ctypes: {e}") from None
        function.restype = ctypes.c_int  # no argtypes: their per-call conversion costs ~0.5 µs
        _ctypes_launch = function
    return _ctypes_launch


def _torch():
    try:
        import torch
    except ImportError:
        raise NotAvailableError("launching kernels needs PyTorch with CUDA: pip install torch") from None
    return torch


def error_name(err) -> str:
    """``CUDA_ERROR_...`` for a CUresult (works without a driver)."""
    name = getattr(err, "name", None)
    if name is None:
        try:
            name = cu().CUresult(int(err)).name
        except Exception:
            name = f"CUresult {int(err)}"
    return name


def driver_error(err, what: str) -> DriverError:
    name = error_name(err)
    detail = ""
    try:
        res, text = cu().cuGetErrorString(err)
        detail = f" ({text.decode()})" if not res and text else ""
    except Exception:
        pass
    return DriverError(f"{what} failed: {name}{detail}", int(err), name)


def check(result, what: str = "a CUDA driver call"):
    """Unwrap ``(CUresult, values...)`` (or a bare CUresult): None, the value, or a tuple of them."""
    err, values = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if err:  # CUresult is an int; 0 is CUDA_SUCCESS
        raise driver_error(err, what)
    if not values:
        return None
    return values[0] if len(values) == 1 else values


@functools.lru_cache(maxsize=1)
def initialized_driver():
    """The driver bindings after ``cuInit``; NotAvailableError when this machine has no NVIDIA
    driver (cuda-python then fails to find libcuda at the first call)."""
    driver = cu()
    try:
        result = driver.cuInit(0)
    except RuntimeError as e:  # cuda-pathfinder's DynamicLibNotFoundError
        raise NotAvailableError(f"no NVIDIA driver on this machine: {e}") from None
    check(result, "cuInit")
    return driver


def gpu_available() -> bool:
    """Whether cuda-python, a driver, a CUDA device and a CUDA build of torch are all present."""
    try:
        driver = initialized_driver()
        err, count = driver.cuDeviceGetCount()
        if err or count < 1:
            return False
        import torch
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def ensure_context() -> int:
    """Make sure this thread has a current context; return torch's current device index.

    Uses the device's primary context (the one the CUDA runtime, hence torch, uses), and only
    makes it current when no context is current.
    """
    torch = _torch()
    driver = initialized_driver()
    if not torch.cuda.is_available():
        raise NotAvailableError("PyTorch sees no CUDA device (a CPU-only build of torch?)")
    torch.cuda.init()
    device = torch.cuda.current_device()
    ctx = check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if ctx is None or int(ctx) == 0:
        if device not in _primary_contexts:
            handle = check(driver.cuDeviceGet(device), "cuDeviceGet")
            _primary_contexts[device] = check(driver.cuDevicePrimaryCtxRetain(handle),
                                              "cuDevicePrimaryCtxRetain")
        check(driver.cuCtxSetCurrent(_primary_contexts[device]), "cuCtxSetCurrent")
    return device


def device_attribute(device: int, name: str) -> int:
    """A CU_DEVICE_ATTRIBUTE_<name> of a device, cached (e.g. ``"MULTIPROCESSOR_COUNT"``)."""
    key = (device, name)
    if key not in _device_attributes:
        driver = initialized_driver()
        handle = check(driver.cuDeviceGet(device), "cuDeviceGet")
        attr = getattr(driver.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
        _device_attributes[key] = int(check(driver.cuDeviceGetAttribute(attr, handle),
                                            f"cuDeviceGetAttribute({name})"))
    return _device_attributes[key]


def num_sms(device: int | None = None) -> int:
    """Streaming multiprocessors on a device (default: torch's current device)."""
    return device_attribute(_torch().cuda.current_device() if device is None else device,
                            "MULTIPROCESSOR_COUNT")


def compute_capability(device: int | None = None) -> tuple[int, int]:
    device = _torch().cuda.current_device() if device is None else device
    return (device_attribute(device, "COMPUTE_CAPABILITY_MAJOR"),
            device_attribute(device, "COMPUTE_CAPABILITY_MINOR"))


@dataclass
class Module:
    """A loaded CUmodule, on the device that was current when it was loaded."""

    handle: object
    device: int
    from_ptx: bool = False
    """True when the driver refused the cubin and the PTX was JIT-compiled instead."""

    @staticmethod
    def load(cubin: bytes | None, ptx: str | None = None) -> "Module":
        """Load a cubin; if the driver refuses it (wrong GPU, too-new PTX ISA...), JIT the PTX."""
        device = ensure_context()
        driver = cu()
        if cubin:
            err, handle = driver.cuModuleLoadData(cubin)
            if not err:
                return Module(handle, device)
            if ptx is None or error_name(err) not in _CUBIN_REFUSALS:
                raise driver_error(err, "cuModuleLoadData (loading the cubin)")
            reason = f"the driver refused the cubin ({error_name(err)})"
        elif ptx is None:
            raise TkError("Module.load needs a cubin or PTX text")
        else:
            reason = "no cubin was given"
        warnings.warn(f"tkjit: {reason}; JIT-compiling the PTX through the driver instead (slower to "
                      "load, and the driver may drop setmaxnreg: check CU_FUNC_ATTRIBUTE_NUM_REGS)",
                      RuntimeWarning, stacklevel=2)
        handle = check(driver.cuModuleLoadData(ptx.encode() + b"\0"),
                       f"cuModuleLoadData (JIT-compiling the PTX after {reason})")
        return Module(handle, device, from_ptx=True)

    def get_function(self, name: str):
        """The CUfunction of a kernel entry in this module."""
        return check(cu().cuModuleGetFunction(self.handle, name.encode()), f"cuModuleGetFunction('{name}')")

    def unload(self) -> None:
        check(cu().cuModuleUnload(self.handle), "cuModuleUnload")


def function_attribute(fn, name: str) -> int:
    """A CU_FUNC_ATTRIBUTE_<name> of a function (e.g. ``"NUM_REGS"``, ``"SHARED_SIZE_BYTES"``)."""
    driver = cu()
    attr = getattr(driver.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name}")
    return int(check(driver.cuFuncGetAttribute(attr, fn), f"cuFuncGetAttribute({name})"))


def allow_nonportable_cluster(fn, ctas: int) -> None:
    """Let ``fn`` run with clusters of ``ctas`` CTAs when that is over the portable 8 (Hopper
    takes up to 16 where the function opts in: CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED)."""
    if ctas <= 8:
        return
    driver = cu()
    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
    check(driver.cuFuncSetAttribute(fn, attr, 1), "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)")


def set_dynamic_smem(fn, nbytes: int, device: int | None = None) -> None:
    """Allow ``nbytes`` of dynamic shared memory (needed above 48 KB); refuse what cannot fit."""
    if nbytes <= _DEFAULT_SMEM_LIMIT:
        return
    device = ensure_context() if device is None else device
    limit = device_attribute(device, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
    static = function_attribute(fn, "SHARED_SIZE_BYTES")
    if nbytes + static > limit:
        raise LaunchError(f"the kernel needs {nbytes} bytes of dynamic shared memory plus {static} static, "
                          f"but a block on device {device} may have at most {limit}")
    driver = cu()
    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    check(driver.cuFuncSetAttribute(fn, attr, nbytes), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
