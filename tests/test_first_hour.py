"""The first hour of a new user (issue 19): what the README promises, `tkjit --version`, the
license and typing markers, a regular (non-editable) install that carries the examples, and
`tkjit bench` without a GPU."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tkjit
from tkjit.cli import main

REPO = Path(__file__).resolve().parents[1]
try:
    import tomllib  # Python 3.11+
    PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
except ImportError:
    PYPROJECT = None
needs_toml = pytest.mark.skipif(PYPROJECT is None, reason="reading pyproject.toml needs tomllib (Python 3.11)")
README = (REPO / "README.md").read_text()


@needs_toml
def test_version_flag(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"tkjit {tkjit.__version__}"
    assert tkjit.__version__ == PYPROJECT["project"]["version"]


@needs_toml
def test_license_is_an_spdx_string_with_the_file_beside_it():
    assert PYPROJECT["project"]["license"] == "Apache-2.0"  # not the table form, which setuptools drops in 2027
    assert "LICENSE" in PYPROJECT["project"]["license-files"]
    assert "Apache License" in (REPO / "LICENSE").read_text()[:200]


@needs_toml
def test_typed_marker():
    assert (REPO / "tkjit" / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["tkjit"]


# -- the README ------------------------------------------------------------------------------

def test_readme_gives_the_cpu_torch_command_ci_uses():
    """The exact command, with the torch version .ci/run pins, from PyTorch's CPU index."""
    pinned = re.search(r'"torch==([\d.]+)"', (REPO / ".ci" / "run").read_text()).group(1)
    assert f"pip install torch=={pinned} --index-url https://download.pytorch.org/whl/cpu" in README


def test_readme_says_which_driver_and_how_long_the_tests_take():
    setup = README.split("## Set up", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"driver\b.*\bR?580\b", setup), "which NVIDIA driver the cubins need"
    assert re.search(r"test suite takes about \d+ minutes", setup), "how long the tests take"


# -- a regular install -----------------------------------------------------------------------

def _setuptools_at_least(major: int) -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= major


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel built from a copy of the sources, installed into a folder of its own."""
    if not _setuptools_at_least(77):
        pytest.skip("building needs setuptools >= 77 (the SPDX license string)")
    root = tmp_path_factory.mktemp("pkg")
    src = root / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.egg-info")
    for name in ("tkjit", "examples"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy(REPO / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", str(src), "--no-deps", "--no-build-isolation", "-w", str(root / "dist")],
                   check=True, capture_output=True, timeout=300, cwd=root)
    wheel = next((root / "dist").glob("tkjit-*.whl"))
    subprocess.run([*pip, "install", "--no-deps", "--target", str(root / "site"), str(wheel)],
                   check=True, capture_output=True, timeout=300, cwd=root)
    return wheel, root / "site"


def test_the_wheel_carries_the_examples_the_marker_and_the_license(installed):
    import zipfile
    wheel, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    for example in (REPO / "examples").iterdir():
        if example.suffix in (".tk", ".py"):
            assert f"tkjit/examples/{example.name}" in names
    assert "tkjit/py.typed" in names and "tkjit/frontend/grammar.lark" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata


def test_demo_finds_the_examples_in_a_regular_install(installed, tmp_path):
    _, site = installed
    code = "import tkjit.demo as d; print(d.EXAMPLES_DIR); print(len(d.find_examples()))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "TKJIT_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    where, count = proc.stdout.split()
    assert Path(where) == site / "tkjit" / "examples"
    assert int(count) == len(list((REPO / "examples").glob("*.tk")))


# -- the test suite and the user's cache -------------------------------------------------------

def test_the_suite_never_writes_to_the_users_cache_even_while_collecting(tmp_path):
    """A test module that compiles a kernel at import (during collection), run under this suite's
    conftest with no TKJIT_CACHE_DIR set: nothing may appear in the user's cache directory."""
    home = tmp_path / "home"
    (home / ".cache").mkdir(parents=True)
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "test_probe.py").write_text(
        "import os, pathlib, tkjit\n"
        "tkjit.compile(pathlib.Path(os.environ['SOFTMAX']).read_text())  # at collection\n"
        "def test_nothing():\n"
        "    tkjit.compile(pathlib.Path(os.environ['SOFTMAX']).read_text(), constants={'C': 64})\n")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("TKJIT_")}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), SOFTMAX=str(REPO / "examples" / "softmax.tk"),
               PYTHONPATH=f"{REPO}{__import__('os').pathsep}{REPO / 'tests'}")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                           str(probe / "test_probe.py")], capture_output=True, text=True, timeout=120,
                          cwd=probe, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list((home / ".cache").iterdir()) == []


# -- what a user sees when something is wrong --------------------------------------------------

BAD_NAME = '''
import tkjit
tkjit.compile("""
kernel k(X: gl<f32>[R, 16], Y: gl<f32>[R, 16]) {
  for i in blocks(R / 16) {
    x: rt<f32>[16, 16] = X.tile(i, 0)
    Y.tile(i, 0) = x + q
  }
}""")
'''
BAD_LAUNCH = '''
import numpy as np, tkjit
k = tkjit.compile("""
kernel k(X: gl<f32>[R, 16], Y: gl<f32>[R, 16]) {
  for i in blocks(R / 16) {
    x: rt<f32>[16, 16] = X.tile(i, 0)
    Y.tile(i, 0) = x
  }
}""")
k(np.zeros((16, 8), np.float32), np.zeros((16, 16), np.float32))
'''


@pytest.mark.parametrize("script, message", [(BAD_NAME, "unknown name 'q'"),
                                             (BAD_LAUNCH, "dim 1 is 8 but the kernel requires 16")])
def test_an_error_shows_the_diagnostic_not_tkjits_frames(script, message, tmp_path):
    import os
    env = {**os.environ, "PYTHONPATH": str(REPO), "TKJIT_CACHE_DIR": str(tmp_path)}
    env.pop("TKJIT_DEBUG", None)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    frames = [line for line in proc.stderr.splitlines() if line.lstrip().startswith("File ")]
    assert proc.returncode == 1 and message in proc.stderr
    assert len(frames) <= 2, proc.stderr  # the user's line, and the entry point that cut the rest
    assert proc.stderr.count("error:") == 1
    env["TKJIT_DEBUG"] = "1"  # the whole traceback, for tkjit's developers
    debug = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert len([line for line in debug.stderr.splitlines() if line.lstrip().startswith("File ")]) > 4
