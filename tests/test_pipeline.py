"""The compiler's stages: IR and source inputs, after-pass texts, the portable IR, stages that are
not available, the disk cache of the binary stages, dumps, and debug verification."""
from __future__ import annotations

import json
from pathlib import Path
import sys
import types
from dataclasses import dataclass

import pytest

import tkjit
from tkjit import compiler
from tkjit.compiler import StageNotAvailableError, advance, compile, dump_folder_name, is_ir_text, stage_of
from tkjit.config import reset_config
from tkjit.errors import NotAvailableError, PassError, TkError, VerifyError
from tkjit.ir.core import Kernel
from tkjit.ir.parser import parse_kernel
from tkjit.ir.printer import print_kernel
from tkjit.options import CompileOptions
from tkjit.passes import DEFAULT_PIPELINE, Pass, PassContext, register_pass, unregister_pass
from support import skip_without_cuda_tools

IR = "// a kernel in textual IR\n" + (Path(__file__).parent / "ir" / "roundtrip" / "twice.tkir").read_text()


def options(**kw) -> CompileOptions:
    return CompileOptions.resolve(**kw)


@dataclass(frozen=True)
class MarkTarget(Pass):
    """A stand-in for a Hopper pass: marks the kernel (so the IR before it can be told apart)."""

    name = "test-target"
    target_specific = True

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        kernel.attrs["hopper"] = 1
        return kernel


@dataclass(frozen=True)
class Corrupt(Pass):
    name = "test-corrupt"

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        kernel.body.ops.insert(0, kernel.body.ops.pop())  # the block loop before its operands
        return kernel


@pytest.fixture(autouse=True)
def test_passes():
    for cls in (MarkTarget, Corrupt):
        register_pass(cls)
    yield
    for cls in (MarkTarget, Corrupt):
        unregister_pass(cls.name)


# ---------------------------------------------------------------- inputs and IR stages

def test_ir_text_enters_at_tkir_and_runs_the_default_pipeline():
    result = compile(IR, options(), filename="twice.tkir")
    assert list(result.asm) == ["tkir", *(f"after:{name}" for name in DEFAULT_PIPELINE.split(",")), "opt"]
    assert DEFAULT_PIPELINE.startswith("canonicalize,stream-cols,mask-branch,scale-fold,tile-split,layout,")
    assert result.done == ["tkir", "opt"]
    assert result.name == "twice"
    assert result.asm["tkir"] == print_kernel(parse_kernel(IR))
    assert "%grid = cdiv %M, %c16 : i32" in result.asm["opt"]
    last = DEFAULT_PIPELINE.split(",")[-1]
    assert result.asm["opt"] == result.asm[f"after:{last}"] == print_kernel(result.async_ir)
    assert print_kernel(result.ir) == result.asm["after:mbarrier"]  # what the emitter reads: the kernel rewritten
    assert print_kernel(result.portable_ir) == result.asm["after:stream-cols"]
    assert print_kernel(result.tkir) == result.asm["tkir"]  # passes ran on a copy
    assert result.decisions.for_pass("canonicalize")


def test_compile_stops_where_asked_and_advance_goes_on():
    result = compile(IR, options(), until="tkir")
    assert list(result.asm) == ["tkir"] and result.ir is None
    advance(result, "after:canonicalize")
    assert "opt" in result.asm


def test_a_custom_pipeline_and_the_empty_one():
    result = compile(IR, options(pipeline="canonicalize{max-iterations=1},canonicalize"))
    assert list(result.asm) == ["tkir", "after:canonicalize", "after:canonicalize#2", "opt"]
    empty = compile(IR, options(pipeline=""))
    assert list(empty.asm) == ["tkir", "opt"] and empty.asm["opt"] == empty.asm["tkir"]


def test_ir_detection():
    assert is_ir_text("// comment\n\n  kernel @k() {\n}\n")
    assert is_ir_text("anything", "x.tkir")
    assert not is_ir_text("# comment\nkernel k(A: gl<f32>[M]) {\n}\n", "k.tk")
    assert not is_ir_text("")


def test_constants_do_not_apply_to_ir():
    with pytest.raises(TkError, match=r"constants \(BM\) apply to kernel source, but x.tkir is textual IR"):
        compile(IR, options(constants={"BM": 64}), filename="x.tkir")


def test_malformed_ir_is_a_located_diagnostic():
    with pytest.raises(TkError) as info:
        compile(IR.replace("%c0 = const", "%c0 = konst"), options(), filename="bad.tkir")
    assert info.value.render().startswith("bad.tkir:5:9: error: unknown op 'konst'")


def test_unknown_stage():
    with pytest.raises(StageNotAvailableError) as info:
        stage_of("llvm")
    assert isinstance(info.value, KeyError)
    assert "there is no stage 'llvm'; the stages are tkir, opt, ptx, cubin, sass" in info.value.message


# ---------------------------------------------------------------- the front end

def test_source_goes_through_the_front_end_with_its_constants(monkeypatch):
    calls = []

    def lower_source(text, filename, constants):
        calls.append((text, filename, constants))
        return parse_kernel(IR, filename)

    monkeypatch.setitem(sys.modules, "tkjit.frontend", types.SimpleNamespace(lower_source=lower_source))
    result = compile("kernel twice(...) {}", options(constants={"BM": 64}), filename="twice.tk")
    assert calls == [("kernel twice(...) {}", "twice.tk", {"BM": 64})]
    assert result.name == "twice"


def test_the_front_end_output_is_verified(monkeypatch):
    def lower_source(text, filename, constants):
        kernel = parse_kernel(IR, filename)
        kernel.body.ops.reverse()  # uses before definitions
        return kernel

    monkeypatch.setitem(sys.modules, "tkjit.frontend", types.SimpleNamespace(lower_source=lower_source))
    with pytest.raises(VerifyError, match="where it is not defined"):
        compile("kernel twice() {}", options(), filename="twice.tk")


def test_a_missing_front_end_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "tkjit.frontend", types.ModuleType("tkjit.frontend"))
    with pytest.raises(NotAvailableError, match="the kernel-language front end is not available yet"):
        compile("kernel k() {}", options(), filename="k.tk")


def test_require_tells_missing_pieces_from_broken_ones(tmp_path, monkeypatch):
    with pytest.raises(NotAvailableError, match=r"the thing is not available yet \(tkjit.no_such_piece is missing\)"):
        compiler.require("tkjit.no_such_piece", "run", "the thing")
    (tmp_path / "tkjit_test_broken_piece.py").write_text("import tkjit_test_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="tkjit_test_no_such_dependency"):
        compiler.require("tkjit_test_broken_piece", "run", "the piece")


# ---------------------------------------------------------------- target-specific passes

def test_portable_ir_is_the_ir_before_the_first_target_specific_pass():
    result = compile(IR, options(pipeline="canonicalize,test-target"))
    assert "hopper" in result.ir.attrs
    assert print_kernel(result.portable_ir) == result.asm["after:canonicalize"]
    assert "hopper" not in result.portable_ir.attrs
    first = compile(IR, options(pipeline="test-target,canonicalize"))
    assert first.portable_ir is first.tkir
    plain = compile(IR, options(pipeline="canonicalize"))
    assert plain.portable_ir is plain.ir
    default = compile(IR, options())  # the Hopper passes are target-specific: the interpreter skips them
    assert print_kernel(default.portable_ir) == default.asm["after:stream-cols"]
    assert "threads" in default.ir.attrs and "threads" not in default.portable_ir.attrs


# ---------------------------------------------------------------- verification

def test_debug_verifies_after_every_pass_and_names_the_pass(monkeypatch):
    monkeypatch.setenv("TKJIT_DEBUG", "1")
    reset_config()
    with pytest.raises(PassError) as info:
        compile(IR, options(pipeline="canonicalize,test-corrupt,canonicalize"), filename="twice.tkir")
    assert info.value.message.startswith("the IR is invalid after pass 'test-corrupt'")
    assert "^^^" in info.value.render()


def test_without_debug_the_final_ir_is_still_verified():
    with pytest.raises(PassError) as info:
        compile(IR, options(pipeline="canonicalize,test-corrupt"), filename="twice.tkir")
    assert info.value.message.startswith("the IR is invalid after the pipeline 'canonicalize,test-corrupt'")
    assert any("TKJIT_DEBUG=1" in note for note in info.value.notes)


# ---------------------------------------------------------------- backend stages

def no_codegen(monkeypatch):
    monkeypatch.setitem(sys.modules, "tkjit.codegen", types.ModuleType("tkjit.codegen"))


class FakeCodegen:
    """emit_ptx for an empty kernel that ptxas really assembles; counts its calls."""

    def __init__(self):
        self.calls = 0

    def emit_ptx(self, kernel, opts):
        self.calls += 1
        ptx = (".version 8.0\n.target sm_90a\n.address_size 64\n"
               f".visible .entry {kernel.name}()\n{{\n  ret;\n}}\n")
        return ptx, {"name": kernel.name, "params": [], "grid": [1], "block": [128], "smem_bytes": 0,
                     "decisions": [{"decision": "warps", "value": 4, "why": "a test"}]}


@pytest.fixture
def codegen(monkeypatch):
    fake = FakeCodegen()
    monkeypatch.setitem(sys.modules, "tkjit.codegen", types.SimpleNamespace(emit_ptx=fake.emit_ptx))
    return fake


need_ptxas = skip_without_cuda_tools


def test_the_ptx_stage_says_when_the_backend_is_missing(monkeypatch):
    no_codegen(monkeypatch)
    result = compile(IR, options())
    for _ in range(2):  # the second time from the record
        with pytest.raises(NotAvailableError, match=r"the PTX backend is not available yet"):
            advance(result, "ptx")
    assert "ptx" in result.unavailable and "ptx" not in result.asm


def test_ptx_comes_from_the_codegen(codegen):
    result = compile(IR, options(), until="ptx")
    assert result.asm["ptx"].startswith(".version 8.0") and codegen.calls == 1
    assert result.metadata["grid"] == [1] and "decisions" not in result.metadata
    (d,) = result.decisions.for_pass("codegen")
    assert (d.subject, d.decision, d.reason, d.data) == ("@twice", "warps: 4", "a test", {"value": 4})


def test_the_cubin_is_cached_with_its_ptx_and_metadata(codegen):
    need_ptxas()
    first = compile(IR, options(), until="cubin")
    assert first.binary[:4] == b"\x7fELF" and codegen.calls == 1
    assert first.metadata["ptxas"]["functions"][0]["name"] == "twice"
    assert first.metadata["decisions"] == first.decisions.to_json()
    again = compile(IR, options(), until="cubin")
    assert codegen.calls == 1  # a cache hit skips the code generator and ptxas
    assert again.binary == first.binary and again.asm["ptx"] == first.asm["ptx"]
    assert again.metadata == first.metadata
    assert [d.decision for d in again.decisions.for_pass("codegen")] == ["warps: 4"]  # from the cache
    assert again.decisions.to_json() == first.decisions.to_json()
    compile(IR, options(cache=False), until="cubin")
    assert codegen.calls == 2
    compile(IR, options(pipeline="canonicalize,canonicalize"), until="cubin")
    assert codegen.calls == 3  # the pipeline is part of the key
    entries = tkjit.cache.DiskCache.default().entries()
    assert len(entries) == 2 and {e.name for e in entries} == {"twice"}


def test_no_cache_from_the_environment(codegen, monkeypatch):
    need_ptxas()
    monkeypatch.setenv("TKJIT_NO_CACHE", "1")
    reset_config()
    compile(IR, options(), until="cubin")
    compile(IR, options(), until="cubin")
    assert codegen.calls == 2
    assert tkjit.cache.DiskCache.default().entries() == []


# ---------------------------------------------------------------- dumps

def test_dumps_every_stage_and_the_decisions(codegen, tmp_path, monkeypatch):
    need_ptxas()
    monkeypatch.setenv("TKJIT_DUMP", str(tmp_path))
    reset_config()
    kernel = tkjit.compile(IR, filename="twice.tkir")
    out = tmp_path / "twice"
    names = sorted(p.name for p in out.iterdir())
    passes = DEFAULT_PIPELINE.split(",")
    n = len(passes)
    ir_files = [f"{i + 1:02d}-after-{name}.tkir" for i, name in enumerate(passes)]
    assert names == sorted(["00-tkir.tkir", *ir_files, f"{n + 1:02d}-ptx.ptx", f"{n + 2:02d}-cubin.cubin",
                            f"{n + 3:02d}-sass.sass", "decisions.json", "decisions.txt", "metadata.json",
                            "options.json", "stages.txt"])
    assert (out / "00-tkir.tkir").read_text() == kernel.asm["tkir"]
    for file, name in zip(ir_files, passes):
        assert (out / file).read_text() == kernel.asm[f"after:{name}"]
    assert (out / ir_files[-1]).read_text() == kernel.asm["opt"]
    assert (out / f"{n + 1:02d}-ptx.ptx").read_text() == kernel.asm["ptx"]
    assert (out / f"{n + 2:02d}-cubin.cubin").read_bytes() == kernel.binary
    assert "Function : twice" in (out / f"{n + 3:02d}-sass.sass").read_text()
    assert (out / "decisions.txt").read_text() == kernel.decisions.render()
    assert json.loads((out / "decisions.json").read_text()) == kernel.decisions.to_json()
    assert json.loads((out / "metadata.json").read_text())["name"] == "twice"
    assert (out / "stages.txt").read_text().splitlines()[-1] == "sass   made"


def test_dumps_without_a_backend_say_why_and_drop_stale_stages(tmp_path, monkeypatch):
    no_codegen(monkeypatch)
    monkeypatch.setenv("TKJIT_DUMP", str(tmp_path))
    reset_config()
    out = tmp_path / dump_folder_name("twice", options(pipeline=""))
    out.mkdir()
    (out / "03-ptx.ptx").write_text("a previous run's")
    tkjit.compile(IR, pipeline="")
    assert sorted(p.name for p in out.iterdir()) == ["00-tkir.tkir", "decisions.json", "decisions.txt",
                                                     "options.json", "stages.txt"]
    stages = (out / "stages.txt").read_text()
    assert "ptx    not available: the PTX backend is not available yet" in stages
    assert "tkir   made" in stages


def test_each_specialization_dumps_into_its_own_folder(tmp_path, monkeypatch):
    """Constants and options (a pipeline) get folders of their own; the defaults keep <kernel>/."""
    no_codegen(monkeypatch)
    monkeypatch.setenv("TKJIT_DUMP", str(tmp_path))
    reset_config()
    tkjit.compile(IR, pipeline="canonicalize,canonicalize")
    tkjit.compile(IR, pipeline="")
    tkjit.compile(IR)
    kernel = ("kernel k<C = 16>(X: gl<f32>[R, C], Y: gl<f32>[R, C]) {\n  for i in blocks(R / 16) {\n"
              "    x: rt<f32>[16, C] = X.tile(i, 0)\n    Y.tile(i, 0) = x\n  }\n}")
    tkjit.compile(kernel, constants={"C": 32})
    tkjit.compile(kernel)
    folders = sorted(p.name for p in tmp_path.iterdir())
    assert len(folders) == 5 and "twice" in folders and "k" in folders and "k@C=32" in folders
    pipelines = [f for f in folders if f.startswith("twice@pipeline-")]
    assert len(pipelines) == 2
    assert {json.loads((tmp_path / f / "options.json").read_text())["pipeline"] for f in pipelines} == \
        {"canonicalize,canonicalize", ""}
    assert json.loads((tmp_path / "k@C=32" / "options.json").read_text())["constants"] == [["C", 32]]
    assert (tmp_path / "twice" / "01-after-canonicalize.tkir").is_file()


# ---------------------------------------------------------------- options

def test_options_come_from_arguments_then_the_environment(monkeypatch):
    monkeypatch.setenv("TKJIT_DEBUG", "1")
    monkeypatch.setenv("TKJIT_BACKEND", "interpret")
    reset_config()
    assert options().debug and options().backend == "interpret"
    assert not options(debug=False).debug and options(backend="gpu").backend == "gpu"
    monkeypatch.setenv("TKJIT_BACKEND", "cuda")
    reset_config()
    with pytest.raises(TkError, match="unknown backend 'cuda' \\(expected gpu or interpret\\)"):
        options()


def test_option_keys_hold_what_changes_output():
    a = options(constants={"BN": 128, "BM": 64}, pipeline=" canonicalize ")
    assert a.constants == (("BM", 64), ("BN", 128))
    assert a.key() == {"constants": [["BM", 64], ["BN", 128]], "pipeline": "canonicalize"}
    assert options().key()["pipeline"] is None  # the default pipeline: tkjit source, hashed into the key
    assert options(debug=True).key() == options().key()


@pytest.mark.parametrize("constants, message", [
    ({"B M": 1}, "constant name 'B M' is not a valid name"),
    ({"BM": "64"}, "constant 'BM' must be an int, float or bool, got str '64'"),
    ([("BM", 64)], "constants must be a dict of name to value, got list"),
])
def test_bad_constants(constants, message):
    with pytest.raises(TkError, match=message.replace("(", r"\(").replace(")", r"\)")):
        options(constants=constants)


def test_numpy_constants_become_python_numbers():
    import numpy as np
    opts = options(constants={"A": np.int64(3), "B": np.float32(0.5), "C": np.bool_(True)})
    assert opts.constants == (("A", 3), ("B", 0.5), ("C", True))
    assert [type(v) for _, v in opts.constants] == [int, float, bool]
