"""A kernel as a PyTorch custom op: ``kernel.torch_op("mylib::gemm", outputs=["C"])``.

The op's schema comes from the kernel's signature: every parameter not named in ``outputs``
is an argument, in declaration order (a ``gl`` is a ``Tensor``, ``f32`` a ``float``, ``i32`` an
``int``, ``bool`` a ``bool``), and the outputs are returned (one tensor, or a tuple in the order
given). The op allocates the outputs itself, on the device of its tensor arguments, with the
``gl`` dtypes and with shapes from the named dimensions its inputs bind (``C: gl<bf16>[M, N]``
takes M from ``A`` and N from ``B``). A dimension no input binds must be given: fixed at
registration (``dims={"N": 64}``) or as an ``int`` argument of the op (``dim_args=["N"]``,
after the kernel's arguments); otherwise registration is refused.

The fake (meta) implementation computes the same shapes from the symbolic sizes of its inputs,
so ``torch.compile(fullgraph=True)`` and ``torch.export`` trace through the op without a graph
break. The real implementation calls the kernel: on CPU tensors the interpreter, on CUDA tensors
the compiled kernel on torch's current stream of the inputs' device (the kernel's default when
no ``stream=`` is given, so CUDA graph capture records it on the capturing stream). An input view
whose last dimension is contiguous goes to the kernel as it is (the kernel reads through its
strides, or copies it itself: runtime/strides.py); one whose last dimension is not (a transpose)
is copied to a contiguous tensor first, so a strided view never gives a wrong answer.

Refused at registration, with the reason: an output that is not a ``gl`` parameter, that the
kernel never stores into, or that it also loads from (fresh outputs start uninitialized); a
parameter the kernel stores into that is not an output (the op would mutate it behind torch's
back); a kernel without a tensor input to place the outputs by.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import LaunchError, TkError

if TYPE_CHECKING:
    from .kernel import CompiledKernel

_TORCH_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "i32": "int32",
                 "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}
"""tkjit dtype name -> the torch dtype's attribute name."""

_SCALAR_SCHEMA = {"f32": "float", "i32": "int", "bool": "bool"}


@dataclass
class _Param:
    """One kernel parameter as the op sees it."""

    name: str
    kind: str                       # "tensor" or "scalar"
    dtype: str                      # tkjit dtype name
    dims: tuple = ()                # a tensor's dims: ints and names


@dataclass
class OpSignature:
    """What registration works out from the kernel: arguments, outputs, and where each output
    dimension comes from (``("arg", i, axis)``: input ``i``'s size on ``axis``; ``("fixed", n)``;
    ``("dim_arg", j)``: the op's j-th trailing int argument)."""

    kernel: str
    params: list[_Param]
    inputs: list[int]               # indices into params, in declaration order
    outputs: list[int]              # indices into params, in the order asked for
    dim_args: list[str]
    sources: dict[str, tuple]       # dim name -> where its size comes from

    def schema(self) -> str:
        args = []
        for i in self.inputs:
            p = self.params[i]
            args.append(f"Tensor {p.name}" if p.kind == "tensor" else f"{_SCALAR_SCHEMA[p.dtype]} {p.name}")
        args += [f"int {name}" for name in self.dim_args]
        outs = [f"Tensor {self.params[i].name}" for i in self.outputs]
        ret = outs[0] if len(outs) == 1 else f"({', '.join(outs)})"
        return f"({', '.join(args)}) -> {ret}"

    def output_shapes(self, args: Sequence[Any]) -> list[list[Any]]:
        """Each output's shape from the op's arguments (works on fake tensors: sizes may be
        symbolic)."""
        self.check_inputs(args)
        n_kernel = len(self.inputs)
        shapes = []
        for i in self.outputs:
            shape = []
            for d in self.params[i].dims:
                if isinstance(d, int):
                    shape.append(d)
                    continue
                src = self.sources[d]
                if src[0] == "arg":
                    shape.append(args[src[1]].shape[src[2]])
                elif src[0] == "fixed":
                    shape.append(src[1])
                else:
                    shape.append(args[n_kernel + src[1]])
            shapes.append(shape)
        return shapes

    def check_inputs(self, args: Sequence[Any]) -> None:
        """Rank and dtype of each tensor argument (the kernel checks the rest at launch; this is
        what the fake implementation can see)."""
        import torch
        for j, i in enumerate(self.inputs):
            p = self.params[i]
            if p.kind != "tensor":
                continue
            a = args[j]
            where = f"{self.kernel}: argument {p.name}"
            if not isinstance(a, torch.Tensor):
                raise LaunchError(f"{where}: expected a tensor, got {type(a).__name__}")
            want = getattr(torch, _TORCH_DTYPES[p.dtype])
            if a.dtype != want:
                raise LaunchError(f"{where}: expected {want} (gl<{p.dtype}>), got {a.dtype}")
            if a.dim() != len(p.dims):
                raise LaunchError(f"{where}: expected rank {len(p.dims)} "
                                  f"[{', '.join(map(str, p.dims))}], got shape {tuple(a.shape)}")

    def device_of(self, args: Sequence[Any]):
        return args[next(j for j, i in enumerate(self.inputs) if self.params[i].kind == "tensor")].device


def op_signature(kernel: "CompiledKernel", outputs: Sequence[str], dims: Mapping[str, int] | None,
                 dim_args: Sequence[str]) -> OpSignature:
    """Work out the op's signature from the kernel's, or refuse with the reason."""
    from .ir.ops import Load, Store
    from .ir.types import GlobalType
    ir = kernel.ir
    where = f"torch_op for kernel '{kernel.name}'"
    params: list[_Param] = []
    for i, p in enumerate(ir.params):
        name = p.hint or f"arg{i}"
        if isinstance(p.type, GlobalType):
            params.append(_Param(name, "tensor", p.type.dtype.name, tuple(p.type.dims)))
        else:
            dt = p.type.dtype.name
            if dt not in _SCALAR_SCHEMA:
                raise TkError(f"{where}: parameter {name} is {dt}, which a torch op cannot take")
            params.append(_Param(name, "scalar", dt))
    by_name = {p.name: i for i, p in enumerate(params)}
    if isinstance(outputs, str):
        outputs = [outputs]
    outputs = list(outputs)
    if not outputs:
        raise TkError(f"{where}: name at least one output (outputs=[...], a gl parameter the kernel writes)")
    stored = {id(op.operands[0]) for op in ir.walk() if isinstance(op, Store)}
    loaded = {id(op.operands[0]) for op in ir.walk() if isinstance(op, Load)}
    ir_param = {p.name: ir.params[i] for i, p in enumerate(params)}
    out_idx = []
    for name in outputs:
        if name not in by_name:
            raise TkError(f"{where}: no parameter named '{name}' (parameters: {', '.join(by_name)})")
        if params[by_name[name]].kind != "tensor":
            raise TkError(f"{where}: output '{name}' is a scalar; outputs are gl parameters")
        if name in [params[i].name for i in out_idx]:
            raise TkError(f"{where}: output '{name}' is named twice")
        if id(ir_param[name]) not in stored:
            raise TkError(f"{where}: the kernel never stores into '{name}', so it is not an output")
        if id(ir_param[name]) in loaded:
            raise TkError(f"{where}: the kernel reads '{name}' as well as writing it; an op's outputs "
                          "start uninitialized, so it cannot be an output")
        out_idx.append(by_name[name])
    inputs = [i for i in range(len(params)) if i not in out_idx]
    for i in inputs:
        if id(ir.params[i]) in stored:
            raise TkError(f"{where}: the kernel stores into '{params[i].name}'; name it in outputs= "
                          "(an op may not change its inputs behind torch's back)")
    if not any(params[i].kind == "tensor" for i in inputs):
        raise TkError(f"{where}: the op needs at least one tensor input (the outputs are allocated "
                      "on its device)")
    sources: dict[str, tuple] = {}
    for j, i in enumerate(inputs):
        for axis, d in enumerate(params[i].dims):
            if isinstance(d, str):
                sources.setdefault(d, ("arg", j, axis))
    dims = dict(dims or {})
    dim_args = [dim_args] if isinstance(dim_args, str) else list(dim_args)
    for name, value in dims.items():
        if name in sources:
            raise TkError(f"{where}: dimension {name} is bound by argument "
                          f"{params[inputs[sources[name][1]]].name}; do not give it in dims=")
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise TkError(f"{where}: dims={{'{name}': {value!r}}}: a size is a non-negative int")
        sources[name] = ("fixed", value)
    for j, name in enumerate(dim_args):
        if name in sources:
            raise TkError(f"{where}: dimension {name} is already given (by an input or dims=); "
                          "do not list it in dim_args=")
        if not name.isidentifier() or name in by_name:
            raise TkError(f"{where}: dim_args: '{name}' cannot name an int argument of the op")
        sources[name] = ("dim_arg", j)
    for i in out_idx:
        for d in params[i].dims:
            if isinstance(d, str) and d not in sources:
                bound = ", ".join(params[k].name for k in inputs if params[k].kind == "tensor")
                raise TkError(f"{where}: output {params[i].name}'s dimension {d} is not bound by any input "
                              f"({bound}); give it: dims={{'{d}': <size>}} fixes it, dim_args=['{d}'] makes "
                              "it an int argument of the op")
    used = {d for i in out_idx for d in params[i].dims if isinstance(d, str)}
    unused = [name for name in [*dims, *dim_args] if name not in used]
    if unused:
        raise TkError(f"{where}: no output has a dimension named {', '.join(unused)}")
    return OpSignature(kernel.name, params, inputs, out_idx, dim_args, sources)


def register(kernel: "CompiledKernel", qualname: str, outputs: Sequence[str], *,
             dims: Mapping[str, int] | None = None, dim_args: Sequence[str] = ()):
    """Register ``kernel`` as the custom op ``qualname`` (``"namespace::name"``); returns the op
    (``torch.library.CustomOpDef``: call it like a function, or as ``torch.ops.namespace.name``)."""
    try:
        import torch
    except ImportError:
        raise TkError("torch_op needs PyTorch (pip install torch)") from None
    ns, sep, opname = qualname.partition("::")
    if not sep or not ns.isidentifier() or not opname.isidentifier():
        raise TkError(f"torch_op: the name is 'namespace::name', e.g. 'mylib::gemm'; got '{qualname}'")
    sig = op_signature(kernel, outputs, dims, dim_args)
    if hasattr(getattr(torch.ops, ns), opname):
        raise TkError(f"torch_op: an op named '{qualname}' is already registered in this process")
    dtypes = [getattr(torch, _TORCH_DTYPES[sig.params[i].dtype]) for i in sig.outputs]

    def allocate(args):
        device = sig.device_of(args)
        return [torch.empty(shape, dtype=dt, device=device) for shape, dt in zip(sig.output_shapes(args), dtypes)]

    def returned(outs):
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run(*args):
        outs = allocate(args)
        full: list[Any] = [None] * len(sig.params)
        for j, i in enumerate(sig.inputs):
            a = args[j]
            full[i] = _readable(a) if isinstance(a, torch.Tensor) else a
        for out, i in zip(outs, sig.outputs):
            full[i] = out
        device = outs[0].device
        if device.type == "cuda" and device.index != torch.cuda.current_device():
            with torch.cuda.device(device):  # the launcher launches on the current device's stream
                kernel(*full)
        else:
            kernel(*full)  # CUDA: torch's current stream; CPU: the interpreter; dim args only size outputs
        return returned(outs)

    def fake(*args):
        return returned(allocate(args))

    op = torch.library.custom_op(qualname, run, mutates_args=(), schema=sig.schema())
    op.register_fake(fake)
    op.tkjit_signature = sig
    return op


def _readable(a):
    """An input as the kernel takes it: a view with a contiguous last dimension as it is, any
    other tensor made contiguous (a copy)."""
    if a.dim() and a.shape[-1] > 1 and a.stride(-1) != 1:
        return a.contiguous()
    return a
