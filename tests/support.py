"""Helpers shared by the tests: whether NVIDIA's command-line tools are here, and fake CUDA tensors."""
from __future__ import annotations

import functools

import pytest


@functools.lru_cache(maxsize=None)
def cuda_tools_missing() -> str | None:
    """Why ptxas or cuobjdump cannot be used here, or None when both are found."""
    from tkjit.errors import ToolchainError
    from tkjit.runtime.toolchain import find_tool
    try:
        find_tool("ptxas")
        find_tool("cuobjdump")
    except ToolchainError as e:
        return e.message
    return None


needs_cuda_tools = pytest.mark.skipif(cuda_tools_missing() is not None,
                                      reason="ptxas/cuobjdump not installed (pip install tkjit[cuda])")
"""Mark a test that assembles PTX or reads SASS."""


def skip_without_cuda_tools() -> None:
    """Skip the running test when ptxas/cuobjdump are missing (for use inside a test or fixture)."""
    reason = cuda_tools_missing()
    if reason is not None:
        pytest.skip(reason)


def fake_cuda_tensor_class():
    """A torch.Tensor subclass whose metadata says cuda:<fake_device> (default 0) while its storage
    stays on the CPU: launch checks can be exercised without a GPU."""
    import torch

    class FakeCuda(torch.Tensor):
        @property
        def is_cuda(self):
            return True

        @property
        def device(self):
            return torch.device("cuda", getattr(self, "fake_device", 0))

        def get_device(self):
            return getattr(self, "fake_device", 0)

    return FakeCuda


def placed(m: int, n: int, dtype=None, pad: int = 64, device: str = "cuda"):
    """A NaN-poisoned (m, n) output inside a NaN-poisoned buffer with ``pad`` elements each side:
    (buffer, the view a kernel writes)."""
    import torch
    buf = torch.full((pad + m * n + pad,), float("nan"), dtype=dtype or torch.bfloat16, device=device)
    return buf, buf[pad:pad + m * n].view(m, n)


def check_placed(c, ref, buf, pad: int = 64) -> None:
    """``c`` (from ``placed``) within 1e-2 relative error of ``ref``, wholly written (no NaN left),
    and nothing written into the poisoned pads around it."""
    import torch
    if c.is_cuda:
        torch.cuda.synchronize()
    err = ((c.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    assert err <= 1e-2, f"relative error {err:.3e}"
    assert not torch.isnan(c).any(), "C has unwritten (NaN) elements"
    assert torch.isnan(buf[:pad]).all() and torch.isnan(buf[-pad:]).all(), "wrote outside C"


def bare_consumer(ir):
    """A consumer role of the general lowering for ``ir`` outside any kernel, for running one
    emitter's PTX on the simulator (tests/ptxsim.py): (the LoweredKernel, the ConsumerRole), the
    thread index in ``lk.tid`` and a register ``lk.smem`` left for the caller to set; no globals,
    strides, scalars or check buffer."""
    from tkjit.codegen.hopper.lower import LoweredKernel
    from tkjit.codegen.hopper.lower_consumer import ConsumerRole
    lk = LoweredKernel(ir)
    lk.tid, lk.smem = lk.b.reg(), lk.b.reg()
    lk.b(f"mov.u32 {lk.tid}, %tid.x;")
    lk.globals, lk.check_buffer, lk.strides, lk.scalars = {}, None, None, {}
    return lk, ConsumerRole(lk)


def drop_steps(proto, pick):
    """``proto`` (a sync_protocol.Protocol) without the consumer steps ``pick(step, index in its
    block)`` selects, in every block: a broken protocol for the checker to catch."""
    import dataclasses

    from tkjit.passes import sync_protocol as sp

    def walk(steps):
        out = []
        for i, st in enumerate(steps):
            if pick(st, i):
                continue
            if isinstance(st, sp.BLOCKS):
                fields = {"body": walk(st.body)}
                if getattr(st, "orelse", ()):
                    fields["orelse"] = walk(st.orelse)
                st = dataclasses.replace(st, **fields)
            out.append(st)
        return tuple(out)
    return dataclasses.replace(proto, consumer=walk(proto.consumer))
