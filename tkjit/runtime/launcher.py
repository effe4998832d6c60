"""Launching a compiled kernel: argument checking and packing, prepared once per kernel.

A Launcher is built from the kernel's metadata (architecture.md, "Interfaces between the
pieces"): the parameter list, the grid expressions, the block and the dynamic shared bytes.
At construction it generates and compiles one small Python function (``launcher.source``)
that, per call, checks the arguments with a handful of attribute reads, binds the named
dimensions, evaluates the grid, writes the values into a ctypes parameter block taken from a
pool and calls ``cuLaunchKernel(..., kernelParams=<address of a void*[]>, extra=0)``. That
function is the launcher's ``__call__`` itself (each Launcher gets a one-off subclass), so a
launch is one Python call.

When that fast path sees anything unusual it hands the call to ``slow`` (or the ``on_refusal``
hook of its owner), where ``check_args``, the readable reference checker, raises a LaunchError
naming the argument and what was expected (or normalizes a harmless variant, e.g. an int for an
f32 scalar, and goes back to the fast path). Nothing touches the GPU before the checks pass.

What a call costs (bench_launch, add_f32 with three tensors, H200, 2026-11-21): 5.2 µs against
3.3 µs for a raw cuLaunchKernel through cuda-python (1.55-1.59x; 1.62x before the checks were
grouped by kind, the lock gave way to the pool and the extra Python frame went). The ~1.9 µs of
Python, per operation on that host: torch's current device 90 ns, current stream 40 ns, and per
tensor isinstance 13, dtype 43, get_device 45, is_contiguous 57, shape (unpacked) 101, data_ptr 54
ns, i.e. ~0.94 µs for three tensors; the pack 59 ns, the pool 24 ns; the rest is the function's
own bytecode (merging the checks into one condition measured no faster). Every one of those reads
refuses some bad argument, so 1.3x is out of reach for a pure-Python path with three tensors.
Grid expressions are generated source inlined in that function: compiled source took 81 ns for
one ``cdiv`` against 139 ns for a tree of closures.

The native launch API (``launch_api="native"``, the default where native.py could build
fastlaunch.c) does the same checks, pack and launch in C, reading the same tensor attributes
(nothing is cached per tensor) and calling libcuda's cuLaunchKernel directly; it refuses exactly
what the generated function refuses (tests/test_launcher_native.py runs both on every case). On an
H200 (2026-11-21, bench_launch): 4.0-4.1 µs against 2.75-2.83 µs for the fastest raw call Python
can make (a prepared C call of the same symbol), 1.45x; cuda-python's raw call is 3.34 µs. What
is left is torch: five attribute reads per tensor (~45 ns each in torch's bindings) plus the
current device and stream.

A kernel whose metadata says ``serial_launches`` (the stream-K GEMM: its partial tiles go
through a workspace and flags in module-scope ``.global`` memory, codegen/hopper/tail_split.py) must
never have two launches running at once, on two streams. Its Launcher (one per loaded module and
device) orders them (``LaunchOrder``): each launch on a stream other than the previous launch's
first waits for an event recorded after that launch, so the kernel's launches run one after
another in the order they were made; inside a CUDA graph capture, only the capture's own launches
are ordered (LaunchOrder says why and what orders the rest). Its fast path is the generated
function with those calls around the launch (a capture query and an event record per launch, a
stream wait when the stream changes), also where the native path is the launch API (the
generated function then calls the same cuLaunchKernel from C): on an H200 (2026-11-21) a launch of
the one-tile stream-K GEMM costs the host 10.7 µs on one stream and 12.4 µs alternating between
two, against 5.6 µs through the native path unordered. Kernels without the flag keep the paths
above unchanged, with no added work.

Two more checks run on the fast paths when a kernel has them (issue 20, docs/reliability.md):
an output tensor must not share memory with another tensor argument (each tensor's end address
from its shape, then two comparisons per output/other pair: ``overlap.py``), and the kernel's
launch checks (metadata ``launch_checks``: divisors and tile coordinates known at launch, each an
expression of the named dims that must not be 0) are evaluated inline, or as postfix programs in
C. Their refusals go to ``slow`` like the rest, where ``check_args`` words them as the interpreter
does (``launch_checks.py``). Not measured on a GPU yet: a few comparisons per launch.

Strided views (runtime/strides.py). Tensors whose metadata entry says ``"strides"`` can be
launched as views: ``"map"`` (only TMA maps address them: the maps are encoded with the view's
own strides, ``TensorMapEncoder.strided``) or ``"param"`` (the kernel, compiled with the option
``strided``, takes their strides as ``.s64`` parameters after the named dims). A kernel with
stride parameters takes the generated Python path (fastlaunch.c packs no stride parameters),
which reads each such tensor's ``stride()`` instead of requiring it contiguous. For any other
kernel the native path takes views of ``"map"`` tensors itself (fastlaunch.c reads their strides,
judges them as strides.acceptor does and encodes their maps through ``TensorMapEncoder.strided``:
about the host cost of a contiguous launch, docs/api.md), and a view a fast path refuses goes
through ``slow`` to ``strided_path()``, a second generated function made on first use. A view the kernel cannot take as it is (no
capability, a stride or base TMA cannot take, a tensor with a ``fallback`` map whose rows are not
16-byte units) is a StridedArgument, raised after every other check: the kernel object answers it
with its strided variant or a copy (kernel.py). Contiguous launches are unchanged.

The driver calls are injected (``launch``, ``current_device``, ``current_stream``, ``num_sms``,
and ``cu`` for the ordering's event calls) so the checking and packing can be tested without a
GPU. The caller sets the function's dynamic shared memory limit first
(``driver.set_dynamic_smem``) when ``smem_bytes`` exceeds 48 KB.
"""
from __future__ import annotations

import ctypes
import struct
import threading
from dataclasses import dataclass

from ..errors import LaunchError, NotAvailableError, RowsNotAligned, StridedArgument, TkError
from . import launch_checks as shared
from . import strides
from .launch_checks import evaluate, launch_error
from .overlap import ITEMSIZE, Extent, overlap_error, overlap_pairs
from .tensormap import fast_path_lines, row_multiples, rows_not_aligned, tensor_map_encoders

_TORCH_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "e4m3": "float8_e4m3fn",
                 "e5m2": "float8_e5m2", "i32": "int32"}
_SCALAR_SLOTS = {"f32": "f4x", "i32": "i4x"}
_I32_LIMIT = 2**31
_GRID_LIMITS = (2**31 - 1, 65535, 65535)
_NATIVE_MAX_CHECKS = 16
"""fastlaunch.c's MAX_CHECKS: a kernel with more launch checks takes the generated Python path."""
_NO_EXTRA = {"bindings": "0", "ctypes": "None"}
"""The launch APIs, and how each spells cuLaunchKernel's ``extra=NULL``."""
_GRID_OPS = {"cdiv": 2, "mul": 2, "add": 2, "min": 2, "max": 2, "gt": 2, "dim": 1, "num_sms": 0,
             "sub": 2, "fdiv": 2}
"""Grid expression operators and their operand counts (``gt``: 1 where a > b, else 0, so that a
grid can choose between two sizes by a launch dim: the causal attention grid does)."""


@dataclass(frozen=True)
class Param:
    """One kernel parameter: a global tensor (``dims`` given) or a scalar (``dims`` is None)."""

    name: str
    dtype: str
    dims: tuple[str | int, ...] | None = None
    writes: bool = False
    """A tensor the kernel stores into: no other argument may share its memory (overlap.py)."""
    strides: str | None = None
    """How the kernel takes a strided view of it (runtime/strides.py): ``"param"`` (its strides are
    kernel parameters), ``"map"`` (only its TMA maps address it: they take the view's strides),
    None (row-major only: a view is refused with StridedArgument)."""

    @property
    def is_tensor(self) -> bool:
        return self.dims is not None

    def describe(self) -> str:
        return shared.describe_param(self.dtype, self.dims)


def parse_signature(signature: list[dict]) -> tuple[Param, ...]:
    """Kernel metadata params (``{"kind", "name", "dtype", "dims"}``) → Params; TkError if malformed."""
    params = []
    for i, entry in enumerate(signature):
        kind, name, dtype = entry.get("kind"), entry.get("name", f"arg{i}"), entry.get("dtype")
        if kind in ("global", "gl"):
            if dtype not in _TORCH_DTYPES:
                raise TkError(f"kernel metadata: parameter '{name}' has unsupported tensor dtype {dtype!r}")
            dims = tuple(entry.get("dims", ()))
            for d in dims:
                if not (isinstance(d, int) and d >= 0 or isinstance(d, str) and d.isidentifier()):
                    raise TkError(f"kernel metadata: parameter '{name}' has a bad dimension {d!r}")
            how = entry.get("strides")
            if how not in (None, "map", "param"):
                raise TkError(f"kernel metadata: parameter '{name}' has strides {how!r}; expected 'map' or 'param'")
            params.append(Param(name, dtype, dims, bool(entry.get("writes", False)), how))
        elif kind == "scalar":
            if dtype not in _SCALAR_SLOTS:
                raise TkError(f"kernel metadata: scalar '{name}' has unsupported dtype {dtype!r}")
            params.append(Param(name, dtype))
        elif kind in ("tensormap", "stride"):
            continue  # not an argument: encoded from one at launch (tensormap.py), or its strides
        else:
            raise TkError(f"kernel metadata: parameter '{name}' has kind {kind!r}; the launcher "
                          "handles 'global' and 'scalar' (tensor maps are not supported yet)")
    return tuple(params)


def named_dims(params: tuple[Param, ...]) -> tuple[str, ...]:
    """The runtime dimensions, in order of first appearance (the order the kernel receives them)."""
    seen: dict[str, None] = {}
    for p in params:
        for d in p.dims or ():
            if isinstance(d, str):
                seen.setdefault(d)
    return tuple(seen)


# ---------------------------------------------------------------- grid expressions

def grid_expr_source(expr, names: tuple[str, ...], safe: bool = False) -> str:
    """A grid expression (``["cdiv", ["dim", "M"], 128]``) as Python source over ``d_<name>``, ``num_sms``.
    ``safe`` (a launch check's): a division by zero gives 0, as launch_checks.evaluate does."""
    if isinstance(expr, int) and not isinstance(expr, bool):
        return str(expr)
    if not (isinstance(expr, (list, tuple)) and expr and expr[0] in _GRID_OPS
            and len(expr) == 1 + _GRID_OPS[expr[0]]):
        raise TkError(f"kernel metadata: bad grid expression {expr!r}")
    op, *operands = expr
    if op == "dim":
        if operands[0] not in names:
            raise TkError(f"kernel metadata: grid uses dimension {operands[0]!r}, which no parameter has")
        return f"d_{operands[0]}"
    if op == "num_sms":
        return "num_sms"
    a, b = (grid_expr_source(x, names, safe) for x in operands)
    if safe and op in ("cdiv", "fdiv"):
        top = f"({a}) + ({b}) - 1" if op == "cdiv" else a
        return f"(({top}) // ({b}) if ({b}) else 0)"
    return {"cdiv": f"(({a}) + ({b}) - 1) // ({b})", "mul": f"({a}) * ({b})", "add": f"({a}) + ({b})",
            "min": f"min({a}, {b})", "max": f"max({a}, {b})", "gt": f"int(({a}) > ({b}))",
            "sub": f"({a}) - ({b})", "fdiv": f"({a}) // ({b})"}[op]


def _uses_num_sms(expr) -> bool:
    if not isinstance(expr, (list, tuple)) or not expr:
        return False
    return expr[0] == "num_sms" or any(_uses_num_sms(x) for x in expr[1:])


def compile_grid(grid_exprs: list, names: tuple[str, ...], num_sms: int | None = None):
    """A function of the named dims (keyword arguments) returning the (x, y, z) grid."""
    exprs = [grid_expr_source(e, names) for e in grid_exprs] + ["1"] * (3 - len(grid_exprs))
    args = ", ".join(["*"] + [f"d_{n}" for n in names]) if names else ""
    src = f"def grid({args}):\n    return ({exprs[0]}, {exprs[1]}, {exprs[2]})\n"
    scope = {"num_sms": num_sms}
    exec(compile(src, "<tkjit grid>", "exec"), scope)
    grid = scope["grid"]
    return lambda **dims: grid(**{f"d_{k}": v for k, v in dims.items()})


# ---------------------------------------------------------------- the launcher

class Launcher:
    """Checks, packs and launches one kernel; ``launcher(*args, stream=None)``.

    ``launch_api`` says how ``cuLaunchKernel`` is called: ``"bindings"`` (cuda-python's wrapper,
    the default: it measured faster than ctypes, see bench_launch) or ``"ctypes"`` (libcuda's
    symbol through ctypes). An injected ``launch`` follows the bindings convention: it takes the
    function, ints and the parameter block's address and returns ``(CUresult, ...)``.
    ``on_refusal(args, stream, checked)`` replaces the slow path when the fast path refuses the
    arguments (the kernel object routes CPU tensors to the interpreter there); it must end in
    ``launcher.slow`` for anything it does not handle itself. ``serial_launches`` (the kernel's
    metadata entry) orders the launches across streams through ``order``, a LaunchOrder that
    makes its driver calls through ``cu`` (default: cuda-python's ``cuda.bindings.driver``)."""

    def __init__(self, function, signature: list[dict], grid_exprs: list, block, smem_bytes: int = 0, *,
                 name: str = "kernel", device: int | None = None, num_sms: int | None = None,
                 launch=None, current_device=None, current_stream=None, launch_api: str | None = None,
                 on_refusal=None, encode_map=None, serial_launches: bool = False, cu=None,
                 checks=()):
        import torch
        self.name, self.function, self.device, self.smem_bytes = name, function, device, int(smem_bytes)
        self.params = parse_signature(signature)
        self.dims = named_dims(self.params)
        self.maps = tensor_map_encoders(signature, len(self.params), name, encode_map)
        self.row_multiples = row_multiples(self.maps, self.params)
        """Named dims that must be multiples (TMA-only rows): a launch binding one otherwise is
        refused to ``on_refusal`` (the kernel object's variant with the fallback), see check_args."""
        block3 = tuple(block) if isinstance(block, (list, tuple)) else (int(block),)
        self.block = block3 + (1,) * (3 - len(block3))
        if len(self.block) != 3 or min(self.block) < 1 or self.block[0] * self.block[1] * self.block[2] > 1024:
            raise TkError(f"kernel metadata: bad block {block!r} (at most 1024 threads)")
        if not 1 <= len(grid_exprs) <= 3:
            raise TkError(f"kernel metadata: the grid has {len(grid_exprs)} expressions; expected 1 to 3")
        self.grid_exprs = list(grid_exprs)
        self.launch_api = launch_api or _default_launch_api(launch)
        if self.launch_api not in _LAUNCH_APIS:
            raise TkError(f"unknown launch_api {self.launch_api!r} (expected {' or '.join(_LAUNCH_APIS)})")
        self._torch = torch
        self._torch_dtypes = {k: getattr(torch, v, None) for k, v in _TORCH_DTYPES.items()}
        if self.launch_api == "native":
            self._launch = _native_launch_address(launch)
        else:
            self._launch = launch if launch is not None else _driver().launch_function(self.launch_api)
        self._current_device = current_device or _default_current_device(torch)
        self._current_stream = current_stream or _default_current_stream(torch)
        if num_sms is None and any(_uses_num_sms(e) for e in self.grid_exprs):
            num_sms = _driver().num_sms(device)
        self.num_sms = num_sms
        self.grid = compile_grid(self.grid_exprs, self.dims, num_sms)
        self.checks = [dict(c) for c in checks]
        """Checks of the launch's dims, each an expression that must not be 0: divisors, tile
        coordinates (the kernel's metadata "launch_checks", launch_checks.py)."""
        for c in self.checks:
            grid_expr_source(c["expr"], self.dims)  # validates it as the grid's expressions are
        self.overlaps = overlap_pairs([p.writes if p.is_tensor else None for p in self.params])
        """(output, other) tensor argument pairs whose memory must not overlap (overlap.py)."""
        self.order = LaunchOrder(name, cu) if serial_launches else None
        """The launches' ordering across streams (None: the kernel's launches may run at once)."""
        self.stride_slots = [(i, axis) for i, p in enumerate(self.params) if p.strides == "param"
                             for axis in range(len(p.dims) - 1)]
        """(argument, axis) of each ``.s64`` stride parameter, after the named dims (option strided)."""
        self.takes_views = any(p.strides for p in self.params)
        """Whether some strided view can be launched as it is (else each is a StridedArgument)."""
        if self.stride_slots and any(enc.spec.fallback for enc in self.maps):
            raise TkError(f"kernel metadata: '{name}' has stride parameters and tensor maps with a copying "
                          "fallback; a kernel addresses a tensor one way or the other")
        self._prepare_param_block()
        self._strided_fast = None
        if self.launch_api == "native" and self.order is None and len(self.checks) <= _NATIVE_MAX_CHECKS \
                and not self.stride_slots:  # fastlaunch.c packs no stride parameters
            self.source = None
            self.fast = self._native_fast_path(on_refusal or self.slow)
        else:
            self.source = self._fast_path_source(strided=bool(self.stride_slots))
            scope = self._fast_path_scope(on_refusal or self.slow)
            exec(compile(self.source, f"<tkjit launcher {name}>", "exec"), scope)
            self.fast = scope["fast"]
            if self.stride_slots:
                self.strided_source, self._strided_fast = self.source, self.fast
        """The fast path, ``fast(*args, stream=None)``: the generated function (``source``), or
        with the native launch API the C object that does the same (fastlaunch.c), except for a
        kernel whose launches are ordered (``order``): the generated function, calling the native
        API's cuLaunchKernel from C."""
        self.__class__ = _calling(self.fast)

    def __call__(self, *args, stream=None):
        """Replaced per instance by the generated function itself (see ``_calling``)."""
        return self.fast(*args, stream=stream)

    # -- preparation ------------------------------------------------------------------------

    def _prepare_param_block(self) -> None:
        """One 8-byte slot per kernel parameter (pointers, scalars, then the named dims).

        Parameter blocks come from a pool (a list: ``pop``/``append`` are atomic under the GIL), so
        threads launching the same kernel at once never share a block and no lock is taken: a
        thread that finds the pool empty makes itself a new block (``_new_param_block``)."""
        fmt = ["Q" if p.is_tensor else _SCALAR_SLOTS[p.dtype] for p in self.params] + ["i4x"] * len(self.dims) \
            + ["q"] * len(self.stride_slots)
        self._n_slots = len(fmt)
        self._pack = struct.Struct("<" + "".join(fmt)).pack_into
        self._pool: list = [self._new_param_block()]

    def _new_param_block(self) -> tuple:
        """(slots, address of the void*[] that points at them, that array): kept alive together."""
        n = self._n_slots
        slots = (ctypes.c_uint64 * max(n, 1))()
        base = ctypes.addressof(slots)
        pointers = (ctypes.c_void_p * max(n + len(self.maps), 1))(*[base + 8 * i for i in range(n)])
        address = ctypes.addressof(pointers) if n else 0  # tensor maps follow tensors: n > 0
        if self.launch_api == "ctypes":
            address = ctypes.c_void_p(address)  # passed as is: no per-call conversion
        return slots, address, pointers

    def _fast_path_source(self, strided: bool = False) -> str:
        """Python source of the per-call function: checks, dim binding, grid, pack, launch.

        The checks are grouped by kind (every tensor's type, then every dtype, device, contiguity,
        shape, pointer) so that each group is one ``if``; any failure hands the call to ``slow``.
        With ``order``, the launch is made holding its lock, between ``order.before`` and
        ``order.after`` (a launch that fails records nothing). ``strided``: the tensors that the
        kernel takes as views (``Param.strides``) are read through ``view_strides`` instead of
        being required contiguous; their strides go to the stride parameters and the maps."""
        names = [f"a{i}" for i in range(len(self.params))]
        tensors = [i for i, p in enumerate(self.params) if p.is_tensor]
        views = [i for i in tensors if strided and self.params[i].strides]
        slow = "return slow(args, stream, checked)"
        body = (["try:", f"    {', '.join(names)}, = args", "except ValueError:", f"    {slow}"]
                if names else [f"if args: {slow}"])
        body.append("dev = current_device()")
        body.append(f"if dev != {self.device}: {slow}" if self.device is not None else f"if dev < 0: {slow}")
        for i, p in enumerate(self.params):
            if not p.is_tensor:
                body.append(f"if type(a{i}) is not {'float' if p.dtype == 'f32' else 'int'}: {slow}")
        if tensors:
            body += _all_hold([f"isinstance(a{i}, Tensor)" for i in tensors], slow)
            body += _any_fails([f"a{i}.dtype is not T{i}" for i in tensors], slow)
            body += _all_hold([f"a{i}.get_device() == dev" for i in tensors], slow)
            rowmajor = [i for i in tensors if i not in views]
            body += _all_hold([f"a{i}.is_contiguous()" for i in rowmajor], slow) if rowmajor else []
            body += self._shape_checks(slow)
            body += [f"p{i} = a{i}.data_ptr()" for i in tensors]
            body.append(f"if ({' | '.join(f'p{i}' for i in tensors)}) & 15: {slow}")
            body += [f"st{i} = view_strides{i}(a{i})" for i in views]
            body += _any_fails([f"st{i} is None" for i in views] + self._fallback_rows(), slow) if views else []
            body += self._overlap_lines(slow, views)
        body += _any_fails([f"({grid_expr_source(c['expr'], self.dims, True)}) == 0" for c in self.checks], slow) \
            if self.checks else []
        body += self._grid_lines()
        body += ["if stream is None: stream = current_stream(dev)",
                 "elif type(stream) is not int or stream < 0: stream = stream_handle(stream, dev)"]
        values = [f"p{i}" if p.is_tensor else names[i] for i, p in enumerate(self.params)] + \
                 [f"d_{d}" for d in self.dims] + [f"st{i}[{axis}]" for i, axis in self.stride_slots]
        bx, by, bz = self.block
        handle = "(cstream(stream) if stream else None)" if self.launch_api == "ctypes" else "stream"
        gx, gy, gz = (str(e) if isinstance(e, int) else f"g{axis}" for axis, e in zip("xyz", self._grid3()))
        sizes = f"{gx}, {gy}, {gz}, {bx}, {by}, {bz}, {self.smem_bytes}"
        if self.launch_api == "native":  # only for ordered launches: native.module().launch, a CUresult
            call = f"launch(address, fn, {sizes}, stream, params)"
        else:
            call = f"launch(fn, {sizes}, {handle}, params, {_NO_EXTRA[self.launch_api]})"
        call += "" if self.launch_api in ("ctypes", "native") else "[0]"
        shapes = {i: [d if isinstance(d, int) else f"d_{d}" for d in p.dims]
                  for i, p in enumerate(self.params) if p.is_tensor}
        map_lookups, map_stores, self._map_scope = fast_path_lines(self.maps, shapes, self._n_slots,
                                                                   {i: f"st{i}" for i in views})
        body += map_lookups
        body += ["try:", "    block = take()", "except IndexError:", "    block = new_block()",
                 "slots, params, ptrs = block", *map_stores,
                 "try:", f"    pack(slots, 0{''.join(', ' + v for v in values)})",
                 "except (OverflowError, StructError):", "    give(block)", f"    {slow}",
                 "try:"]
        launch = [f"err = {call}", f"if err: launch_failed(err, {gx}, {gy}, {gz}, stream, params)"]
        if self.order is not None:
            launch = ["with order.lock:", "    key = order.before(stream)", *("    " + line for line in launch),
                      "    order.after(stream, key)"]
        body += [*("    " + line for line in launch), "finally:", "    give(block)"]
        body.insert(0, "if named: return slow(args, stream, checked, named)")  # by name: bound, then again
        return "def fast(*args, stream=None, checked=False, **named):\n" + "".join(f"    {b}\n" for b in body)

    def _overlap_lines(self, slow: str, views=()) -> list[str]:
        """Each tensor's end address, and one check that no output overlaps another tensor (a view's
        end: its span, runtime/strides.span_bytes)."""
        if not self.overlaps:
            return []
        used = sorted({i for pair in self.overlaps for i in pair})
        lines = []
        for i in used:
            sizes = [str(d) if isinstance(d, int) else f"d_{d}" for d in self.params[i].dims]
            es = ITEMSIZE[self.params[i].dtype]
            if i in views:
                lines.append(f"e{i} = p{i} + span(({''.join(s + ', ' for s in sizes)}), st{i}, {es})")
            else:
                lines.append(f"e{i} = p{i} + {' * '.join([str(es)] + sizes)}")
        return lines + _any_fails([f"(p{o} < e{t} and p{t} < e{o})" for o, t in self.overlaps], slow)

    def _fallback_rows(self) -> list[str]:
        """Conditions (source) that some tensor with a ``fallback`` map has rows TMA cannot address:
        the kernel then copies it by pointer, row-major, so no view may be launched as it is."""
        out = []
        for enc in self.maps:
            dims = self.params[enc.spec.param].dims
            if enc.spec.fallback and dims:
                last = dims[-1] if isinstance(dims[-1], int) else f"d_{dims[-1]}"
                out.append(f"({last} * {ITEMSIZE[enc.spec.dtype]}) % 16")
        return out

    def _view_strides(self, i: int):
        """``view_strides(tensor)`` for argument ``i`` of the strided fast path (strides.acceptor)."""
        p = self.params[i]
        return strides.acceptor(ITEMSIZE[p.dtype], p.writes, any(enc.spec.param == i for enc in self.maps))

    def _view_refusal(self, i: int, p: Param, shape: tuple, eff: tuple, raw: tuple, ptr: int) -> str | None:
        """Why this compiled kernel cannot launch argument ``i``, a view, as it is (None: it can)."""
        return strides.refusal(self._where(i), p.strides, shape, eff, raw, ptr, ITEMSIZE[p.dtype],
                               any(enc.spec.param == i for enc in self.maps))

    def _has_view(self, args) -> bool:
        Tensor = self._torch.Tensor
        return any(isinstance(a, Tensor) and not a.is_contiguous() for a in args)

    def strided_path(self):
        """The generated function that launches views as they are (made on first use): the fast
        path itself where the kernel has stride parameters; else, for a kernel whose TMA maps take
        some tensors' strides, a second function whose refusals go to ``_strided_refused``."""
        if self._strided_fast is None:
            source = self._fast_path_source(strided=True)
            scope = self._fast_path_scope(self._strided_refused)
            exec(compile(source, f"<tkjit launcher {self.name}, views>", "exec"), scope)
            self.strided_source, self._strided_fast = source, scope["fast"]
        return self._strided_fast

    def _strided_refused(self, args, stream, checked=False, named=None):
        """What the strided path refuses: check_args names it, or it goes again, checked."""
        if checked:
            raise TkError(f"internal error: the launcher of '{self.name}' refused views that its "
                          f"checker accepted; please report this with the kernel's metadata")
        fixed, _ = self.check_args(args)
        return self.strided_path()(*fixed, stream=stream, checked=True)

    def _native_fast_path(self, slow):
        """The native path's Launch object (fastlaunch.c): the same checks, pack and launch as the
        generated Python function, in C; its refusals go to ``slow`` as well."""
        from . import native
        self._grid3()  # the constant axes' range check
        grid = self.grid
        dims = self.dims
        callbacks = dict(tensor_type=self._torch.Tensor, current_device=self._current_device,
                         current_stream=self._current_stream, stream_handle=self._stream_handle, slow=slow,
                         grid_out_of_range=self._grid_out_of_range, launch_failed=self._launch_failed,
                         grid_exact=lambda *values: grid(**dict(zip(dims, values))),
                         checks_exact=lambda *values: all(evaluate(c["expr"], dict(zip(dims, values)))
                                                          for c in self.checks))
        spec = native.launch_spec(launch=self._launch, function=int(self.function), params=self.params,
                                  dims=self.dims, dtypes=self._torch_dtypes, grid_exprs=self.grid_exprs,
                                  block=self.block, smem=self.smem_bytes, device=self.device,
                                  num_sms=self.num_sms, maps=self.maps, row_multiples=self.row_multiples,
                                  callbacks=callbacks, checks=[c["expr"] for c in self.checks])
        return native.module().Launch(spec)

    def _grid3(self) -> list:
        """The three grid expressions; constants stay ints (checked once, here)."""
        exprs = list(self.grid_exprs) + [1] * (3 - len(self.grid_exprs))
        for limit, e in zip(_GRID_LIMITS, exprs):
            if isinstance(e, int) and not isinstance(e, bool) and not 0 < e <= limit:
                raise TkError(f"kernel metadata: the constant grid size {e} is out of range [1, {limit}]")
        return exprs

    def _grid_lines(self) -> list[str]:
        """``gx = ...`` for every computed axis, and one range check over them."""
        lines, checks = [], []
        for axis, limit, e in zip("xyz", _GRID_LIMITS, self._grid3()):
            if isinstance(e, int):
                continue
            lines.append(f"g{axis} = {grid_expr_source(e, self.dims)}")
            checks.append(f"0 < g{axis} <= {limit}")
        if checks:
            args = ", ".join(str(e) if isinstance(e, int) else f"g{axis}" for axis, e in zip("xyz", self._grid3()))
            lines += _all_hold(checks, f"return grid_out_of_range({args})")
        return lines

    def _shape_checks(self, slow: str) -> list[str]:
        """Unpack every tensor's shape (a wrong rank raises ValueError); bind each named dim at its
        first appearance and compare the later ones, the constants and the 2^31 limit."""
        unpack, conds, bound = [], [], set()
        for i, p in enumerate(self.params):
            if not p.is_tensor:
                continue
            targets = []
            for j, d in enumerate(p.dims):
                if isinstance(d, str) and d not in bound:
                    bound.add(d)
                    targets.append(f"d_{d}")
                    conds.append(f"d_{d} >= {_I32_LIMIT}")
                else:
                    targets.append(f"s{i}_{j}")
                    conds.append(f"s{i}_{j} != {d if isinstance(d, int) else 'd_' + d}")
            unpack.append(f"    {''.join(t + ', ' for t in targets)}= a{i}.shape" if targets else
                          f"    () = a{i}.shape")
        conds += [f"d_{d} % {m}" for d, (m, _) in self.row_multiples.items()]
        lines = ["try:", *unpack, "except ValueError:", f"    {slow}"]
        return lines + (_any_fails(conds, slow) if conds else [])

    def _fast_path_scope(self, slow) -> dict:
        scope = {f"T{i}": self._torch_dtypes[p.dtype] for i, p in enumerate(self.params) if p.is_tensor}
        fn, launch = self.function, self._launch
        if self.launch_api == "ctypes":
            fn = ctypes.c_void_p(int(fn))
        if self.launch_api == "native":
            from . import native
            fn, launch = int(fn), native.module().launch
            scope.update(address=self._launch)
        if self.order is not None:
            scope.update(order=self.order)
        scope.update(Tensor=self._torch.Tensor, current_device=self._current_device, slow=slow,
                     current_stream=self._current_stream, stream_handle=self._stream_handle,
                     grid_out_of_range=self._grid_out_of_range, pack=self._pack, StructError=struct.error,
                     take=self._pool.pop, give=self._pool.append, new_block=self._new_param_block,
                     launch=launch, fn=fn, cstream=ctypes.c_void_p, launch_failed=self._launch_failed,
                     num_sms=self.num_sms, span=strides.span_bytes, **self._map_scope)
        scope.update({f"view_strides{i}": self._view_strides(i) for i, p in enumerate(self.params) if p.strides})
        return scope

    # -- the slow path: diagnosis ---------------------------------------------------------------

    def slow(self, args, stream, checked=False, named=None):
        """Where the fast path sends what it refuses: check_args names the problem (a LaunchError),
        or normalizes the arguments and the fast path runs again. Arguments by name are bound to
        positions first."""
        if named:
            from ..arguments import bind_by_name
            args = bind_by_name(self.name, [p.name for p in self.params], args, named)
            return self.fast(*args, stream=stream)
        if checked:
            raise TkError(f"internal error: the launcher of '{self.name}' refused arguments that its "
                          f"checker accepted; please report this with the kernel's metadata")
        if self.takes_views and not self.stride_slots and self._has_view(args):
            return self.strided_path()(*args, stream=stream)  # views its TMA maps take as they are
        fixed, _ = self.check_args(args)
        return self.fast(*fixed, stream=stream, checked=True)

    def _where(self, i: int) -> str:
        return shared.where(self.name, i, self.params[i].name)

    def check_args(self, args) -> tuple[tuple, dict[str, int]]:
        """Check every argument; return the (normalized) arguments and the bound dims, or raise LaunchError."""
        shared.arity(self.name, [(p.name, p.describe()) for p in self.params], len(args))
        dev = self._current_device()
        if self.device is not None and dev >= 0 and dev != self.device:
            raise LaunchError(f"{self.name}: the kernel was loaded on cuda:{self.device} but the current "
                              f"device is cuda:{dev}; load it on this device")
        bound: dict[str, tuple[int, int, int]] = {}  # name -> (value, argument index, axis)
        fixed, views = [], []  # views: why this kernel cannot launch a view as it is, if it cannot
        for i, (p, a) in enumerate(zip(self.params, args)):
            if p.is_tensor:
                self._check_tensor(i, p, a, dev, bound, views)
                fixed.append(a)
            else:
                fixed.append(self._check_scalar(i, p, a))
        if self.overlaps:
            extents = [Extent(i, p.name, a.data_ptr(),
                              strides.span_bytes(tuple(a.shape), strides.effective(a.shape, a.stride()),
                                                 a.element_size()), p.writes)
                       for i, (p, a) in enumerate(zip(self.params, args)) if p.is_tensor]
            overlap = overlap_error(self.name, extents)
            if overlap is not None:
                raise LaunchError(overlap)
        if self.checks:
            refused = launch_error(self.name, self.checks, {k: v[0] for k, v in bound.items()})
            if refused is not None:
                raise LaunchError(refused)
        for d, (multiple, i) in self.row_multiples.items():
            if bound[d][0] % multiple:
                raise RowsNotAligned(rows_not_aligned(self._where(i), tuple(args[i].shape), self.params[i].dtype))
        if views and not any(isinstance(v, str) for v in views):  # every view can go as it is, unless
            views += [rows_not_aligned(self._where(enc.spec.param), tuple(args[enc.spec.param].shape),
                                       enc.spec.dtype) + " (the kernel then copies it row-major)"
                      for enc in self.maps if enc.spec.fallback
                      and (args[enc.spec.param].shape[-1] * ITEMSIZE[enc.spec.dtype]) % 16]
        refused = [v for v in views if isinstance(v, str)]
        if refused:  # a variant with stride parameters helps only views of row-major-only tensors
            raise StridedArgument(refused[0], copy_only=not any(strides.ROW_MAJOR_ONLY in v for v in refused))
        if dev < 0:
            raise NotAvailableError(f"{self.name}: no CUDA device (PyTorch sees no GPU)")
        return tuple(fixed), {k: v[0] for k, v in bound.items()}

    def _check_tensor(self, i: int, p: Param, a, dev: int, bound: dict, views: list) -> None:
        where, torch = self._where(i), self._torch
        if not isinstance(a, torch.Tensor):
            raise LaunchError(f"{where}: expected a torch.Tensor ({p.describe()}), got {type(a).__name__}")
        if a.dtype is not self._torch_dtypes[p.dtype]:
            shared.dtype(where, p.dtype, self._torch_dtypes[p.dtype], a.dtype)
        if not a.is_cuda:
            raise LaunchError(f"{where}: the tensor is on {a.device}, not on a CUDA device")
        if a.get_device() != dev:
            raise LaunchError(f"{where}: the tensor is on {a.device} but the current device is cuda:{dev}")
        shared.shape(where, i, p.dims, a.shape, bound, self._where)
        if not a.is_contiguous():  # a view: refused here only where no kernel could take it
            shape, raw = tuple(a.shape), tuple(a.stride())
            if shape and shape[-1] > 1 and raw[-1] != 1:
                shared.not_contiguous(where, raw, shape)
            eff = strides.effective(shape, raw)
            strides.check(where, shape, eff, p.writes)
            views.append(self._view_refusal(i, p, shape, eff, raw, a.data_ptr()) or True)
            return
        if a.data_ptr() % 16:
            raise LaunchError(f"{where}: the data pointer {a.data_ptr():#x} is not 16-byte aligned "
                              "(a view with an offset?); pass an aligned tensor or .clone() it")

    def _check_scalar(self, i: int, p: Param, a):
        where = self._where(i)
        return shared.i32_value(a, where) if p.dtype == "i32" else shared.f32_argument(a, where)

    def _stream_handle(self, stream, dev: int) -> int:
        handle = getattr(stream, "cuda_stream", None)  # torch.cuda.Stream, torch.cuda.ExternalStream
        if handle is not None:
            index = getattr(getattr(stream, "device", None), "index", None)
            if index is not None and index != dev:
                raise LaunchError(f"{self.name}: stream= belongs to cuda:{index} but the current device "
                                  f"is cuda:{dev}")
            return int(handle)
        if isinstance(stream, bool) or not hasattr(stream, "__int__"):
            raise LaunchError(f"{self.name}: stream= must be a torch.cuda.Stream or a raw CUstream handle, "
                              f"got {type(stream).__name__}")
        handle = int(stream)
        if handle < 0:
            raise LaunchError(f"{self.name}: stream= handle {handle} is negative")
        return handle

    def _grid_out_of_range(self, gx: int, gy: int, gz: int) -> None:
        if min(gx, gy, gz) == 0:
            return None  # an empty grid (e.g. a zero-sized dimension): nothing to launch
        raise LaunchError(f"{self.name}: the grid ({gx}, {gy}, {gz}) is out of range: x must be in "
                          f"[1, {_GRID_LIMITS[0]}], y and z in [1, {_GRID_LIMITS[1]}]")

    def _launch_failed(self, err, gx: int, gy: int, gz: int, stream: int, params) -> None:
        """Called with the parameter block still taken: retry once with a context, else raise."""
        drv = _driver()
        if drv.error_name(err) == "CUDA_ERROR_INVALID_CONTEXT":  # a thread where torch made none current
            drv.ensure_context()
            if not self._launch_again(gx, gy, gz, stream, params):
                return
        raise drv.driver_error(err, f"cuLaunchKernel of '{self.name}' (grid ({gx}, {gy}, {gz}), "
                                    f"block {self.block}, {self.smem_bytes} bytes dynamic shared memory)")

    def _launch_again(self, gx: int, gy: int, gz: int, stream: int, params):
        """The fast path's launch call, spelled out (the CUresult)."""
        if self.launch_api == "native":
            from . import native
            return native.module().launch(self._launch, int(self.function), gx, gy, gz, *self.block,
                                          self.smem_bytes, stream, params)
        if self.launch_api == "ctypes":
            return self._launch(ctypes.c_void_p(int(self.function)), gx, gy, gz, *self.block, self.smem_bytes,
                                ctypes.c_void_p(stream) if stream else None, params, None)
        return self._launch(self.function, gx, gy, gz, *self.block, self.smem_bytes, stream, params, 0)[0]


# ---------------------------------------------------------------- ordering launches across streams

_NOT_CAPTURING, _CAPTURE_ACTIVE = 0, 1
"""CUstreamCaptureStatus values (CU_STREAM_CAPTURE_STATUS_NONE, _ACTIVE; 2 is _INVALIDATED)."""
_EVENT_DISABLE_TIMING = 2
"""CU_EVENT_DISABLE_TIMING: the events only order (no timestamp to take)."""
_INVALIDATED = object()
"""``before``'s answer for a stream whose capture an error invalidated: the launch fails with the
capture's own error, and nothing is ordered or recorded."""
MAX_CAPTURES = 8
"""Capture sequences a LaunchOrder remembers, each with an event of its own: the most recent ones
(a capture is forgotten once eight others have launched the kernel since it last did; were it
still open, its next launch on another of its streams would not be ordered)."""


class LaunchOrder:
    """Orders the launches of one kernel through one Launcher (one loaded module, one device)
    across streams: the kernel's metadata says ``serial_launches`` when its launches share module
    state (stream-K's workspace and flags, codegen/hopper/tail_split.py), so that two of them running
    at once would compute wrong results.

    The Launcher calls ``before(stream)`` and ``after(stream, key)`` around the launch, holding
    ``lock`` (so that the three are one step for every thread launching the kernel). Outside any
    stream capture, ``after`` records an event (CU_EVENT_DISABLE_TIMING) on the launch's stream
    and remembers the stream; ``before`` makes a launch on another stream wait for that event
    (cuStreamWaitEvent) first, and a launch on the same stream waits for nothing (stream order).
    Each launch thus follows the previous one, which followed the one before it: the launches run
    one at a time, in the order the host made them.

    Inside a capture (cuStreamIsCapturing; the capture's id from cuStreamGetCaptureInfo), CUDA
    forbids a capturing stream to wait for an event recorded outside the capture, and any stream
    outside it to wait for an event recorded inside. So a capture's launches are ordered among
    themselves only, through an event of that capture: a launch on another stream of the same
    capture (a fork of it) waits for the capture's previous launch, which makes a dependency of
    the graph (its replays run those kernels one at a time). A captured launch neither waits for
    launches made outside the capture nor delays them (it runs when the graph is launched, not
    now), and launches outside captures are ordered against each other only. What orders a
    graph's replays against launches outside it, or against other graphs or replays holding the
    kernel, is the stream each is launched on, as for any graph: launch them on one stream, or
    order them with events. (``torch.cuda.graph`` synchronizes the device when a capture begins.)

    ``cu`` is the driver's bindings (``cuda.bindings.driver``; tests inject a fake that records
    the calls); calls return ``(CUresult, values...)``."""

    def __init__(self, name: str, cu=None):
        self.name = name
        self._cu = cu if cu is not None else _driver().cu()
        self.lock = threading.RLock()
        """Held around before, the launch and after (reentrant: a launch function may launch)."""
        self.stream: int | None = None
        """The stream of the last launch outside any capture (None before the first)."""
        self.event = None
        """The event recorded after that launch."""
        self.captures: dict[int, tuple[int, object]] = {}
        """Per capture id: the stream of the capture's last launch and the event recorded after it
        (the most recent capture last; at most MAX_CAPTURES, the oldest's event reused)."""

    def before(self, stream: int):
        """Make ``stream`` wait for the previous launch where it must; the key ``after`` takes
        (None outside any capture, else the capture's id)."""
        status = int(self._call("cuStreamIsCapturing", stream, stream=stream))
        if status == _NOT_CAPTURING:
            if self.stream is not None and stream != self.stream:
                self._call("cuStreamWaitEvent", stream, self.event, 0, stream=stream, previous=self.stream)
            return None
        if status != _CAPTURE_ACTIVE:
            return _INVALIDATED
        status, capture = self._call("cuStreamGetCaptureInfo", stream, stream=stream)[:2]
        if int(status) != _CAPTURE_ACTIVE:  # ended by another thread since: the launch says so
            return _INVALIDATED
        capture = int(capture)
        last = self.captures.get(capture)
        if last is not None and stream != last[0]:
            self._call("cuStreamWaitEvent", stream, last[1], 0, stream=stream, previous=last[0])
        return capture

    def after(self, stream: int, key) -> None:
        """Record the event after the launch just made on ``stream`` (in its capture, if any)."""
        if key is None:
            if self.event is None:
                self.event = self._call("cuEventCreate", _EVENT_DISABLE_TIMING, stream=stream)
            self._call("cuEventRecord", self.event, stream, stream=stream)
            self.stream = stream
            return
        if key is _INVALIDATED:
            return
        last = self.captures.pop(key, None)
        if last is not None:
            event = last[1]
        elif len(self.captures) >= MAX_CAPTURES:  # the oldest capture is forgotten; its event reused
            event = self.captures.pop(next(iter(self.captures)))[1]
        else:
            event = self._call("cuEventCreate", _EVENT_DISABLE_TIMING, stream=stream)
        self._call("cuEventRecord", event, stream, stream=stream)
        self.captures[key] = (stream, event)

    def _call(self, function: str, *args, stream: int, previous: int | None = None):
        """One driver call, checked: its value(s). Retried once after making a context current
        where this thread had none (as a launch is); a DriverError names the call and its reason."""
        drv = _driver()
        result = getattr(self._cu, function)(*args)
        if result[0] and drv.error_name(result[0]) == "CUDA_ERROR_INVALID_CONTEXT":
            drv.ensure_context()
            result = getattr(self._cu, function)(*args)
        after = f" after the previous one on stream {previous}" if previous is not None else ""
        return drv.check(result, f"{function} of '{self.name}' (ordering its launch on stream {stream}"
                                 f"{after}: the launches share the module's state, serial_launches)")


def _any_fails(conditions: list[str], slow: str) -> list[str]:
    return [f"if {' or '.join(conditions)}: {slow}"]


def _all_hold(conditions: list[str], slow: str) -> list[str]:
    return [f"if not ({' and '.join(conditions)}): {slow}"]


def _calling(fast) -> type:
    """A one-off subclass of Launcher whose ``__call__`` is the generated function: ``launcher(*args)``
    then costs one Python call instead of two (about 0.1 µs less per launch, measured)."""
    return type("Launcher", (Launcher,), {"__call__": staticmethod(fast), "__slots__": (),
                                          "__module__": Launcher.__module__, "__doc__": Launcher.__doc__})


def _driver():
    from . import driver
    return driver


_LAUNCH_APIS = (*_NO_EXTRA, "native")


def _default_launch_api(launch) -> str:
    """An injected ``launch`` follows the bindings convention; else the native path where it
    could be built here (native.status() says why not), else the driver module's default."""
    if launch is not None:
        return "bindings"
    from . import native
    return "native" if native.module() is not None else _driver().default_launch_api()


def _native_launch_address(launch) -> int:
    """What the native path calls: libcuda's cuLaunchKernel, or an injected C function (a ctypes
    function pointer, or an address), e.g. a test's recorder or the benchmark's no-op."""
    from . import native
    if native.module() is None:
        raise NotAvailableError(f"launch_api='native' is not available: {native.status()}")
    if launch is None:
        launch = _driver().launch_function("ctypes")
    if isinstance(launch, int):
        return launch
    return ctypes.cast(launch, ctypes.c_void_p).value


_NO_DEVICE = -2
"""What the default current_device() returns when torch has no CUDA: no tensor is on it, so every
launch goes to check_args, which refuses CPU tensors by name, then reports that there is no GPU."""


def _default_current_device(torch):
    get = getattr(torch._C, "_cuda_getDevice", None)
    if get is None or not torch.cuda.is_available():
        return lambda: _NO_DEVICE
    return get


def _default_current_stream(torch):
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw if raw is not None else (lambda dev: torch.cuda.current_stream(dev).cuda_stream)
