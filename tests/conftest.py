"""Test configuration: GPU tests run only where a CUDA GPU is present, and no test (nor the
collection of the test modules) touches the user's real cache."""
from __future__ import annotations

import os
import shutil
import tempfile

import pytest

# Before any test module is imported: collection compiles kernels too (module-level kernels, the
# GPU probe below), and without this they would write to the user's cache. Each test gets a
# fresh directory of its own on top (_private_cache).
_SESSION_CACHE = tempfile.mkdtemp(prefix="tkjit-test-cache-")
os.environ["TKJIT_CACHE_DIR"] = _SESSION_CACHE


def pytest_unconfigure(config):
    shutil.rmtree(_SESSION_CACHE, ignore_errors=True)


def _gpu_available() -> bool:
    try:
        from tkjit.runtime.driver import gpu_available  # cuda-python, a driver, a device, CUDA torch
        return gpu_available()
    except Exception:  # noqa: BLE001 - no torch, no GPU
        return False


def pytest_collection_modifyitems(config, items):
    if _gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none here)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Never touch the user's real cache: every test gets a fresh TKJIT_CACHE_DIR."""
    monkeypatch.setenv("TKJIT_CACHE_DIR", str(tmp_path_factory.mktemp("tkjit-cache")))
    from tkjit.config import reset_config
    reset_config()
    yield
    reset_config()
