"""ptxas / cuobjdump through tkjit.runtime.toolchain: assembly, the parsed report, SASS, failures."""
from __future__ import annotations

import os
import re

import pytest

from tkjit.errors import ToolchainError
from tkjit.runtime import tool_paths, toolchain
from tkjit.runtime.bench_launch import ADD_F32_PTX
from support import cuda_tools_missing

if cuda_tools_missing() is not None:
    pytest.skip(cuda_tools_missing(), allow_module_level=True)

SETMAXNREG_PTX = """\
.version 8.0
.target sm_90a
.address_size 64

.visible .entry ws(
    .param .u64 p_out
)
{directives}
{{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .shared .align 16 .b8 sbuf[1024];
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, 128;
    @%p1 bra PRODUCER;
    setmaxnreg.inc.sync.aligned.u32 232;
    bra.uni DONE;
PRODUCER:
    setmaxnreg.dec.sync.aligned.u32 40;
DONE:
    mov.u32 %r2, sbuf;
    st.shared.u32 [%r2], %r1;
    ret;
}}
"""


def _spilling_ptx(n: int = 64) -> str:
    """n values live at once under .maxnreg 32: ptxas must spill."""
    lines = [".version 8.0", ".target sm_90a", ".address_size 64",
             ".visible .entry spill(.param .u64 p_x)", ".maxnreg 32", "{",
             f"    .reg .f32 %f<{n + 1}>;", "    .reg .b64 %rd<3>;",
             "    ld.param.u64 %rd1, [p_x];", "    cvta.to.global.u64 %rd2, %rd1;"]
    lines += [f"    ld.volatile.global.f32 %f{i}, [%rd2+{4 * i}];" for i in range(n)]
    lines += [f"    mov.f32 %f{n}, 0f00000000;"]
    lines += [f"    fma.rn.f32 %f{n}, %f{n}, %f{n}, %f{i};" for i in range(n)]
    lines += [f"    st.volatile.global.f32 [%rd2+{4 * i}], %f{n - 1 - i};" for i in range(n)]
    return "\n".join(lines + ["    ret;", "}"]) + "\n"


def test_ptxas_version_is_a_version_string():
    assert re.fullmatch(r"\d+\.\d+\.\d+", toolchain.ptxas_version())


def test_assemble_add_kernel_and_read_the_report():
    cubin, report = toolchain.assemble(ADD_F32_PTX, name="add_f32")
    assert cubin[:4] == b"\x7fELF"
    fn = report["add_f32"]
    assert fn.registers > 0
    assert (fn.spill_store_bytes, fn.spill_load_bytes, fn.stack_frame_bytes) == (0, 0, 0)
    assert report.codes == () and report.warnings() == []
    assert "Used" in report.log
    assert toolchain.PtxasReport.from_dict(report.to_dict()) == report


def test_sass_shows_the_instructions():
    cubin, _ = toolchain.assemble(ADD_F32_PTX, name="add_f32")
    text = toolchain.sass(cubin)
    for mnemonic in ("LDG", "STG", "FADD", "EXIT"):
        assert mnemonic in text, mnemonic


def test_syntax_error_reports_the_line_and_a_reproducer():
    bad = ADD_F32_PTX.replace("add.f32 %f3, %f1, %f2;", "add.f32 %f3, %f1 %f2;")
    line = bad.splitlines().index("    add.f32 %f3, %f1 %f2;") + 1
    with pytest.raises(ToolchainError) as info:
        toolchain.assemble(bad, name="bad_add")
    message = str(info.value)
    assert f"PTX line {line}" in message
    assert "add.f32 %f3, %f1 %f2;" in message
    kept = re.search(r"the PTX is kept at (\S+)", message).group(1)
    assert os.path.isfile(kept) and open(kept).read() == bad
    assert f"-arch=sm_90a -O3 -v --warn-on-spills {kept} -o" in message
    assert " -c " not in message


def test_setmaxnreg_without_an_entry_register_count_is_reported_ignored():
    _, report = toolchain.assemble(SETMAXNREG_PTX.format(directives=".reqntid 384, 1, 1"), name="ws")
    assert "C7508" in report.codes and report.setmaxnreg_ignored()
    assert any("setmaxnreg was ignored" in w for w in report.warnings())
    assert report["ws"].shared_bytes == 1024


def test_setmaxnreg_with_maxnreg_is_honoured():
    _, report = toolchain.assemble(SETMAXNREG_PTX.format(directives=".maxnreg 168"), name="ws")
    assert not report.setmaxnreg_ignored()
    assert not any("setmaxnreg" in w for w in report.warnings())
    assert report["ws"].registers == 168


def test_spills_are_reported_as_warnings():
    _, report = toolchain.assemble(_spilling_ptx(), name="spill")
    fn = report["spill"]
    assert fn.spill_store_bytes > 0 and fn.spill_load_bytes > 0 and fn.stack_frame_bytes > 0
    assert any("spills registers" in w for w in report.warnings())


def test_report_parses_coded_messages_and_functions():
    log = """\
ptxas info    : (C7519) warpgroup.arrive is injected in around line 16 by compiler to allow use of registers in GMMA in function 'wg'
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'wg' for 'sm_90a'
ptxas info    : Function properties for wg
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 30 registers, used 1 barriers, 2048 bytes smem
ptxas info    : Compile time = 1.949 ms
"""
    report = toolchain.parse_ptxas_log(log)
    assert report["wg"] == toolchain.FunctionReport("wg", registers=30, barriers=1, stack_frame_bytes=8,
                                                    spill_store_bytes=4, spill_load_bytes=4, shared_bytes=2048)
    assert report.codes == ("C7519",) and report.messages[0].function == "wg"
    assert any("serialized in function 'wg'" in w for w in report.warnings())


def test_missing_tool_says_how_to_install(monkeypatch):
    monkeypatch.setattr(tool_paths, "_wheel_bin_dirs", lambda: [])
    monkeypatch.setattr(tool_paths.shutil, "which", lambda name: None)
    monkeypatch.setattr(tool_paths, "_SYSTEM_BIN_DIR", "/nonexistent")
    with pytest.raises(ToolchainError, match=r"pip install tkjit\[cuda\]"):
        toolchain.find_tool("nvdisasm", env={})


def test_env_override_must_exist():
    with pytest.raises(ToolchainError, match="TKJIT_PTXAS"):
        toolchain.find_tool("ptxas", env={"TKJIT_PTXAS": "/nonexistent/ptxas"})
