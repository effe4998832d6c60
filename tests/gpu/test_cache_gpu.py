"""A second process finds a compiled kernel in the disk cache and runs it without assembling."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
SOFTMAX = REPO / "examples" / "softmax.tk"

CHILD = r"""
import sys, torch, tkjit
from tkjit.runtime import toolchain

def refuse(*args, **kwargs):
    raise SystemExit("ptxas was invoked: the disk cache missed")

toolchain.assemble = refuse                 # any assembly in this process fails loudly
x = torch.randn(4096, 1024, device="cuda").bfloat16()
y = torch.full_like(x, float("nan"))
k = tkjit.load(sys.argv[1])
k(x, y)
torch.cuda.synchronize()
ref = torch.softmax(x.float(), -1)
err = ((y.float() - ref).norm() / ref.norm()).item()
print(f"relative error {err:.2e}")
sys.exit(0 if err < 1e-2 else 1)
"""


@pytest.mark.gpu
def test_a_second_process_runs_the_cached_kernel_without_ptxas():
    k = tkjit_load(SOFTMAX)
    x = torch.randn(1000, 1024, device="cuda").bfloat16()
    y = torch.full_like(x, float("nan"))
    k(x, y)  # compiles, assembles, fills the disk cache (TKJIT_CACHE_DIR is private to this test)
    torch.cuda.synchronize()
    ref = torch.softmax(x.float(), -1)
    assert ((y.float() - ref).norm() / ref.norm()).item() < 1e-2
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.run([sys.executable, "-c", CHILD, str(SOFTMAX)], capture_output=True, text=True,
                           env=env, timeout=180)
    assert child.returncode == 0, child.stdout + child.stderr
    assert "relative error" in child.stdout


def tkjit_load(path):
    import tkjit
    return tkjit.load(path)
