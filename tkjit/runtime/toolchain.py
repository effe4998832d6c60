"""ptxas, cuobjdump and nvdisasm: running them, and reading ptxas's report.

Cubins are built by the ``ptxas`` command line in whole-program mode
(``ptxas -arch=sm_90a -O3 -v --warn-on-spills k.ptx -o k.cubin``). Never ``-c`` and never
nvJitLink: both compile relocatable code, and ptxas then drops ``setmaxnreg`` (info C7504).

Finding them is ``tool_paths.py`` (``find_tool``, re-exported here).
"""
from __future__ import annotations

import functools
import re
import shlex
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import ToolchainError
from ..frozen import Frozen
from .tool_paths import find_tool

_TIMEOUT_S = 600
PTXAS_FLAGS = ("-O3", "-v", "--warn-on-spills")
"""Flags every assembly uses besides ``-arch`` (whole-program mode: no ``-c``)."""


# ---------------------------------------------------------------- versions

@functools.lru_cache(maxsize=None)
def _tool_version(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise ToolchainError(f"cannot run `{path} --version`: {exc}") from None
    match = re.search(r"\bV(\d+\.\d+\.\d+)", out)
    return match.group(1) if match else out.strip()


def ptxas_version() -> str:
    """The version of the ptxas in use, e.g. ``"13.0.88"`` (memoized; part of the cache key)."""
    return _tool_version(find_tool("ptxas"))


# ---------------------------------------------------------------- ptxas's report

@dataclass(unsafe_hash=True)
class FunctionReport(Frozen):
    """What ptxas says about one function (``-v``)."""

    name: str
    registers: int = 0
    barriers: int = 0
    stack_frame_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    shared_bytes: int = 0
    """Static shared memory (``.shared`` declarations); dynamic shared memory is not counted."""


@dataclass(unsafe_hash=True)
class PtxasMessage(Frozen):
    """One ``ptxas info|warning|error`` line that is not routine bookkeeping."""

    level: str
    text: str
    code: str | None = None
    """``C7508`` and friends, when the line carries one."""
    function: str | None = None
    line: int | None = None
    """The PTX line an error points at."""


@dataclass(unsafe_hash=True)
class PtxasReport(Frozen):
    """The parsed ``ptxas -v`` log: per-function resources, the coded messages, the raw text."""

    functions: tuple[FunctionReport, ...] = ()
    messages: tuple[PtxasMessage, ...] = ()
    log: str = ""

    def __getitem__(self, name: str) -> FunctionReport:
        for fn in self.functions:
            if fn.name == name:
                return fn
        raise KeyError(name)

    @property
    def codes(self) -> tuple[str, ...]:
        """The distinct info/warning codes seen, in order (``("C7508",)``)."""
        return tuple(dict.fromkeys(m.code for m in self.messages if m.code))

    def setmaxnreg_ignored(self) -> bool:
        return any(code in ("C7508", "C7504") for code in self.codes)

    def warnings(self) -> list[str]:
        """Human sentences for what costs performance: spills, ignored setmaxnreg, serialized wgmma."""
        out = []
        for fn in self.functions:
            if fn.spill_store_bytes or fn.spill_load_bytes:
                out.append(f"function '{fn.name}' spills registers to local memory: "
                           f"{fn.spill_store_bytes} bytes stored, {fn.spill_load_bytes} bytes loaded "
                           f"({fn.registers} registers, {fn.stack_frame_bytes} bytes stack frame)")
        for m in self.messages:
            out.extend(_explain(m))
        return out

    def to_dict(self) -> dict:
        return {"functions": [asdict(f) for f in self.functions],
                "messages": [asdict(m) for m in self.messages], "log": self.log}

    @staticmethod
    def from_dict(data: dict) -> "PtxasReport":
        return PtxasReport(functions=tuple(FunctionReport(**f) for f in data.get("functions", ())),
                           messages=tuple(PtxasMessage(**m) for m in data.get("messages", ())),
                           log=data.get("log", ""))


def _explain(m: PtxasMessage) -> list[str]:
    where = f" in function '{m.function}'" if m.function else ""
    if m.code == "C7508":
        return [f"setmaxnreg was ignored{where} (ptxas C7508: no register count at entry); give the "
                "kernel .maxnreg, or .maxntid/.reqntid together with .minnctapersm"]
    if m.code == "C7504":
        return [f"setmaxnreg was ignored{where} (ptxas C7504: relocatable code); assemble in "
                "whole-program mode (ptxas without -c, not nvJitLink)"]
    if m.code in ("C7517", "C7519") or "serialized" in m.text:
        return [f"the wgmma pipeline is serialized{where} (ptxas {m.code or 'info'}: {m.text})"]
    if m.level == "warning" and "spilled" not in m.text:
        return [f"ptxas warning{where}: {m.text}"]
    return []


_LINE = re.compile(r"^ptxas(?: (?P<file>\S+), line (?P<line>\d+);)?\s+(?P<level>info|warning|error|fatal)"
                   r"\s*:\s*(?P<text>.*)$")
_CODE = re.compile(r"^\((?P<code>C\d+)\)\s*(?P<text>.*)$")
_FN_START = re.compile(r"(?:Compiling entry function|Function properties for) '?(?P<name>[^' ]+)'?")
_IN_FUNCTION = re.compile(r"in function '(?P<name>[^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_ROUTINE = ("bytes gmem", "Compiling entry function", "Function properties for", "Used ", "Compile time",
            "Registers are spilled")


def parse_ptxas_log(log: str) -> PtxasReport:
    """Read a ``ptxas -v --warn-on-spills`` log into a PtxasReport."""
    functions: dict[str, dict] = {}
    messages: list[PtxasMessage] = []
    current: str | None = None
    for raw in log.splitlines():
        line = raw.strip()
        frame = _FRAME.search(line)
        if frame and current is not None and not line.startswith("ptxas"):
            functions[current].update(stack_frame_bytes=int(frame[1]), spill_store_bytes=int(frame[2]),
                                      spill_load_bytes=int(frame[3]))
            continue
        m = _LINE.match(line)
        if not m:
            continue
        text = m["text"]
        start = _FN_START.match(text)
        if start:
            current = start["name"]
            functions.setdefault(current, {"name": current})
            continue
        if text.startswith("Used ") and current is not None:
            for key, pattern in (("registers", r"Used (\d+) registers"), ("barriers", r"used (\d+) barriers"),
                                 ("shared_bytes", r"(\d+) bytes smem")):
                found = re.search(pattern, text)
                if found:
                    functions[current][key] = int(found[1])
            continue
        coded = _CODE.match(text)
        code, body = (coded["code"], coded["text"]) if coded else (None, text)
        if code is None and any(text.startswith(r) for r in _ROUTINE):
            continue
        in_fn = _IN_FUNCTION.search(body)
        messages.append(PtxasMessage(level=m["level"], text=body, code=code,
                                     function=in_fn["name"] if in_fn else None,
                                     line=int(m["line"]) if m["line"] else None))
    return PtxasReport(functions=tuple(FunctionReport(**f) for f in functions.values()),
                       messages=tuple(messages), log=log)


# ---------------------------------------------------------------- running the tools

def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "kernel"


def assemble(ptx: str, arch: str = "sm_90a", *, name: str = "kernel",
             extra_args: tuple[str, ...] | list[str] = ()) -> tuple[bytes, PtxasReport]:
    """Assemble PTX text into a cubin with ptxas (whole-program mode); return it and the report.

    On failure raise ToolchainError with ptxas's error lines, the PTX lines they point at and the
    command to reproduce it; the PTX is kept in a fresh temporary directory named in the message.
    """
    ptxas = find_tool("ptxas")
    base = _safe_name(name)
    with tempfile.TemporaryDirectory(prefix="tkjit-ptxas-") as tmp:
        (Path(tmp) / f"{base}.ptx").write_text(ptx)
        args = [f"-arch={arch}", *PTXAS_FLAGS, *extra_args]
        cmd = [ptxas, *args, f"{base}.ptx", "-o", f"{base}.cubin"]
        try:
            proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as exc:
            raise ToolchainError(f"cannot run ptxas ({shlex.join(cmd)}): {exc}") from None
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise _assembly_failed(ptx, base, ptxas, args, log, proc.returncode)
        return (Path(tmp) / f"{base}.cubin").read_bytes(), parse_ptxas_log(log)


def _assembly_failed(ptx: str, base: str, ptxas: str, args: list[str], log: str, rc: int) -> ToolchainError:
    keep = Path(tempfile.mkdtemp(prefix="tkjit-failed-"))
    ptx_path = keep / f"{base}.ptx"
    ptx_path.write_text(ptx)
    command = shlex.join([ptxas, *args, str(ptx_path), "-o", str(keep / f"{base}.cubin")])
    ptx_lines = ptx.splitlines()
    shown, quoted = [], set()
    for m in parse_ptxas_log(log).messages:
        if m.level not in ("error", "fatal"):
            continue
        shown.append(f"  {m.level}: {m.text}" + (f" (PTX line {m.line})" if m.line else ""))
        if m.line and 0 < m.line <= len(ptx_lines) and m.line not in quoted:
            quoted.add(m.line)
            shown.append(f"    {m.line} | {ptx_lines[m.line - 1].strip()}")
    if not shown:
        shown = [f"  {line}" for line in log.strip().splitlines()] or [f"  (no output; exit status {rc})"]
    return ToolchainError(f"ptxas failed on '{base}' (exit status {rc}):\n" + "\n".join(shown) +
                          f"\nthe PTX is kept at {ptx_path}\nreproduce with:\n  {command}")


def sass(cubin: bytes) -> str:
    """The SASS of a cubin, through ``cuobjdump -sass`` (falling back to ``nvdisasm``)."""
    failures = []
    with tempfile.TemporaryDirectory(prefix="tkjit-sass-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        for tool, args in (("cuobjdump", ["-sass"]), ("nvdisasm", [])):
            try:
                exe = find_tool(tool)
            except ToolchainError as exc:
                failures.append(exc.message)
                continue
            try:
                proc = subprocess.run([exe, *args, str(path)], capture_output=True, text=True,
                                      timeout=_TIMEOUT_S)
            except (OSError, subprocess.SubprocessError) as exc:
                failures.append(f"{tool}: {exc}")
                continue
            if proc.returncode == 0 and proc.stdout.strip():
                return proc.stdout
            failures.append(f"{tool} exited with status {proc.returncode}: {proc.stderr.strip()}")
    raise ToolchainError("cannot disassemble the cubin:\n  " + "\n  ".join(failures))
