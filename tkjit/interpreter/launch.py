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
    for i, (param, arg) in enumerate(zip(kernel.params, args)):
        where = f"argument {i} ({param.hint})"
        if isinstance(param.type, GlobalType):
            memory = _tensor_memory(arg, param.type, where, writes=id(param) in stored)
            _bind_dims(param.type, memory.shape, where, launch.dims, first_seen, constants)
            launch.params[param] = GlobalValue(param.hint or f"arg{i}", param.type, memory)
        else:
            launch.params[param] = _scalar(arg, param.type, where)
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
        return _torch_memory(torch, arg, t, where, writes)
    if isinstance(arg, np.ndarray):
        dt = _NUMPY_DTYPE_NAMES.get(arg.dtype.name)
        if dt != t.dtype:
            raise LaunchError(f"{where}: expected {_a(t.dtype)} array, got numpy {arg.dtype.name}")
        itemsize = arg.itemsize
        _check_strides(where, arg.shape, tuple(st // itemsize if st % itemsize == 0 else st / itemsize
                                              for st in arg.strides), writes, "array")
        if writes and not arg.flags.writeable:
            raise LaunchError(f"{where}: the kernel stores into it, but the array is read-only")
        return arg.view(_BIT_VIEWS[dt]) if dt in _BIT_VIEWS else arg
    raise LaunchError(f"{where}: expected a tensor for {t}, got {type(arg).__name__}")


def _check_strides(where: str, shape: tuple, strides: tuple, writes: bool, what: str) -> None:
    """Strides in elements: the last dimension's must be 1 (any other strides are read through);
    a tensor the kernel writes must not overlap itself."""
    if shape and shape[-1] > 1 and strides[-1] != 1:
        raise LaunchError(f"{where}: the last dimension must be contiguous (stride 1), got stride {strides[-1]} "
                          f"(shape {tuple(shape)}, strides {tuple(strides)}); other dimensions may have any "
                          f"strides; .contiguous() copies the {what}")
    if writes and _overlaps_itself(shape, strides):
        raise LaunchError(f"{where}: the kernel stores into it, but its elements overlap (shape {tuple(shape)}, "
                          f"strides {tuple(strides)}: a broadcast or expanded view); pass a tensor of its own")


def _overlaps_itself(shape: tuple, strides: tuple) -> bool:
    """Whether two indices reach one element: dims of more than one element, by stride, each
    stride at least the span of the dims inside it (a sufficient test; torch's own is the same)."""
    if any(n == 0 for n in shape):
        return False
    dims = sorted((abs(st), n) for st, n in zip(strides, shape) if n > 1)
    span = 1
    for st, n in dims:
        if st < span:
            return True
        span = st * (n - 1) + span
    return False


def _torch_memory(torch: Any, arg: Any, t: GlobalType, where: str, writes: bool = False) -> np.ndarray:
    name = str(arg.dtype).removeprefix("torch.")
    dt = _TORCH_DTYPE_NAMES.get(name)
    if dt != t.dtype:
        want = next((f"torch.{k}" for k, v in _TORCH_DTYPE_NAMES.items() if v == t.dtype), None)
        hint = f" ({want})" if want else ""
        raise LaunchError(f"{where}: expected {_a(t.dtype)} tensor{hint}, got {arg.dtype}")
    if arg.device.type != "cpu":
        raise LaunchError(f"{where}: the interpreter runs on the CPU; got a tensor on {arg.device}")
    _check_strides(where, tuple(arg.shape), tuple(arg.stride()), writes, "tensor")
    arg = arg.detach()
    if dt == BF16:
        return arg.view(torch.int16).numpy().view(np.uint16)
    if dt in (E4M3, E5M2):
        return arg.view(torch.uint8).numpy()
    return arg.numpy()


def _scalar(arg: Any, t: ScalarType, where: str) -> Any:
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
    return round_scalar(float(arg), dt)
