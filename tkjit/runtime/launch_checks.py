"""Launch checks that the interpreter and the GPU launcher share, so that both refuse the same
arguments with the same message (issue 20): the argument count, dtypes, ranks, fixed and named
dims, contiguity, scalars (i32, f32 range), divisors and tile coordinates known at launch; outputs
that share memory are in overlap.py. What only one backend has stays its own: the device and the
alignment on the GPU, numpy arrays and bool scalars on the interpreter."""
from __future__ import annotations

import math
import numbers
import struct

from ..errors import LaunchError


def where(kernel: str, index: int, name: str | None) -> str:
    """How a launch error names an argument: ``add: argument 2 ('O')``."""
    return f"{kernel}: argument {index} ('{name}')"


def arity(kernel: str, params: list[tuple[str, str]], got: int) -> None:
    """``params``: (name, description) of every parameter (``x: f32 tensor [N]``)."""
    if got != len(params):
        expected = ", ".join(f"{name}: {what}" for name, what in params)
        raise LaunchError(f"{kernel}: expected {len(params)} arguments ({expected}), got {got}")


def describe_param(dtype: str, dims) -> str:
    """``f32 tensor [N, 64]`` (dims given) or ``f32 scalar``."""
    return f"{dtype} scalar" if dims is None else f"{dtype} tensor [{', '.join(str(d) for d in dims)}]"


def dtype(at: str, want: str, want_torch, got) -> None:
    """The tensor's dtype ``got`` (a torch or numpy dtype) is ``want`` (tkjit's name)."""
    raise LaunchError(f"{at}: expected dtype {want} ({want_torch}), got {got}")


def shape(at: str, index: int, dims, sizes, bound: dict, where_of) -> None:
    """Check a tensor's ``sizes`` against the parameter's ``dims`` (ints: required; names: bound
    at first sight, in ``bound`` as name -> (size, argument index, axis)); ``where_of(i)`` names
    argument ``i``. Binds the new names into ``bound``."""
    sizes = tuple(sizes)
    if len(sizes) != len(dims):
        raise LaunchError(f"{at}: expected {len(dims)} dimensions [{', '.join(map(str, dims))}], "
                          f"got {len(sizes)} (shape {list(sizes)})")
    for axis, (d, size) in enumerate(zip(dims, sizes)):
        if size >= 2**31:
            raise LaunchError(f"{at}: dim {axis} is {size}; dimensions must be below 2^31")
        if isinstance(d, int) and size != d:
            raise LaunchError(f"{at}: dim {axis} is {size} but the kernel requires {d}")
        if isinstance(d, str) and d in bound and bound[d][0] != size:
            value, j, other_axis = bound[d]
            raise LaunchError(f"{at}: dim {axis} ({d}) is {size} but {where_of(j)} dim "
                              f"{other_axis} set {d} = {value}")
        if isinstance(d, str):
            bound.setdefault(d, (size, index, axis))


def not_contiguous(at: str, strides, sizes) -> None:
    """The refusal of a strided tensor, naming the dimension whose stride is wrong: a last dimension
    that is not contiguous (both backends refuse it alike), or on the GPU any other stride that is
    not row-major (the GPU launcher's own refusal of a view it cannot launch as it is, a
    StridedArgument, is answered by the kernel object with a variant or a copy: runtime/strides.py)."""
    sizes, strides = tuple(sizes), tuple(strides)
    if sizes and sizes[-1] > 1 and strides[-1] != 1:
        raise LaunchError(f"{at}: the tensor's last dimension must be contiguous (stride 1), got stride "
                          f"{strides[-1]} (strides {strides} for shape {sizes}); call .contiguous()")
    raise LaunchError(f"{at}: the tensor must be contiguous (row-major) on the GPU: "
                      f"{first_strided(tuple(sizes), tuple(strides))}; got strides {tuple(strides)} for shape "
                      f"{tuple(sizes)}; call .contiguous() (the CPU interpreter reads any strides whose last "
                      "dimension is contiguous)")


def first_strided(shape: tuple, strides: tuple) -> str:
    """Which dimension of a non-contiguous tensor breaks row-major order, e.g. 'dim 0 has stride 96,
    row-major needs 64'."""
    want = 1
    for axis in reversed(range(len(shape))):
        if shape[axis] != 1 and strides[axis] != want:
            return f"dim {axis} has stride {strides[axis]}, row-major needs {want}"
        want *= shape[axis]
    return "its strides are not row-major"


def i32_value(value, at: str) -> int:
    """An i32 scalar argument: an integer (not a bool) that fits."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise LaunchError(f"{at}: expected a Python int (i32), got {type(value).__name__}")
    value = int(value)
    if not -2**31 <= value < 2**31:
        raise LaunchError(f"{at}: {value} does not fit in i32")
    return value


def f32_argument(value, at: str) -> float:
    """An f32 scalar argument: a real number (not a bool) that f32 holds (``f32_value``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise LaunchError(f"{at}: expected a Python float (f32), got {type(value).__name__}")
    return f32_value(value, at)


def _show(value) -> str:
    if isinstance(value, numbers.Integral) and abs(int(value)) >= 10**20:
        return f"an integer of {int(value).bit_length()} bits"
    return repr(value)


def f32_value(value, at: str) -> float:
    """An f32 scalar argument as a Python float; a finite value that f32 cannot hold (``1e40``,
    ``10**400``) is refused rather than becoming inf (infinities and NaN pass as themselves)."""
    try:
        x = float(value)
    except OverflowError:
        raise LaunchError(f"{at}: {_show(value)} does not fit in f32") from None
    if math.isfinite(x):
        try:
            struct.pack("<f", x)
        except OverflowError:
            raise LaunchError(f"{at}: {_show(value)} does not fit in f32") from None
    return x


# --- divisors known at launch -----------------------------------------------------------------
#
# An integer division or remainder whose divisor is computed from tensor dimensions and constants
# only (``h // (H // HKV)`` in attention.tk: its divisor ``H // HKV``) is checked before the launch
# on both backends: a divisor of 0 is refused with the same message, where the interpreter used to
# stop at the op and the GPU divided by zero silently. Divisors that depend on block or loop
# indices or on loaded data are left to a device-side checked mode (docs/reliability.md).

def divisor_checks(kernel) -> list[dict]:
    """``{"expr": <grid-style expression>, "at": "file:line:col", "op": text, "divisor": text}``
    for every integer ``/``, ``//`` and ``%`` of ``kernel`` (tile IR) whose divisor is a launch-time
    value that is not a constant; inner divisions first. JSON: kept in the kernel's metadata."""
    from ..ir.ops import CDiv, FloorDiv, Mod
    checks, seen = [], set()
    for op in kernel.walk():
        if not isinstance(op, (CDiv, FloorDiv, Mod)) or len(op.operands) != 2:
            continue
        divisor = op.operands[1]
        found = _bounds(divisor, {})  # no block index: only dims and constants
        if found is None or found[0][0] != found[0][1]:
            continue  # computed at run time: not a launch check
        expr = _fold(found[0][0])
        key = repr(expr)
        if isinstance(expr, int) or key in seen:
            continue
        seen.add(key)
        empty = _empty_grid(kernel)  # nothing runs: nothing to refuse
        checks.append({"expr": expr if empty is None else ["max", expr, empty], "divides_by": expr,
                       "at": op.span.location() if op.span else kernel.name,
                       "op": _text(op.span, op.NAME), "divisor": _text(getattr(divisor.owner, "span", None),
                                                                     divisor.hint or "its divisor")})
    return checks


def _text(span, default: str) -> str:
    if span is None:
        return default
    return " ".join(span.source.text[span.start:span.end].split()) or default


def evaluate(expr, dims: dict[str, int]) -> int:
    """A grid-style expression (codegen/abi.py) in Python's arithmetic; a zero divisor inside
    evaluates to 0 (that inner division is a check of its own, reported first)."""
    if isinstance(expr, int):
        return expr
    op, *args = expr
    if op == "dim":
        return dims[args[0]]
    a, b = (evaluate(x, dims) for x in args)
    if op == "cdiv":  # as the launcher's generated source computes it (launcher.grid_expr_source)
        return (a + b - 1) // b if b else 0
    if op == "fdiv":
        return a // b if b else 0
    return {"add": a + b, "sub": a - b, "mul": a * b, "min": min(a, b), "max": max(a, b),
            "gt": int(a > b)}[op]


def _dims_of(expr) -> list[str]:
    if isinstance(expr, list):
        if expr[0] == "dim":
            return [expr[1]]
        return [d for x in expr[1:] for d in _dims_of(x)]
    return []


def launch_checks(kernel) -> list[dict]:
    """Every check of a launch's dims: the divisors, then the coordinates (kept in the metadata
    as "launch_checks"; the interpreter makes them from the IR it runs)."""
    return divisor_checks(kernel) + coordinate_checks(kernel)


def launch_error(kernel: str, checks: list[dict], dims: dict[str, int]) -> str | None:
    """The refusal of the first check (a divisor, then a coordinate: launch_checks) that fails
    with these dims, or None."""
    for check in checks:
        if evaluate(check["expr"], dims) != 0:
            continue
        if check.get("kind") == "coordinate":
            return _coordinate_error(kernel, check, dims)
        used = ", ".join(f"{d} = {dims[d]}" for d in dict.fromkeys(_dims_of(check.get("divides_by", check["expr"]))))
        return (f"{kernel}: at {check['at']}, `{check['op']}` divides by `{check['divisor']}`, "
                f"which is 0 at this launch ({used})")
    return None


def _coordinate_error(kernel: str, c: dict, dims: dict[str, int]) -> str:
    value = evaluate(c["value"], dims)
    size = dims.get(c["dim"], c["dim"])
    where = f"along dimension {c['axis']} ({c['dim']} = {size})" if c["dim"] in dims else \
        f"along dimension {c['axis']} ({size})"
    what = "index" if c["lead"] else "tile coordinate"
    if c["side"] == "low":
        return (f"{kernel}: at {c['at']}, {what} {c['axis']} of {c['tensor']} (`{c['text']}`) goes down "
                f"to {value} at this launch; it must be at least 0")
    count = evaluate(c["count"], dims)
    has = (f"{count} {'entry' if count == 1 else 'entries'}" if c["lead"] else
           f"{count} {'tile' if count == 1 else 'tiles'} of {c['extent']} {c.get('unit', '')}".rstrip())
    return (f"{kernel}: at {c['at']}, {what} {c['axis']} of {c['tensor']} (`{c['text']}`) reaches "
            f"{value} at this launch, but {c['tensor']} has {has} {where}")


# --- tile coordinates known at launch ---------------------------------------------------------
#
# A load's or store's tile coordinate computed from block indices, dims and constants only (``g``
# in ``K.tile(b, g, j, 0)``, with ``g = h // (H // HKV)``) takes its extreme values at the corners
# of the block grid when each block index appears in it once and every step is monotone (+, -, *
# by a launch value, // and / by a positive launch value, min, max). Those extremes are launch-time
# expressions, so a coordinate that leaves its tensor (``H % HKV != 0`` makes g reach HKV) is
# refused before the launch on both backends, where the GPU read or wrote out of bounds. Loads and
# stores under an ``if`` are left out (the condition may be what keeps them in range), as are
# coordinates that depend on loop indices or data: those need the device-side checked mode.

def coordinate_checks(kernel) -> list[dict]:
    """``{"expr", "at", "kind": "coordinate", ...}`` for each such coordinate bound: ``expr`` is 1
    when the coordinate stays in range (or the grid is empty), 0 when it leaves. JSON."""
    from ..ir.ops import If, Load, Store
    from ..ir.types import GlobalType, TileType
    blocks, counts = _block_counts(kernel)
    if counts is None:
        return []
    indices = {id(a): (k, c) for k, (a, c) in enumerate(zip(blocks.regions[0].args, counts))}
    empty = _empty_grid(kernel)
    checks: list[dict] = []

    def visit(block, in_loop: bool) -> None:
        for op in block.ops:
            if isinstance(op, If):
                continue
            if isinstance(op, (Load, Store)):
                checks.extend(_op_checks(op, indices, empty, GlobalType, TileType, in_loop))
            for region in op.regions:
                visit(region, True)

    visit(blocks.regions[0], False)
    return checks


def _block_counts(kernel):
    """(the block loop, its counts as launch-time expressions), or (.., None)."""
    from ..ir.ops import Blocks
    blocks = next((op for op in kernel.body.ops if isinstance(op, Blocks)), None)
    if blocks is None or not blocks.regions:
        return blocks, None
    counts = []
    for v in blocks.variadic():
        found = _bounds(v, {})
        if found is None or found[0][0] != found[0][1]:
            return blocks, None
        counts.append(_fold(found[0][0]))
    return blocks, counts


def _empty_grid(kernel):
    """An expression that is 1 when the launch's grid has no block (nothing runs), else 0."""
    _, counts = _block_counts(kernel)
    return None if counts is None else ["gt", 1, _product(counts)]


def _product(counts: list):
    out = counts[0]
    for c in counts[1:]:
        out = ["mul", out, c]
    return out


def _op_checks(op, indices, empty, GlobalType, TileType, in_loop: bool) -> list[dict]:
    """A loop may run no trip: inside one, only coordinates that use a block index are checked
    (those run whenever their block's loop does; a constant one might never run)."""
    from ..ir.ops import Load
    g = op.operands[0]
    if not isinstance(g.type, GlobalType):
        return []
    t = op.results[0].type if isinstance(op, Load) else op.operands[1].type
    shape = (t.rows, t.cols) if isinstance(t, TileType) else (t.length,)
    coords = op.variadic()
    lead = len(coords) - len(shape)
    out = []
    for axis, c in enumerate(coords):
        found = _bounds(c, indices)
        if found is None:
            continue
        (lo, hi), used = found
        if not used and in_loop:
            continue
        lo, hi = _fold(lo), _fold(hi)
        dim = g.type.dims[axis]
        size = dim if isinstance(dim, int) else ["dim", dim]
        extent = 1 if axis < lead else shape[axis - lead]
        count = _fold(size if extent == 1 else ["cdiv", size, extent])
        low = not _nonneg(lo)  # else it cannot go below 0
        high = not (hi == ["sub", count, 1] or isinstance(hi, int) and isinstance(count, int) and hi < count)
        if not (low or high):
            continue  # the block count is the tensor's tile count: in range by construction
        label = dim if isinstance(dim, str) else str(dim)
        units = ("rows", "columns") if len(shape) == 2 else ("elements",)
        common = {"kind": "coordinate", "at": op.span.location() if op.span else "?",
                  "unit": "" if axis < lead else units[axis - lead],
                  "tensor": g.hint or "?", "axis": axis, "extent": extent, "lead": axis < lead,
                  "dim": label, "text": _text(getattr(c.owner, "span", None), c.hint or f"coordinate {axis}")}
        if low:
            out.append({**common, "side": "low", "value": _encode(lo),
                        "expr": ["max", ["gt", ["add", _encode(lo), 1], 0], empty]})
        if high:
            out.append({**common, "side": "high", "value": _encode(hi), "count": _encode(count),
                        "expr": ["max", ["gt", _encode(count), _encode(hi)], empty]})
    return out


def _bounds(v, indices):
    """((lo, hi), block indices used) of a launch-time i32 value, or None (not analyzable, or a
    block index used twice: the corners would not be its extremes)."""
    from ..ir.ops import Add, CDiv, Const, Dim, FloorDiv, Max, Min, Mul, Sub
    from ..ir.types import I32, ScalarType
    if id(v) in indices:
        k, count = indices[id(v)]
        return (0, ["sub", count, 1]), [k]
    op = v.owner
    if op is None or not isinstance(getattr(v, "type", None), ScalarType) or v.type.dtype != I32:
        return None
    if isinstance(op, Const) and isinstance(op.attrs.get("value"), int) and not isinstance(op.attrs["value"], bool):
        return (op.attrs["value"], op.attrs["value"]), []
    if isinstance(op, Dim):
        return (["dim", op.attrs["name"]], ["dim", op.attrs["name"]]), []
    if not isinstance(op, (Add, Sub, Mul, CDiv, FloorDiv, Min, Max)) or len(op.operands) != 2:
        return None
    a, b = (_bounds(x, indices) for x in op.operands)
    if a is None or b is None:
        return None
    (alo, ahi), au = a
    (blo, bhi), bu = b
    used = au + bu
    if len(set(used)) != len(used):
        return None
    if isinstance(op, Add):
        return (["add", alo, blo], ["add", ahi, bhi]), used
    if isinstance(op, Sub):
        return (["sub", alo, bhi], ["sub", ahi, blo]), used
    if isinstance(op, (Min, Max)):
        return ([op.NAME, alo, blo], [op.NAME, ahi, bhi]), used
    if bu or not _nonneg(blo):
        return None  # a factor or divisor that varies, or may be negative
    if isinstance(op, Mul):
        return (["mul", alo, blo], ["mul", ahi, blo]), used
    name = "cdiv" if isinstance(op, CDiv) else "fdiv"
    return ([name, alo, blo], [name, ahi, blo]), used


_FOLD = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
         "cdiv": lambda a, b: -(-a // b), "fdiv": lambda a, b: a // b, "min": min, "max": max}


def _fold(e):
    """Constant subexpressions folded (divisions by zero left alone)."""
    if isinstance(e, int) or e[0] == "dim":
        return e
    a, b = (_fold(x) for x in e[1:])
    if isinstance(a, int) and isinstance(b, int) and not (e[0] in ("cdiv", "fdiv") and b == 0):
        return _FOLD[e[0]](a, b)
    return [e[0], a, b]


def _nonneg(e) -> bool:
    if isinstance(e, int):
        return e >= 0
    if e[0] == "dim":
        return True
    return e[0] in ("add", "mul", "cdiv", "fdiv", "min", "max") and all(_nonneg(x) for x in e[1:])


def _encode(e):
    """The internal form in the launcher's grid language, which has ``sub`` and ``fdiv`` for
    these checks (the C path evaluates them without leaving non-negative numbers)."""
    return e
