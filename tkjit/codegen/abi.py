"""The launch ABI both backends share (docs/architecture.md): the kernel's parameters as PTX
parameters and metadata entries, and block counts as the launcher's grid expressions. Kept apart
from the register-tile backend (kernel.py) so that the Hopper backend does not import it."""
from __future__ import annotations

from contextlib import contextmanager

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


def param_entries(kernel: Kernel, strided: bool = False) -> list[tuple[str, str, dict, Value | None]]:
    """(PTX type, PTX name, metadata entry, IR parameter) per kernel parameter, then (checked mode,
    IR parameter None) the error buffer, then per named dim: the launch ABI every backend shares
    (docs/architecture.md). ``strided`` (the compile option): then per global tensor of rank n,
    the element strides of its dims 0..n-2 as ``.s64`` (entries of kind ``stride``,
    ``{"param": i, "axis": a}``; the tensor's own entry says ``"strides": "param"``), after the
    named dims."""
    out = []
    stored = {id(op.operands[0]) for op in kernel.walk() if op.NAME == "store"}
    strides = []
    for i, p in enumerate(kernel.params):
        name = f"{kernel.name}_param_{i}"
        if isinstance(p.type, GlobalType):
            writes = {"writes": True} if id(p) in stored else {}  # the launch refuses overlaps of it
            how = {"strides": "param"} if strided else {}
            out.append((".u64", name, {"kind": "global", "name": p.hint, "dtype": p.type.dtype.name,
                                       "dims": list(p.type.dims), **writes, **how}, p))
            strides += [(".s64", f"{kernel.name}_stride_{i}_{a}", {"kind": "stride", "param": i, "axis": a}, p)
                        for a in range(len(p.type.dims) - 1)] if strided else []
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
    return out + strides


def launch_params(entries) -> list[dict]:
    """The metadata's ``params``: the tensors' and scalars' entries (named dims and strides
    follow from them)."""
    return [e[2] for e in entries if e[2]["kind"] not in ("dim", "stride")]


def stride_registers(entries, load) -> dict[int, list[str]]:
    """id(tensor parameter) -> the registers its stride entries were loaded into (``load(entry)``
    returns the register of one ``.s64`` parameter), for the address arithmetic (globalmem.py)."""
    out: dict[int, list[str]] = {}
    for entry in entries:
        if entry[2]["kind"] == "stride":
            out.setdefault(id(entry[3]), []).append(load(entry))
    return out


class Pointers(dict):
    """The registers holding the tensors' global addresses, by key (an emitter's own: id of the IR
    parameter, or its index); remembers which keys an emitter read. A tensor whose address no
    emitter read is addressed only through its TMA tensor maps: a strided view of it is then a
    matter of the maps' strides alone (``map_only``)."""

    def __init__(self):
        super().__init__()
        self.read: set = set()
        self._fallback = 0

    def __getitem__(self, key):
        if not self._fallback:
            self.read.add(key)
        return super().__getitem__(key)

    @contextmanager
    def fallback(self):
        """Reads by code that runs only where a tensor map's ``fallback`` applies (rows that are not
        16-byte multiples: the launcher takes a strided view only where every such tensor's rows
        are whole 16-byte units, so that code never runs on one) do not count."""
        self._fallback += 1
        try:
            yield
        finally:
            self._fallback -= 1


def map_only(params: list[dict], maps: list[dict], addressed: set[int]) -> None:
    """Mark (``"strides": "map"``) each tensor entry of ``params`` that has a tensor map and whose
    address the kernel never computes with (``addressed``: parameter indices): the launcher then
    takes a strided view of it by encoding the view's strides into its maps (runtime/launcher.py)."""
    mapped = {m["param"] for m in maps}
    for i, entry in enumerate(params):
        if entry.get("kind") == "global" and i in mapped and i not in addressed and "strides" not in entry:
            entry["strides"] = "map"
