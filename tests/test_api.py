"""The user API: tkjit.compile / tkjit.load, the kernel object's .asm, .ir, .explain(), and calling
it (the CPU interpreter for host arrays, the GPU path for CUDA tensors)."""
from __future__ import annotations

import sys
import types
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

import tkjit
from tkjit.compiler import StageNotAvailableError
from tkjit.errors import LaunchError, NotAvailableError, TkError
from tkjit.passes import DEFAULT_PIPELINE

AFTER_EACH_PASS = [f"after:{name}" for name in DEFAULT_PIPELINE.split(",")]
"""The IR stages the default pipeline makes (canonicalize and the Hopper scheduling passes)."""
MADE = ", ".join(["tkir", *AFTER_EACH_PASS, "opt"])

TWICE = """\
kernel @twice(%A: gl<f32>[M, 64], %B: gl<f32>[M, 64]) {
  %M = dim {name = "M"} : i32
  %c16 = const {value = 16} : i32
  %c0 = const {value = 0} : i32
  %one = const {value = 1} : i32
  %yes = lt %c0, %one : bool
  %grid = cdiv %M, %c16 : i32
  blocks %grid {
  ^(%i: i32):
    %v = load %A, %i, %c0 : rt<f32>[16, 64]
    %w = if %yes : rt<f32>[16, 64] {
      %d = add %v, %v : rt<f32>[16, 64]
      yield %d
    } {
      yield %v
    }
    store %B, %w, %i, %c0
  }
}
"""


@pytest.fixture
def kernel():
    return tkjit.compile(TWICE, filename="twice.tkir")


def test_the_kernel_object(kernel):
    assert kernel.name == "twice"
    assert repr(kernel) == "<tkjit kernel twice(A: gl<f32>[M, 64], B: gl<f32>[M, 64])>"
    assert isinstance(kernel.asm, Mapping)
    assert list(kernel.asm) == ["tkir", *AFTER_EACH_PASS, "opt"] and len(kernel.asm) == len(AFTER_EACH_PASS) + 2
    assert AFTER_EACH_PASS[:6] == ["after:canonicalize", "after:stream-cols", "after:mask-branch", "after:scale-fold",
                                  "after:tile-split", "after:layout"]
    assert "tkir" in kernel.asm and "ptx" not in kernel.asm
    assert kernel.asm["tkir"].startswith("kernel @twice(")
    assert tkjit.ir.printer.print_kernel(kernel.async_ir) == kernel.asm["opt"]  # the pipeline ends with the schedule as IR
    assert tkjit.ir.printer.print_kernel(kernel.ir) == kernel.asm["after:mbarrier"]  # the kernel it rewrote
    assert " if " not in kernel.asm["opt"] and " if " in kernel.asm["tkir"]


def test_asm_is_read_only(kernel):
    with pytest.raises(TypeError):
        kernel.asm["ptx"] = "mine"  # type: ignore[index]


def test_explain_shows_the_decisions(kernel):
    text = kernel.explain()
    assert text.startswith(f"kernel 'twice', pipeline '{DEFAULT_PIPELINE}'\ncanonicalize\n")
    assert "  if at twice.tkir:11:5: kept the then region and removed the if\n" in text
    assert kernel.decisions.for_pass("canonicalize")


def test_explain_includes_the_code_generators_decisions(kernel, monkeypatch):
    def emit_ptx(ir, options):
        return "// ptx", {"name": ir.name, "decisions": [{"decision": "warps", "value": 8, "why": "big tiles"}]}

    monkeypatch.setitem(sys.modules, "tkjit.codegen", types.SimpleNamespace(emit_ptx=emit_ptx))
    assert kernel.explain().endswith("codegen\n  @twice: warps: 8\n      because big tiles\n")


def test_explain_without_a_backend_says_so(kernel, monkeypatch):
    monkeypatch.setitem(sys.modules, "tkjit.codegen", types.ModuleType("tkjit.codegen"))
    assert kernel.explain().endswith("\n(the code generator did not run: the PTX backend is not available "
                                     "yet (tkjit.codegen.emit_ptx is missing))\n")


def test_asking_for_a_stage_that_does_not_exist(kernel):
    with pytest.raises(KeyError) as info:
        kernel.asm["llvm"]
    e = info.value
    assert isinstance(e, TkError)
    assert "there is no stage 'llvm'" in e.message
    assert f"the stages made so far: {MADE} (built when asked for: ptx, sass)" in e.notes
    with pytest.raises(StageNotAvailableError, match="the pipeline '.*' has no such pass"):
        kernel.asm["after:unroll"]
    with pytest.raises(StageNotAvailableError, match="the cubin is binary, not text: use kernel.binary"):
        kernel.asm["cubin"]
    assert kernel.asm.get("llvm") is None  # Mapping.get turns the KeyError into the default


def test_asking_for_ptx_without_a_backend(kernel, monkeypatch):
    monkeypatch.setitem(sys.modules, "tkjit.codegen", types.ModuleType("tkjit.codegen"))
    with pytest.raises(StageNotAvailableError) as info:
        kernel.asm["ptx"]
    assert info.value.message.startswith("no 'ptx' for kernel 'twice': the PTX backend is not available yet")
    assert info.value.notes == [f"the stages made so far: {MADE}"]
    with pytest.raises(StageNotAvailableError, match="no cubin for kernel 'twice'"):
        kernel.binary


def test_ptx_is_made_on_first_access(kernel, monkeypatch):
    made = []

    def emit_ptx(ir, options):
        made.append(ir.name)
        return "// ptx of " + ir.name, {"name": ir.name}

    monkeypatch.setitem(sys.modules, "tkjit.codegen", types.SimpleNamespace(emit_ptx=emit_ptx))
    assert kernel.asm["ptx"] == "// ptx of twice" and kernel.asm["ptx"] == "// ptx of twice"
    assert made == ["twice"] and "ptx" in kernel.asm and kernel.metadata == {"name": "twice"}


def test_load(tmp_path):
    path = tmp_path / "twice.tkir"
    path.write_text(TWICE)
    kernel = tkjit.load(path, pipeline="")
    assert kernel.name == "twice" and kernel.options.pipeline == ""
    assert kernel.asm["opt"] == kernel.asm["tkir"]
    with pytest.raises(TkError, match="cannot read kernel file '.*nope.tk': No such file or directory"):
        tkjit.load(tmp_path / "nope.tk")


@pytest.mark.parametrize("kwargs, message", [
    ({"pipeline": "canonicalize,bogus"}, "unknown pass 'bogus'"),
    ({"backend": "cuda"}, "unknown backend 'cuda'"),
    ({"constants": {"BM": 64}}, "constants (BM) apply to kernel source"),
])
def test_bad_arguments_are_tkjit_errors(kwargs, message):
    with pytest.raises(TkError) as info:
        tkjit.compile(TWICE, **kwargs)
    assert message in info.value.message


def test_compile_wants_text():
    with pytest.raises(TkError, match="takes the kernel's text \\(a str\\), got PosixPath; use tkjit.load"):
        tkjit.compile(Path("gemm.tk"))  # type: ignore[arg-type]


def test_kernel_source_needs_the_front_end(monkeypatch):
    monkeypatch.setitem(sys.modules, "tkjit.frontend", types.ModuleType("tkjit.frontend"))
    with pytest.raises(NotAvailableError, match="the kernel-language front end is not available yet"):
        tkjit.compile("kernel k(A: gl<f32>[M, 64]) {}")


# ---------------------------------------------------------------- calling a kernel

def test_numpy_arguments_run_on_the_interpreter(kernel):
    a = np.random.default_rng(0).standard_normal((40, 64)).astype(np.float32)  # a partial last tile
    b = np.full_like(a, np.nan)
    kernel(a, b)
    np.testing.assert_array_equal(b, 2 * a)


def test_cpu_torch_tensors_run_on_the_interpreter(kernel):
    torch = pytest.importorskip("torch")
    a = torch.randn(32, 64)
    b = torch.full_like(a, float("nan"))
    kernel(a, b)
    assert torch.equal(b, 2 * a)


def test_the_interpreter_runs_the_ir_before_target_specific_passes(monkeypatch):
    ran = []
    fake = types.SimpleNamespace(run=lambda ir, args: ran.append((ir, args)))
    monkeypatch.setitem(sys.modules, "tkjit.interpreter", fake)
    kernel = tkjit.compile(TWICE, backend="interpret")
    kernel("a", "b")  # a forced backend does not look at the arguments
    (ir, args), = ran
    assert ir is kernel._result.portable_ir and args == ["a", "b"]


class FakeCudaTensor:
    is_cuda = True
    device = types.SimpleNamespace(type="cuda")


def test_tensors_on_two_devices_are_refused(kernel):
    with pytest.raises(LaunchError, match="kernel 'twice': A on the GPU but B on the CPU"):
        kernel(FakeCudaTensor(), np.zeros((16, 64), np.float32))


def test_cuda_tensors_take_the_gpu_path(kernel, monkeypatch):
    from tkjit.runtime import driver
    if driver.gpu_available():
        pytest.skip("this checks the refusal on a machine without a GPU")
    with pytest.raises(NotAvailableError, match="kernel 'twice': no CUDA GPU is usable here"):
        kernel(FakeCudaTensor(), FakeCudaTensor())


def test_the_gpu_path_builds_a_launcher_from_the_metadata(kernel, monkeypatch):
    """Without a GPU: the driver and the launcher are stand-ins; the order of calls is real."""
    from tkjit.runtime import driver
    calls = []
    meta = {"name": "twice", "params": [{"kind": "gl", "name": "A"}], "grid": [1], "block": [128],
            "smem_bytes": 65536}

    class Module:
        device = 0

        @staticmethod
        def load(cubin, ptx):
            calls.append(("load", cubin, ptx))
            return Module()

        def get_function(self, name):
            calls.append(("function", name))
            return "fn"

    class Launcher:
        def __init__(self, fn, params, grid, block, smem, name, device, on_refusal, serial_launches=False):
            calls.append(("launcher", fn, params, grid, block, smem, name, device))

        def fast(self, *args, stream=None):
            calls.append(("launch", args))

    monkeypatch.setattr(driver, "gpu_available", lambda: True)
    monkeypatch.setattr(driver, "ensure_context", lambda: 0)
    monkeypatch.setattr(driver, "Module", Module)
    monkeypatch.setattr(driver, "set_dynamic_smem", lambda fn, n, dev: calls.append(("smem", fn, n, dev)))
    monkeypatch.setitem(sys.modules, "tkjit.runtime.launcher", types.SimpleNamespace(Launcher=Launcher))
    result = kernel._result
    result.binary, result.metadata, result.asm["ptx"] = b"\x7fELF", meta, "// ptx"
    result.done += ["ptx", "cubin"]
    a, b = FakeCudaTensor(), FakeCudaTensor()
    kernel(a, b)
    kernel(a, b)
    assert calls == [("load", b"\x7fELF", "// ptx"), ("function", "twice"), ("smem", "fn", 65536, 0),
                     ("launcher", "fn", meta["params"], [1], [128], 65536, "twice", 0),
                     ("launch", (a, b)), ("launch", (a, b))]


def test_metadata_is_there_before_the_ptx_is_asked_for(tmp_path, monkeypatch):
    """``kernel.metadata`` makes the PTX where it is not made yet (a fresh compile and a disk
    cache hit alike): the backend's choices are never an empty dict by accident of order."""
    monkeypatch.setenv("TKJIT_CACHE_DIR", str(tmp_path))
    source = (Path(__file__).resolve().parents[1] / "examples" / "gemm.tk").read_text()
    for _ in range(2):  # the second load is a cache hit
        kernel = tkjit.compile(source, filename="gemm.tk")
        meta = kernel.metadata
        assert meta["backend"] == "wgmma" and meta["lowering"] == "general"
        assert [p["name"] for p in meta["params"] if p["kind"] == "global"] == ["A", "B", "C"]


def test_the_protocol_is_the_one_the_general_lowering_walks():
    """``kernel.protocol``: the text (rings, producer and consumer programs) of the protocol read
    back from the async-schedule IR -- the one the compile-time check explored and the general
    lowering walked; None for a kernel another backend takes."""
    from tkjit.passes.async_schedule import protocol_from_ir
    examples = Path(__file__).resolve().parents[1] / "examples"
    gemm = tkjit.load(examples / "gemm.tk", cache=False)
    text = gemm.protocol
    assert text is not None and text == protocol_from_ir(gemm.async_ir).text()
    (checked,) = [d for d in gemm.decisions.for_pass("async-schedule") if "sync protocol checked" in d.decision]
    assert checked.data["protocol"] == text and "read back from the async-schedule IR" in checked.reason
    assert "producer:" in text and "consumer (each of 2):" in text and "tma_load a" in text
    attention = tkjit.load(examples / "attention.tk", cache=False)  # the general lowering too
    assert attention.metadata.get("lowering") == "general"
    assert attention.protocol == protocol_from_ir(attention.async_ir).text() and "ring q" in attention.protocol
    plain = tkjit.load(examples / "gemm.tk", cache=False, pipeline="canonicalize")
    with pytest.warns(RuntimeWarning, match="mma.sync register-tile backend"):
        assert plain.protocol is None


def test_explain_prints_the_protocol_on_request(capsys):
    from tkjit.cli import main
    examples = Path(__file__).resolve().parents[1] / "examples"
    assert main(["explain", str(examples / "gemm.tk"), "--protocol"]) == 0
    out = capsys.readouterr().out
    assert "protocol gemm: 1 producer + 2 consumer warpgroups" in out and "producer:" in out
