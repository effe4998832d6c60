"""Run a kernel written in the language on the CPU interpreter and, through the register-tile
backend's PTX, on the PTX simulator (tests/ptxsim.py), with poisoned outputs. Test-only."""
from __future__ import annotations

import numpy as np
import torch

from ptxsim import Memory, launch

PAD = 64  # poisoned elements each side of an output


def _raw(t: torch.Tensor) -> np.ndarray:
    t = t.contiguous()
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.view(torch.int16).numpy().view(np.uint16)
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return t.view(torch.uint8).numpy()
    return t.numpy()


def _from_raw(a: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    if like.dtype in (torch.bfloat16, torch.float16):
        return torch.from_numpy(a.view(np.int16).copy()).view(like.dtype)
    if like.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return torch.from_numpy(a.view(np.uint8).copy()).view(like.dtype)
    return torch.from_numpy(a.copy())


def lower(src: str, constants: dict | None = None, name: str = "test.tk"):
    from tkjit.frontend import lower_source
    return lower_source(src, name, dict(constants or {}))


def dims_for(kernel, args) -> dict:
    """The named dimensions' sizes, read off the tensor arguments."""
    dims = {}
    for param, arg in zip(kernel.params, args):
        for d, n in zip(getattr(param.type, "dims", ()), getattr(arg, "shape", ())):
            if isinstance(d, str):
                dims[d] = int(n)
    return dims


def simulate(kernel, args: list, outputs: list[int], max_ctas: int = 64,
             inout: tuple[int, ...] = (), ptx_meta: tuple[str, dict] | None = None,
             num_sms: int = 4) -> list[torch.Tensor]:
    """Emit the register-tile PTX of ``kernel`` (or take ``ptx_meta``, the compiler's PTX and
    metadata) and run it on the simulator; returns the outputs (``args[i]`` for i in
    ``outputs``, NaN-poisoned before the launch unless listed in ``inout``, read and written);
    asserts nothing outside them was written. ``num_sms``: the SMs a persistent grid fills."""
    from tkjit.codegen import emit_ptx
    ptx, meta = ptx_meta if ptx_meta is not None else emit_ptx(kernel)
    mem = Memory(1 << 24)
    addrs, outs = [], {}
    for i, v in enumerate(args):
        if not isinstance(v, torch.Tensor):
            addrs.append(v)
        elif i in outputs:
            poison = torch.full((v.numel() + 2 * PAD,), float("nan"), dtype=v.dtype)
            if i in inout:
                poison[PAD:PAD + v.numel()] = v.reshape(-1)
            addr = mem.alloc(_raw(poison))
            addrs.append(addr + PAD * v.element_size())
            outs[i] = (addr, poison, v)
        else:
            addrs.append(mem.alloc(_raw(v)))
    launch(ptx, meta, addrs, dims_for(kernel, args), num_sms=num_sms, mem=mem, max_ctas=max_ctas)
    got = []
    for i in outputs:
        addr, poison, like = outs[i]
        buf = _from_raw(mem.read_back(addr, _raw(poison)), like)
        edges = torch.cat([buf[:PAD], buf[PAD + like.numel():]]).double()
        assert torch.isnan(edges).all(), f"argument {i}: elements outside the output were written"
        got.append(buf[PAD:PAD + like.numel()].reshape(like.shape))
    return got


def assemble(kernel) -> dict:
    """ptxas the register-tile PTX of ``kernel`` for sm_90a; the function's ptxas report."""
    from tkjit.codegen import emit_ptx
    from tkjit.runtime import toolchain
    ptx, meta = emit_ptx(kernel)
    _, report = toolchain.assemble(ptx, name=meta["name"])
    return report[meta["name"]]


def simulate_views(args: list, ptx_meta: tuple[str, dict], dims: dict, max_ctas: int = 64) -> None:
    """Run the PTX of a kernel compiled with the option ``strided`` on tensor views, in place:
    each tensor argument is a view of a contiguous base (``t._base``, or itself); the bases are
    copied into simulator memory whole, each argument's address is its view's first element, its
    strides go to the stride parameters, and every base is copied back afterwards (so that what
    the kernel wrote, and did not, is visible through the caller's tensors)."""
    from tkjit.runtime.strides import effective
    ptx, meta = ptx_meta
    mem = Memory(1 << 24)
    addrs, bases, strides = [], {}, []
    for v in args:
        if not isinstance(v, torch.Tensor):
            addrs.append(v)
            continue
        base = v._base if v._base is not None else v
        assert base.is_contiguous() and base.storage_offset() == 0
        if id(base) not in bases:
            bases[id(base)] = (base, mem.alloc(_raw(base)))
        addrs.append(bases[id(base)][1] + v.storage_offset() * v.element_size())
    for i, axis in [(i, a) for i, p in enumerate(meta["params"]) if p.get("strides") == "param"
                    for a in range(len(p["dims"]) - 1)]:
        strides.append(effective(tuple(args[i].shape), tuple(args[i].stride()))[axis])
    launch(ptx, meta, addrs, dims, mem=mem, max_ctas=max_ctas, strides=strides)
    for base, addr in bases.values():
        base.copy_(_from_raw(mem.read_back(addr, _raw(base)), base).reshape(base.shape))
