"""Binding a launch's arguments to a kernel's parameters, with the GPU launcher's checks.

Arguments come in kernel parameter order: a torch CPU tensor or a numpy array for each global
(outputs are written in place), a Python number for each scalar. A global may be strided (a
transpose of leading dimensions, a slice, a view of a fused projection) as long as its last
dimension is contiguous; the interpreter reads and writes through the strides. A tensor the
kernel writes must not overlap itself (a broadcast, stride 0). Every
named dimension binds from the first tensor that has it; later uses of the name must agree, and
a dimension written as an integer (or named by a constant) must match it. Anything else is a
``LaunchError`` naming the argument.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import LaunchError
from ..ir.core import Kernel, Value
from ..ir.ops import Store
from ..ir.types import BF16, BOOL, E4M3, E5M2, F16, F32, I32, DType, GlobalType, ScalarType
from ..runtime import launch_checks as shared
from ..runtime.launch_checks import launch_checks, launch_error
from ..runtime.overlap import Extent, overlap_error
from ..runtime.strides import check as check_strides
from .numerics import round_scalar
from .values import GlobalValue

_TORCH_DTYPE_NAMES = {"bfloat16": BF16, "float16": F16, "float32": F32, "float8_e4m3fn": E4M3,
                      "float8_e5m2": E5M2, "int32": I32}
"""torch.<name> -> our dtype."""

_NUMPY_DTYPE_NAMES = {"float32": F32, "float16": F16, "int32": I32,
                      "bfloat16": BF16, "float8_e4m3fn": E4M3, "float8_e5m2": E5M2}
"""numpy dtype names (the last three are ml_dtypes' extension types) -> our dtype."""

_BIT_VIEWS = {BF16: np.uint16, E4M3: np.uint8, E5M2: np.uint8}


@dataclass
class Launch:
    """What one launch binds: a runtime value per parameter, and every dimension's size."""

    params: dict[Value, Any] = field(default_factory=dict)
    dims: dict[str, int] = field(default_factory=dict)


def bind(kernel: Kernel, args: list, constants: dict[str, int] | None = None) -> Launch:
    """The launch's values, after the checks the GPU launcher makes too (runtime/launch_checks.py:
    the same messages), and the interpreter's own (CPU tensors or numpy arrays, bool scalars)."""
    constants = dict(constants or {})
    if not isinstance(args, (list, tuple)):
        raise LaunchError(f"{kernel.name}: arguments must be a list, got {type(args).__name__}")
    names = [p.hint or f"arg{i}" for i, p in enumerate(kernel.params)]
    shared.arity(kernel.name, [(n, _describe(p.type)) for n, p in zip(names, kernel.params)], len(args))
    stored = {id(op.operands[0]) for op in kernel.walk() if isinstance(op, Store)}
    launch = Launch()
    bound: dict[str, tuple[int, int, int]] = {}  # name -> (size, argument index, axis)
    extents: list[Extent] = []

    def where_of(j: int) -> str:
        return shared.where(kernel.name, j, names[j])

    for i, (param, arg) in enumerate(zip(kernel.params, args)):
        where = where_of(i)
        if isinstance(param.type, GlobalType):
            memory = _tensor_memory(arg, param.type, where, writes=id(param) in stored)
            dims = tuple(constants.get(d, d) if isinstance(d, str) else d for d in param.type.dims)
            shared.shape(where, i, dims, memory.shape, bound, where_of)
            launch.params[param] = GlobalValue(names[i], param.type, memory)
            extents.append(Extent(i, names[i], *_byte_span(memory), id(param) in stored))
        else:
            launch.params[param] = _scalar(arg, param.type, where)
    launch.dims.update({name: size for name, (size, _, _) in bound.items()})
    overlap = overlap_error(kernel.name, extents)
    if overlap is not None:
        raise LaunchError(overlap)
    refused = launch_error(kernel.name, launch_checks(kernel), {**constants, **launch.dims})
    if refused is not None:
        raise LaunchError(refused)
    for name, value in constants.items():
        launch.dims.setdefault(name, value)
    return launch


def _byte_span(memory: np.ndarray) -> tuple[int, int]:
    """(first byte, bytes) of the memory a view can reach: for a strided view, from its lowest to
    its highest element (a bound: overlap.py then refuses an output whose span meets another
    tensor's, which is never a wrong answer, though interleaved views that do not share an element
    are refused too)."""
    start = memory.__array_interface__["data"][0]
    if memory.size == 0:
        return start, 0
    low = sum(min(0, (n - 1) * st) for n, st in zip(memory.shape, memory.strides))
    high = sum(max(0, (n - 1) * st) for n, st in zip(memory.shape, memory.strides))
    return start + low, high - low + memory.itemsize


def _describe(t) -> str:
    if isinstance(t, GlobalType):
        return shared.describe_param(t.dtype.name, t.dims)
    return shared.describe_param(t.dtype.name, None)


def _tensor_memory(arg: Any, t: GlobalType, where: str, writes: bool) -> np.ndarray:
    """A numpy view of the caller's storage (no copy), checked against ``t``'s dtype."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(arg, torch.Tensor):
        return _torch_memory(torch, arg, t, where, writes)
    if isinstance(arg, np.ndarray):
        dt = _NUMPY_DTYPE_NAMES.get(arg.dtype.name)
        if dt != t.dtype:
            shared.dtype(where, t.dtype.name, _torch_name(t.dtype), f"numpy {arg.dtype.name}")
        itemsize = arg.itemsize
        check_strides(where, arg.shape, tuple(st // itemsize if st % itemsize == 0 else st / itemsize
                                              for st in arg.strides), writes)
        if writes and not arg.flags.writeable:
            raise LaunchError(f"{where}: the kernel stores into it, but the array is read-only")
        return arg.view(_BIT_VIEWS[dt]) if dt in _BIT_VIEWS else arg
    raise LaunchError(f"{where}: expected a tensor for {t}, got {type(arg).__name__}")


def _torch_memory(torch: Any, arg: Any, t: GlobalType, where: str, writes: bool = False) -> np.ndarray:
    name = str(arg.dtype).removeprefix("torch.")
    dt = _TORCH_DTYPE_NAMES.get(name)
    if dt != t.dtype:
        shared.dtype(where, t.dtype.name, _torch_name(t.dtype), arg.dtype)
    if arg.device.type != "cpu":
        raise LaunchError(f"{where}: the interpreter runs on the CPU; got a tensor on {arg.device}")
    check_strides(where, tuple(arg.shape), tuple(arg.stride()), writes)
    arg = arg.detach()
    if dt == BF16:
        return arg.view(torch.int16).numpy().view(np.uint16)
    if dt in (E4M3, E5M2):
        return arg.view(torch.uint8).numpy()
    return arg.numpy()


def _torch_name(dt: DType) -> str:
    return next((f"torch.{k}" for k, v in _TORCH_DTYPE_NAMES.items() if v == dt), str(dt))


def _scalar(arg: Any, t: ScalarType, where: str) -> Any:
    dt: DType = t.dtype
    if dt == BOOL:  # the interpreter's own: the front end refuses bool parameters (textual IR may have one)
        if not isinstance(arg, (bool, np.bool_)):
            raise LaunchError(f"{where}: expected a bool, got {arg!r}")
        return bool(arg)
    if dt == I32:
        return shared.i32_value(arg, where)
    return round_scalar(shared.f32_argument(arg, where), dt)
