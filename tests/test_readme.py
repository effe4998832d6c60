"""The README's first kernel works as written: on the CPU interpreter, and on the GPU with CUDA tensors."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def first_python_block() -> str:
    match = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert match, "the README has no python example"
    return match.group(1)


def test_the_readme_example_runs_as_written():
    exec(compile(first_python_block(), "README.md", "exec"), {})  # asserts against torch itself


@pytest.mark.gpu
def test_the_readme_example_runs_on_the_gpu():
    import torch
    scope: dict = {}
    code = first_python_block().replace("torch.randn(1000, 1024)", "torch.randn(1000, 1024, device='cuda')")
    assert "device='cuda'" in code
    exec(compile(code, "README.md", "exec"), scope)
    assert scope["y"].is_cuda and torch.isfinite(scope["y"]).all()
