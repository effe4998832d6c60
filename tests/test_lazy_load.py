"""A kernel from the disk cache without the front end: the lookup before any stage runs, what a hit
provides at once (binary, PTX, metadata, decisions, repr), the IR made only when asked for, the
misses (constants, options, file name, text, tkjit's sources), and a fresh process that loads
from the cache without importing the front end, the passes, lark, numpy or the toolchain module
(subprocess: finding ptxas for the key is tool_paths.py)."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import tkjit
from tkjit import compiler
from tkjit.cache import DiskCache
from tkjit.ir.printer import print_kernel
from tkjit.runtime import bench_jit
from support import skip_without_cuda_tools

SRC = """\
# O = X + Y, BR rows of 64 f32 per block
kernel add<BR = 16>(X: gl<f32>[N, 64], Y: gl<f32>[N, 64], O: gl<f32>[N, 64]) {
  for i in blocks(N / BR) {
    x: rt<f32>[BR, 64] = X.tile(i, 0)
    y: rt<f32>[BR, 64] = Y.tile(i, 0)
    O.tile(i, 0) = x + y
  }
}
"""


@pytest.fixture(autouse=True)
def _need_ptxas():
    skip_without_cuda_tools()


class Stages:
    """Counts the front end and pass-pipeline runs (the stage table is what advance() calls)."""

    def __init__(self, monkeypatch):
        self.runs: list[str] = []
        for stage in ("tkir", "opt"):
            monkeypatch.setitem(compiler._STAGE_FUNCTIONS, stage, self._counting(stage))

    def _counting(self, stage: str):
        real = compiler._STAGE_FUNCTIONS[stage]

        def run(result):
            self.runs.append(stage)
            real(result)
        return run


@pytest.fixture
def warm():
    """A kernel compiled and assembled once: its entry is in this test's cache."""
    kernel = tkjit.compile(SRC, filename="add.tk")
    kernel.binary  # noqa: B018 - assembles and writes the entry
    assert not kernel._result.from_cache
    return kernel


def test_a_hit_runs_neither_the_front_end_nor_the_passes(warm, monkeypatch):
    stages = Stages(monkeypatch)
    kernel = tkjit.compile(SRC, filename="add.tk")
    assert kernel._result.from_cache
    assert kernel.binary == warm.binary and kernel.asm["ptx"] == warm.asm["ptx"]
    assert kernel.metadata == warm.metadata and kernel.name == "add"
    assert repr(kernel) == repr(warm) == "<tkjit kernel add(X: gl<f32>[N, 64], Y: gl<f32>[N, 64], O: gl<f32>[N, 64])>"
    assert kernel.explain() == warm.explain()
    assert kernel.decisions.to_json() == warm.decisions.to_json()
    assert stages.runs == []


def test_the_ir_of_a_hit_is_made_when_asked_for(warm, monkeypatch):
    stages = Stages(monkeypatch)
    kernel = tkjit.compile(SRC, filename="add.tk")
    explained = kernel.explain()
    assert print_kernel(kernel.async_ir) == warm.asm["opt"]  # the pipeline's last pass: the schedule as IR
    assert print_kernel(kernel.ir) == warm.asm["after:mbarrier"]
    assert stages.runs == ["tkir", "opt"]
    assert list(kernel.asm) == list(warm.asm) and kernel.asm["tkir"] == warm.asm["tkir"]
    assert kernel.explain() == explained  # the passes ran again, but their log is not doubled
    assert kernel._result.portable_ir is not None and stages.runs == ["tkir", "opt"]


def test_an_ir_stage_asked_for_by_name_is_made_too(warm):
    kernel = tkjit.compile(SRC, filename="add.tk")
    assert "tkir" not in kernel._result.asm
    assert kernel.asm["after:canonicalize"] == warm.asm["after:canonicalize"]
    assert "tkir" in kernel.asm and len(kernel.asm) == len(warm.asm)


@pytest.mark.parametrize("change", [
    {"constants": {"BR": 32}}, {"filename": "other.tk"}, {"pipeline": "canonicalize,canonicalize"},
    {"source": SRC.replace("# O = X + Y", "# O = Y + X")}, {"cache": False}, {"debug": True},
])
def test_what_changes_the_output_misses(warm, monkeypatch, change):
    stages = Stages(monkeypatch)
    args = {"filename": "add.tk", **change}
    kernel = tkjit.compile(args.pop("source", SRC), **args)
    assert not kernel._result.from_cache and stages.runs == ["tkir", "opt"]


def test_a_change_of_tkjit_source_misses(warm, monkeypatch):
    import tkjit.cache
    stages = Stages(monkeypatch)
    monkeypatch.setattr(tkjit.cache, "tkjit_source_hash", lambda memo_dir=None: "f" * 64)
    kernel = tkjit.compile(SRC, filename="add.tk")
    assert not kernel._result.from_cache and stages.runs == ["tkir", "opt"]


def test_an_entry_without_what_a_kernel_needs_is_a_miss(warm, monkeypatch):
    key = warm._result.key
    cache = DiskCache.default()
    entry = cache.get(key)
    shutil.rmtree(entry.path)
    cache.put(key, entry.files, {k: v for k, v in entry.metadata.items() if k != "signature"})
    stages = Stages(monkeypatch)
    kernel = tkjit.compile(SRC, filename="add.tk")
    assert not kernel._result.from_cache and stages.runs == ["tkir", "opt"]
    assert kernel.binary == warm.binary


def test_the_interpreter_runs_a_hit(warm):
    kernel = tkjit.compile(SRC, filename="add.tk")
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((40, 64)).astype(np.float32) for _ in range(2))
    out = np.full_like(x, np.nan)
    kernel(x, y, out)
    np.testing.assert_array_equal(out, x + y)
    assert kernel._result.from_cache


def test_a_fresh_process_loads_without_the_heavy_modules(tmp_path):
    path = tmp_path / "add.tk"
    path.write_text(SRC)
    load = bench_jit.measure_fresh_process_load(path, repeats=1)
    assert load["from_cache"] and load["imported_by_load"] == []
    assert 0 < load["load_s"] < load["warming_load_s"]


def test_the_cold_compile_is_timed_by_stage(tmp_path):
    path = tmp_path / "add.tk"
    path.write_text(SRC)
    cold = bench_jit.measure_cold_compile(path, repeats=1)
    stages = ("front_end_s", "passes_s", "codegen_s", "ptxas_s")
    assert all(cold[s] > 0 for s in stages) and cold["cubin_bytes"] > 0
    assert cold["compile_s"] == pytest.approx(sum(cold[s] for s in stages))


def test_importing_tkjit_imports_nothing_heavy():
    import json
    import subprocess
    import sys
    from pathlib import Path
    heavy = ["torch", "lark", "numpy", "cuda.bindings", "tkjit.frontend", "tkjit.passes", "tkjit.codegen",
             "tkjit.ir.parser", "logging", "subprocess"]
    code = f"import sys, json, tkjit; print(json.dumps([m for m in {heavy!r} if m in sys.modules]))"
    root = Path(tkjit.__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_compiling_the_gemm_example_imports_only_what_it_needs():
    """numpy's import is a third of a cold compile; only folding a float constant needs it. The
    modules only a diagnostic needs (difflib's suggestions, the syntax-error messages) and the
    register-tile backend, which the GEMM does not take, are not imported either."""
    import json
    import subprocess
    import sys
    from pathlib import Path
    root = Path(tkjit.__file__).resolve().parent.parent
    unneeded = ["numpy", "difflib", "tkjit.frontend.syntax_errors", "tkjit.codegen.kernel"]
    code = ("import sys, json, tkjit; k = tkjit.compile(open('examples/gemm.tk').read(), cache=False); "
            f"k.asm['ptx']; print(json.dumps([m for m in {unneeded!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == []


def test_lark_is_imported_without_regex_and_regex_still_imports():
    """lark's optional regex backend is skipped (tkjit's grammars do not use it); the process can
    still import regex itself afterwards."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(tkjit.__file__).resolve().parent.parent
    code = ("import sys, tkjit; tkjit.compile(open('examples/softmax.tk').read()); "
            "print('regex' in sys.modules, 'lark' in sys.modules); "
            "import importlib.util; spec = importlib.util.find_spec('regex'); "
            "spec is None or __import__('regex'); print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "ok"]
