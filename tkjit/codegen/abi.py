"""The launch ABI both backends share (docs/architecture.md): the kernel's parameters as PTX
parameters and metadata entries, and block counts as the launcher's grid expressions. Kept apart
from the register-tile backend (kernel.py) so that the Hopper backend does not import it."""
from __future__ import annotations

from ..errors import NotAvailableError
from ..ir.core import Kernel, Value
from ..ir.ops import Add, CDiv, Const, Dim, FloorDiv, Max, Min, Mod, Mul, Sub
from ..ir.types import F32, I32, GlobalType, ScalarType


def grid_expr(v: Value, where) -> int | list:
    """The launch-time expression of a block count (over named dims), as the launcher reads it."""
    op = v.owner
    if isinstance(op, Const) and isinstance(op.attrs["value"], int):
        return int(op.attrs["value"])
    if isinstance(op, Dim):
        return ["dim", op.attrs["name"]]
    if isinstance(op, (Add, Sub, Mul, CDiv, FloorDiv, Mod, Max, Min)) and isinstance(v.type, ScalarType):
        a, b = (grid_expr(x, where) for x in op.operands)
        if isinstance(op, Add):
            return ["add", a, b]
        if isinstance(op, Sub):
            return ["add", a, ["mul", b, -1]]
        if isinstance(op, Mul):
            return ["mul", a, b]
        if isinstance(op, CDiv):
            return ["cdiv", a, b]
        if isinstance(op, (Max, Min)):
            return [op.NAME, a, b]
        floor = ["cdiv", ["add", a, ["add", 1, ["mul", b, -1]]], b]
        return floor if isinstance(op, FloorDiv) else ["add", a, ["mul", -1, ["mul", b, floor]]]
    raise NotAvailableError(f"blocks: a block count must be computed from constants and tensor "
                            f"dimensions before the block loop (got %{v.hint})", where.span)


def param_entries(kernel: Kernel) -> list[tuple[str, str, dict, Value | None]]:
    """(PTX type, PTX name, metadata entry, IR parameter) per kernel parameter, then (checked mode,
    IR parameter None) the error buffer, then per named dim: the launch ABI every backend shares
    (docs/architecture.md)."""
    out = []
    stored = {id(op.operands[0]) for op in kernel.walk() if op.NAME == "store"}
    for i, p in enumerate(kernel.params):
        name = f"{kernel.name}_param_{i}"
        if isinstance(p.type, GlobalType):
            writes = {"writes": True} if id(p) in stored else {}  # the launch refuses overlaps of it
            out.append((".u64", name, {"kind": "global", "name": p.hint, "dtype": p.type.dtype.name,
                                       "dims": list(p.type.dims), **writes}, p))
        elif p.type.dtype in (F32, I32):
            ptx = ".f32" if p.type.dtype == F32 else ".s32"
            out.append((ptx, name, {"kind": "scalar", "name": p.hint, "dtype": p.type.dtype.name}, p))
        else:
            raise NotAvailableError(f"kernel parameter %{p.hint}: {p.type} scalars cannot be passed "
                                    "(f32 and i32 can)", kernel.span)
    if any(op.NAME == "check" for op in kernel.walk()):  # checked mode's error buffer (emit_check.py)
        from ..runtime.device_checks import buffer_param
        out.append((".u64", f"{kernel.name}_checks", buffer_param(), None))
    for j, d in enumerate(kernel.named_dims()):
        out.append((".s32", f"{kernel.name}_dim_{j}", {"kind": "dim", "name": d}, None))
    return out
