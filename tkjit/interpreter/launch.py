"""Binding a launch's arguments to a kernel's parameters, with the GPU launcher's checks.

Arguments come in kernel parameter order: a torch CPU tensor or a numpy array for each global
(row-major contiguous; outputs are written in place), a Python number for each scalar. Every
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
from ..runtime.launch_checks import f32_value, launch_checks, launch_error
from ..runtime.launch_checks import where as launch_where
from ..runtime.overlap import Extent, overlap_error
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
    constants = dict(constants or {})
    if not isinstance(args, (list, tuple)):
        raise LaunchError(f"{kernel.name}: arguments must be a list, got {type(args).__name__}")
    names = ", ".join(p.hint or "?" for p in kernel.params)
    if len(args) != len(kernel.params):
        raise LaunchError(f"{kernel.name} takes {len(kernel.params)} arguments ({names}), "
                          f"got {len(args)}")
    stored = {id(op.operands[0]) for op in kernel.walk() if isinstance(op, Store)}
    launch = Launch()
    first_seen: dict[str, str] = {}
    extents: list[Extent] = []
    for i, (param, arg) in enumerate(zip(kernel.params, args)):
        where = f"argument {i} ({param.hint})"
        if isinstance(param.type, GlobalType):
            memory = _tensor_memory(arg, param.type, where, writes=id(param) in stored)
            _bind_dims(param.type, memory.shape, where, launch.dims, first_seen, constants)
            launch.params[param] = GlobalValue(param.hint or f"arg{i}", param.type, memory)
            extents.append(Extent(i, param.hint or f"arg{i}", memory.__array_interface__["data"][0],
                                  memory.nbytes, id(param) in stored))
        else:
            launch.params[param] = _scalar(arg, param.type, where,
                                           launch_where(kernel.name, i, param.hint or f"arg{i}"))
    overlap = overlap_error(kernel.name, extents)
    if overlap is not None:
        raise LaunchError(overlap)
    refused = launch_error(kernel.name, launch_checks(kernel), {**constants, **launch.dims})
    if refused is not None:
        raise LaunchError(refused)
    for name, value in constants.items():
        launch.dims.setdefault(name, value)
    return launch


def _bind_dims(t: GlobalType, shape: tuple[int, ...], where: str, dims: dict[str, int],
               first_seen: dict[str, str], constants: dict[str, int]) -> None:
    if len(shape) != t.rank:
        raise LaunchError(f"{where}: expected a tensor of rank {t.rank} "
                          f"[{', '.join(map(str, t.dims))}], got shape {tuple(shape)}")
    for axis, (d, size) in enumerate(zip(t.dims, shape)):
        if isinstance(d, int) or d in constants:
            want = d if isinstance(d, int) else constants[d]
            if size != want:
                label = f"{d} = {want}" if isinstance(d, str) else str(want)
                raise LaunchError(f"{where}: dimension {axis} must be {label}, got {size}")
        elif d in dims:
            if dims[d] != size:
                raise LaunchError(f"{where}: dimension {axis} is {d} = {size}, but {first_seen[d]} "
                                  f"has {d} = {dims[d]}")
        else:
            if size > 2**31 - 1:
                raise LaunchError(f"{where}: dimension {axis} ({d} = {size}) does not fit in i32")
            dims[d] = size
            first_seen[d] = where


def _a(dt: DType) -> str:
    """'a bf16', 'an f32', 'an i32': the article as the name is spoken."""
    return f"an {dt}" if dt.name[0] in "aefi" else f"a {dt}"


def _tensor_memory(arg: Any, t: GlobalType, where: str, writes: bool) -> np.ndarray:
    """A numpy view of the caller's storage (no copy), checked against ``t``'s dtype."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(arg, torch.Tensor):
        return _torch_memory(torch, arg, t, where)
    if isinstance(arg, np.ndarray):
        dt = _NUMPY_DTYPE_NAMES.get(arg.dtype.name)
        if dt != t.dtype:
            raise LaunchError(f"{where}: expected {_a(t.dtype)} array, got numpy {arg.dtype.name}")
        if not arg.flags.c_contiguous:
            raise LaunchError(f"{where}: the array must be row-major contiguous")
        if writes and not arg.flags.writeable:
            raise LaunchError(f"{where}: the kernel stores into it, but the array is read-only")
        return arg.view(_BIT_VIEWS[dt]) if dt in _BIT_VIEWS else arg
    raise LaunchError(f"{where}: expected a tensor for {t}, got {type(arg).__name__}")


def _torch_memory(torch: Any, arg: Any, t: GlobalType, where: str) -> np.ndarray:
    name = str(arg.dtype).removeprefix("torch.")
    dt = _TORCH_DTYPE_NAMES.get(name)
    if dt != t.dtype:
        want = next((f"torch.{k}" for k, v in _TORCH_DTYPE_NAMES.items() if v == t.dtype), None)
        hint = f" ({want})" if want else ""
        raise LaunchError(f"{where}: expected {_a(t.dtype)} tensor{hint}, got {arg.dtype}")
    if arg.device.type != "cpu":
        raise LaunchError(f"{where}: the interpreter runs on the CPU; got a tensor on {arg.device}")
    if not arg.is_contiguous():
        raise LaunchError(f"{where}: the tensor must be row-major contiguous "
                          f"(shape {tuple(arg.shape)}, strides {arg.stride()})")
    arg = arg.detach()
    if dt == BF16:
        return arg.view(torch.int16).numpy().view(np.uint16)
    if dt in (E4M3, E5M2):
        return arg.view(torch.uint8).numpy()
    return arg.numpy()


def _scalar(arg: Any, t: ScalarType, where: str, shared_where: str) -> Any:
    dt: DType = t.dtype
    if dt == BOOL:
        if not isinstance(arg, (bool, np.bool_)):
            raise LaunchError(f"{where}: expected a bool, got {arg!r}")
        return bool(arg)
    if isinstance(arg, (bool, np.bool_)) or not isinstance(arg, (int, float, np.integer, np.floating)):
        raise LaunchError(f"{where}: expected {_a(dt)} scalar, got {type(arg).__name__} {arg!r}")
    if dt == I32:
        if not isinstance(arg, (int, np.integer)):
            raise LaunchError(f"{where}: expected an i32 (an integer), got {arg!r}")
        if not -2**31 <= int(arg) < 2**31:
            raise LaunchError(f"{where}: {arg} does not fit in i32")
        return int(arg)
    if dt == F32:  # the GPU launcher's check and message (launch_checks.py)
        return round_scalar(f32_value(arg, shared_where), dt)
    return round_scalar(float(arg), dt)
