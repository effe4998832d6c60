"""The README's first kernel works as written: on the CPU interpreter, and on the GPU with CUDA tensors."""
from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

_runs = itertools.count()
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


def test_the_torch_model_example_runs_as_written(monkeypatch):
    """The README's "Using a kernel inside a torch model" block (paths relative to the repository)."""
    pytest.importorskip("torch")
    section = README.read_text().split("## Using a kernel inside a torch model", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    fresh = f"readme_{next(_runs)}"  # an op name registers once per process
    monkeypatch.chdir(README.parent)
    scope: dict = {}
    exec(compile(code.replace("mylib::", f"{fresh}::").replace("ops.mylib.", f"ops.{fresh}."), "README.md", "exec"),
         scope)
    targets = {str(n.target) for n in scope["ep"].graph.nodes if n.op == "call_function"}
    assert f"{fresh}.gemm.default" in targets and f"{fresh}.softmax.default" in targets


