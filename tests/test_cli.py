"""The `tkjit` command, in-process (``main([...])``) and, for the front door, as a subprocess."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tkjit.cli import main, parse_define
from tkjit.config import reset_config
from tkjit.demo import format_table, run_demo
from tkjit.errors import TkError
from tkjit.passes import DEFAULT_PIPELINE
from support import skip_without_cuda_tools

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "examples").glob("*.tk"))
IR = (REPO / "tests" / "ir" / "roundtrip" / "twice.tkir").read_text()
"""A small kernel in textual IR (also a round-trip test file)."""


@pytest.fixture
def ir_file(tmp_path) -> Path:
    path = tmp_path / "twice.tkir"
    path.write_text(IR)
    return path


def run(capsys, *argv: str, stdin: str | None = None, monkeypatch=None) -> tuple[int, str, str]:
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def no_codegen(monkeypatch):
    monkeypatch.setitem(sys.modules, "tkjit.codegen", types.ModuleType("tkjit.codegen"))


# ---------------------------------------------------------------- compile and opt

def test_compile_emit_tkir_reparses_identically_through_opt(capsys, monkeypatch, ir_file):
    code, tkir, _ = run(capsys, "compile", str(ir_file), "--emit", "tkir")
    assert code == 0 and tkir.startswith("kernel @twice(")
    code, again, _ = run(capsys, "opt", "-", "-p", "", stdin=tkir, monkeypatch=monkeypatch)
    assert code == 0 and again == tkir


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_round_trips_through_opt(capsys, monkeypatch, example):
    code, tkir, err = run(capsys, "compile", str(example), "--emit", "tkir")
    assert code == 0, err
    assert run(capsys, "opt", "-", "-p", "", stdin=tkir, monkeypatch=monkeypatch)[1] == tkir
    code, opt, err = run(capsys, "opt", "-", "-p", DEFAULT_PIPELINE, "--verify-each", stdin=tkir,
                         monkeypatch=monkeypatch)
    assert code == 0, err
    code, emitted, _ = run(capsys, "compile", str(example))
    assert emitted == opt  # --emit opt is the default
    for name in DEFAULT_PIPELINE.split(","):  # the IR after each pass reparses to itself
        code, after, err = run(capsys, "compile", str(example), "--emit", f"after:{name}")
        assert code == 0, err
        assert run(capsys, "opt", "-", "-p", "", stdin=after, monkeypatch=monkeypatch)[1] == after, name


def test_compile_stages_and_output_file(capsys, ir_file, tmp_path):
    code, opt, _ = run(capsys, "compile", str(ir_file))
    assert code == 0 and "mul" not in opt and "%grid = cdiv %M, %c16 : i32" in opt
    last = DEFAULT_PIPELINE.split(",")[-1]
    assert run(capsys, "compile", str(ir_file), "--emit", f"after:{last}")[1] == opt
    portable = run(capsys, "compile", str(ir_file), "--emit", "after:canonicalize")[1]
    assert "mul" not in portable and "attributes" not in portable and "threads = 128" in opt
    out = tmp_path / "out.tkir"
    code, printed, _ = run(capsys, "compile", str(ir_file), "-o", str(out))
    assert code == 0 and printed == "" and out.read_text() == opt
    code, noop, _ = run(capsys, "compile", str(ir_file), "-p", "")
    assert "%tile = mul %c2, %c8 : i32" in noop


def test_compile_with_dumps_writes_every_stage_it_can(capsys, monkeypatch, ir_file, tmp_path):
    no_codegen(monkeypatch)
    monkeypatch.setenv("TKJIT_DUMP", str(tmp_path / "dump"))
    reset_config()
    code, tkir, _ = run(capsys, "compile", str(ir_file), "--emit", "tkir")
    assert code == 0
    out = tmp_path / "dump" / "twice"
    assert (out / "00-tkir.tkir").read_text() == tkir
    assert (out / "01-after-canonicalize.tkir").is_file() and (out / "decisions.txt").is_file()
    assert "ptx    not available: the PTX backend is not available yet" in (out / "stages.txt").read_text()


def test_compile_a_stage_that_does_not_exist(capsys, ir_file):
    code, out, err = run(capsys, "compile", str(ir_file), "--emit", "after:unroll")
    assert code == 1 and out == ""
    assert f"error: kernel 'twice' has no stage 'after:unroll': the pipeline '{DEFAULT_PIPELINE}' has no such pass" in err
    code, _, err = run(capsys, "compile", str(ir_file), "--emit", "llvm")
    assert code == 1 and "there is no stage 'llvm'; the stages are tkir, opt, ptx, cubin, sass" in err


def test_compile_emit_ptx_without_the_backend_says_so(capsys, monkeypatch, ir_file):
    no_codegen(monkeypatch)
    code, out, err = run(capsys, "compile", str(ir_file), "--emit", "ptx")
    assert code == 1 and out == ""
    assert err.startswith("error: cannot emit 'ptx': the PTX backend is not available yet")
    stages = ", ".join(["tkir", *(f"after:{name}" for name in DEFAULT_PIPELINE.split(",")), "opt"])
    assert f"note: the stages made here: {stages}" in err
    assert "Traceback" not in err


def test_compile_emit_ptx_and_cubin_with_a_backend(capsys, monkeypatch, ir_file, tmp_path):
    def emit_ptx(kernel, options):
        return (".version 8.0\n.target sm_90a\n.address_size 64\n"
                f".visible .entry {kernel.name}()\n{{\n  ret;\n}}\n"), {"name": kernel.name}

    monkeypatch.setitem(sys.modules, "tkjit.codegen", types.SimpleNamespace(emit_ptx=emit_ptx))
    code, ptx, _ = run(capsys, "compile", str(ir_file), "--emit", "ptx")
    assert code == 0 and ".visible .entry twice()" in ptx
    skip_without_cuda_tools()
    out = tmp_path / "twice.cubin"
    code, _, err = run(capsys, "compile", str(ir_file), "--emit", "cubin", "-o", str(out), "--no-cache")
    assert code == 0, err
    assert out.read_bytes()[:4] == b"\x7fELF"


def test_the_real_backend_end_to_end(capsys, tmp_path):
    """The GEMM example through the front end, the passes, the code generator and ptxas."""
    from tkjit.compiler import require
    from tkjit.errors import NotAvailableError
    try:
        require("tkjit.codegen", "emit_ptx", "the PTX backend")
    except NotAvailableError as e:
        pytest.skip(e.message)
    skip_without_cuda_tools()
    gemm = REPO / "examples" / "gemm.tk"
    code, ptx, err = run(capsys, "compile", str(gemm), "--emit", "ptx")
    assert code == 0, err
    assert ".entry gemm(" in ptx and ".target sm_90a" in ptx
    out = tmp_path / "gemm.cubin"
    code, _, err = run(capsys, "compile", str(gemm), "--emit", "cubin", "-o", str(out))
    assert code == 0, err
    assert out.read_bytes()[:4] == b"\x7fELF"
    code, text, _ = run(capsys, "explain", str(gemm))
    assert "\ncodegen\n" in text


def test_errors_are_located_and_exit_1(capsys, tmp_path):
    bad = tmp_path / "bad.tkir"
    bad.write_text(IR.replace("%w = add %v, %v", "%w = add %v, %nope"))
    code, out, err = run(capsys, "opt", str(bad), "-p", "canonicalize")
    assert code == 1 and out == ""
    assert err == (f"{bad}:12:18: error: use of undefined value %nope\n"
                   "        %w = add %v, %nope : rt<f32>[16, 64]\n"
                   "                     ^~~~~\n")


def test_a_bad_pipeline_points_into_it(capsys, ir_file):
    code, _, err = run(capsys, "opt", str(ir_file), "-p", "canonicalize{max-iterations=many}")
    assert code == 1
    assert err.startswith("<pipeline>:1:14: error: option 'max-iterations' of pass 'canonicalize' "
                          "expects an integer, got 'many'\n    canonicalize{max-iterations=many}\n")


def test_a_missing_file(capsys):
    code, _, err = run(capsys, "compile", "no/such/kernel.tk")
    assert code == 1 and err == "error: cannot read 'no/such/kernel.tk': No such file or directory\n"


def test_tracebacks_only_with_debug(capsys, monkeypatch):
    monkeypatch.setenv("TKJIT_DEBUG", "1")
    reset_config()
    code, _, err = run(capsys, "compile", "no/such/kernel.tk")
    assert code == 1 and "Traceback" in err and err.endswith("No such file or directory\n")


def test_opt_prints_ir_after_every_pass_and_the_decisions(capsys, ir_file):
    code, out, err = run(capsys, "opt", str(ir_file), "-p", "canonicalize,canonicalize",
                         "--print-ir-after-all", "--explain")
    assert code == 0
    assert err.count("// -----// IR after canonicalize //----- //") == 1
    assert err.count("// -----// IR after canonicalize#2 //----- //") == 1
    assert "canonicalize\n  @twice: folded 1 scalar op into constants\n" in err
    assert out in err  # the last snapshot is the output


def test_defines(capsys):
    assert parse_define("BM=128") == ("BM", 128)
    assert parse_define("eps = 1e-5") == ("eps", 1e-5)
    assert parse_define("causal=true") == ("causal", True)
    for bad, message in (("BM", "expected NAME=VALUE"), ("1x=2", "expected NAME=VALUE"),
                         ("BM=big", "the value must be an integer, a float, true or false")):
        with pytest.raises(TkError, match=message):
            parse_define(bad)
    code, _, err = run(capsys, "compile", "x.tk", "-D", "BM")
    assert code == 1 and "error: -D BM: expected NAME=VALUE, e.g. -D BM=128" in err


@pytest.mark.skipif(not EXAMPLES, reason="no examples")
def test_defines_reach_the_front_end(capsys):
    gemm = REPO / "examples" / "gemm.tk"
    code, out, err = run(capsys, "compile", str(gemm), "--emit", "tkir", "-D", "NO_SUCH_CONSTANT=3")
    assert code == 1 and "NO_SUCH_CONSTANT" in err and "Traceback" not in err


def test_explain(capsys, ir_file):
    code, out, _ = run(capsys, "explain", str(ir_file))
    assert code == 0
    assert out.startswith(f"kernel 'twice', pipeline '{DEFAULT_PIPELINE}'\ncanonicalize\n  @twice: folded 1 scalar op")
    assert "\nsmem-plan\n" in out and "\nreg-budget\n" in out


# ---------------------------------------------------------------- the other commands

def test_passes_lists_the_registry(capsys):
    code, out, _ = run(capsys, "passes")
    assert code == 0 and out.startswith("async-schedule ")  # sorted by name
    assert "max-iterations (int, default 8)" in out and f"the default pipeline: {DEFAULT_PIPELINE}" in out


def test_cache_commands(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TKJIT_CACHE_DIR", str(tmp_path / "cache"))
    reset_config()
    code, out, _ = run(capsys, "cache", "ls")
    assert code == 0 and out == f"0 entries, 0 B in {tmp_path / 'cache'}\n"
    assert run(capsys, "cache", "verify")[1].startswith("0 entries, 0 corrupted")
    assert run(capsys, "cache", "clear")[1].startswith("removed 0 entries")


def test_bench_says_where_the_benchmarks_are(capsys, monkeypatch, tmp_path):
    import tkjit.cli
    monkeypatch.setattr(tkjit.cli, "BENCH_SCRIPT", tmp_path / "benchmarks" / "run.py")
    code, _, err = run(capsys, "bench")
    assert code == 1 and "from a source checkout" in err and "benchmarks/run.py" in err
    assert "not written yet" not in err
    script = tmp_path / "benchmarks" / "run.py"
    script.parent.mkdir()
    script.write_text("import sys; sys.exit(len(sys.argv))\n")
    monkeypatch.setattr(tkjit.cli, "_gpu_here", lambda: True)
    assert run(capsys, "bench", "--quick", "x")[0] == 3


def test_bench_without_a_gpu_is_one_line_and_writes_nothing(tmp_path):
    """As a new user runs it: a subprocess, no GPU; nothing appears in the checkout."""
    def tree():
        return sorted(p for p in REPO.rglob("*") if "__pycache__" not in p.parts and ".git" not in p.parts
                      and ".pytest_cache" not in p.parts)
    before = tree()
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TKJIT_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "tkjit", "bench"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode != 0
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: tkjit bench needs a CUDA GPU")
    assert proc.stdout == ""
    direct = subprocess.run([sys.executable, str(REPO / "benchmarks" / "run.py"), "--quick"], capture_output=True,
                            text=True, timeout=120, cwd=tmp_path, env=env)
    assert direct.returncode != 0 and direct.stderr.count("\n") == 1 and "need a CUDA GPU" in direct.stderr
    assert tree() == before


def test_demo_compiles_every_example(capsys, tmp_path):
    (tmp_path / "twice.tk").write_text(IR)
    (tmp_path / "broken.tk").write_text(IR.replace("%c16 = const", "%c16 = konst"))
    code = run_demo(tmp_path)
    out = capsys.readouterr().out
    assert code == 1  # one example does not compile
    assert "twice.tk:\n  kernel twice(A: gl<f32>[M, 64], B: gl<f32>[M, 64])\n" in out
    assert "unknown op 'konst'" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(("broken.tk ", "twice.tk "))]
    assert [(r[0], " ".join(r[2:])) for r in rows] == [("broken.tk", "- - compile failed"),
                                                       ("twice.tk", "- - no driver")]
    assert run_demo(tmp_path / "empty") == 1
    assert "no examples found" in capsys.readouterr().out


@pytest.mark.skipif(not EXAMPLES, reason="no examples")
def test_demo_on_the_shipped_examples(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] and line.split()[0].endswith(".tk") and " " in line.strip()]
    assert {r[0] for r in rows} == {example.name for example in EXAMPLES}
    assert all(r[-1] == "ok" for r in rows), out  # every example matches PyTorch


def test_format_table():
    assert format_table([("a", "bb"), ("ccc", "d")]) == "a    bb\n---  --\nccc  d"


# ---------------------------------------------------------------- as a real process

def _tkjit(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TKJIT_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "tkjit", *argv], input=stdin, capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=120)


def test_python_dash_m_round_trip(ir_file):
    first = _tkjit("compile", str(ir_file), "--emit", "tkir")
    assert first.returncode == 0, first.stderr
    second = _tkjit("opt", "-", "-p", "", stdin=first.stdout)
    assert second.returncode == 0 and second.stdout == first.stdout


def test_python_dash_m_error_has_no_traceback(tmp_path):
    bad = tmp_path / "bad.tkir"
    bad.write_text("kernel @k(%A: gl<f32>[M, 64]) {\n  %x = cdiv %M, %M : i32\n}\n")
    proc = _tkjit("opt", str(bad), "-p", "canonicalize")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith(f"{bad}:2:13: error: use of undefined value %M\n")
    assert "Traceback" not in proc.stderr


def test_the_console_script_when_installed():
    import shutil
    exe = shutil.which("tkjit")
    if exe is None:
        pytest.skip("tkjit is not installed as a command here (pip install -e .)")
    proc = subprocess.run([exe, "passes"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("async-schedule ")  # sorted by name
