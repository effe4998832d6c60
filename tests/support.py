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
