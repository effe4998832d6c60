"""Idle consumers of the Hopper attention kernel, on the CPU: a consumer warpgroup whose 64 query
rows all lie past N (the last query tile of a head that N does not fill) runs a second copy of the
tile body with no wgmma, softmax or epilogue, whose barrier operations -- mbarrier waits and
arrives, the turn barriers, the ring advances and the control flow around them -- are the busy
copy's, instruction for instruction (the protocol the sync checker explores, and the turns' CPU
model in test_hopper_attention.py, hold for both copies only if so). ptxas assembles every mode
without spills or serialized wgmma, with the HGMMAs of one copy."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tkjit.codegen.hopper import attention_plan, emit_hopper_ptx, match_attention
from tkjit.compiler import compile as compile_source
from tkjit.options import CompileOptions
from tkjit.runtime import toolchain
from support import needs_cuda_tools

SOURCE = (Path(__file__).resolve().parents[1] / "examples" / "attention.tk").read_text()
MODES = {  # name: (D, causal, module pins of attention_plan, kernel constants)
    "d64": (64, False, {}, {}),                     # three consumers, two Q slots, turns per slot
    "d64 causal": (64, True, {}, {}),
    "d64 one slot": (64, False, {"Q_SLOTS": 1}, {}),  # turns per tile
    "d64 one CTA per tile": (64, True, {"PERSISTENT_CAUSAL": False}, {}),
    "d64 turns across tiles": (64, False, {"Q2_TURNS": "across tiles"}, {}),
    "d64 split": (64, False, {"SPLIT_KV_BARRIERS": True}, {}),
    "d128": (128, False, {}, {}),                   # two consumers
    "d128 causal": (128, True, {}, {}),
    "d128 bkv128": (128, False, {}, {"BKV": 128}),
    "d128 split": (128, False, {"SPLIT_KV_BARRIERS": True}, {"BKV": 128}),
    "d128 split bkv176": (128, False, {"SPLIT_KV_BARRIERS": True}, {"BKV": 176}),
    "d128 two slots split": (128, False, {"Q2_MIN_STAGES": 2}, {"BKV": 128}),
}
ASSEMBLED = ["d64", "d64 causal", "d128", "d128 causal", "d128 bkv128", "d64 split", "d128 split",
             "d128 split bkv176", "d64 turns across tiles"]
MATH_LABELS = {"scale_not_positive", "unmasked", "softmax_done"}
"""The softmax's own uniform branches (scale sign, masking): not part of the protocol."""
NOT_WRITTEN = ("bar.", "bra", "st.", "mbarrier.arrive", "wgmma.fence", "wgmma.commit", "wgmma.wait", "ret")
"""Opcodes whose first operand is not a destination."""


def emit(mode: str, monkeypatch, idle: bool = True) -> tuple[str, dict, object]:
    """The PTX, metadata and match (its bq, bkv, d) of one mode."""
    d, causal, pins, constants = MODES[mode]
    monkeypatch.setattr(attention_plan, "IDLE_COPY", idle)  # the mechanism, causal or not
    for name, value in pins.items():
        monkeypatch.setattr(attention_plan, name, value)
    opts = CompileOptions.resolve(constants={"D": d, "CAUSAL": causal} | constants, cache=False)
    ir = compile_source(SOURCE, opts, filename="attention.tk").ir
    return (*emit_hopper_ptx(ir, {"arch": "sm_90a"}), match_attention(ir))


def copies(ptx: str) -> tuple[list[str], list[str], list[str]]:
    """(busy copy, idle copy, everything else) of the consumer's tile body, as lines."""
    lines = [ln.strip() for ln in ptx.splitlines()]
    (branch,) = [n for n, ln in enumerate(lines) if re.match(r"@%p\d+ bra\.uni \$L_idle_tile_\d+;", ln)]
    idle_label = lines[branch].split()[-1].rstrip(";")
    (busy_end,) = [n for n, ln in enumerate(lines) if re.fullmatch(r"bra\.uni \$L_tile_next_\d+;", ln)]
    next_label = lines[busy_end].split()[-1].rstrip(";")
    idle_start, idle_end = lines.index(f"{idle_label}:"), lines.index(f"{next_label}:")
    assert branch < busy_end < idle_start < idle_end
    busy, idle = lines[branch + 1:busy_end], lines[idle_start + 1:idle_end]
    return busy, idle, lines[:branch + 1] + lines[busy_end:idle_start + 1] + lines[idle_end:]


def parse(line: str) -> tuple[str | None, str, list[str]]:
    """(guard, opcode, operands) of one instruction."""
    guard = None
    if line.startswith("@"):
        guard, line = line.split(None, 1)
    op, _, rest = line.rstrip(";").partition(" ")
    return guard, op, [x.strip() for x in re.split(r",(?![^{]*})", rest) if x.strip()]


def regs(text: str) -> list[str]:
    return re.findall(r"%[a-z]+\d+", text)


def skeleton(copy: list[str], outside: list[str]) -> list[str]:
    """The copy's barrier operations and control flow (labels, branches; not the softmax's), with
    every instruction they depend on (the backward slice over registers, all definitions of a
    register inside the copy), in program order; registers local to the copy renamed in order of
    appearance and labels stripped of their numbers, so that two copies compare as text."""
    def label(text: str) -> str | None:
        m = re.search(r"\$L_([a-z_]+?)_\d+", text)
        return m and m.group(1)

    seeds, defs = set(), {}
    for n, line in enumerate(copy):
        if line.endswith(":"):
            if label(line) not in MATH_LABELS:
                seeds.add(n)
            continue
        guard, op, args = parse(line)
        if op.startswith(("mbarrier.", "bar.")) or (op.startswith("bra") and label(line) not in MATH_LABELS):
            seeds.add(n)
        if args and not op.startswith(NOT_WRITTEN):
            for r in regs(args[0]):
                defs.setdefault(r, []).append(n)
    keep, todo = set(seeds), list(seeds)
    while todo:
        line = copy[todo.pop()]
        if line.endswith(":"):
            continue
        guard, op, args = parse(line)
        for r in regs(guard or "") + regs(" ".join(args if op.startswith(NOT_WRITTEN) else args[1:])):
            for n in defs.get(r, ()):
                if n not in keep:
                    keep.add(n)
                    todo.append(n)
    shared = set(regs("\n".join(outside)))
    names: dict[str, str] = {}

    def rename(m: re.Match) -> str:
        r = m.group(0)
        return r if r in shared else names.setdefault(r, f"%local{len(names)}")
    return [re.sub(r"(\$L_[a-z_]+?)_\d+", r"\1", re.sub(r"%[a-z]+\d+", rename, copy[n])) for n in sorted(keep)]


def barrier_ops(lines: list[str]) -> list[str]:
    return [ln for ln in lines if re.search(r"\b(mbarrier\.\w+|bar\.(sync|arrive))", ln)]


@pytest.mark.parametrize("mode", MODES)
def test_an_idle_consumer_takes_the_busy_copys_barrier_steps(monkeypatch, mode):
    """The idle branch at the top of each tile (i·BQ + 64·consumer >= N, uniform over the
    warpgroup); the idle copy has no wgmma, softmax or store; both copies' barrier skeletons are the
    same text (and have every kind of barrier operation in them)."""
    ptx, _, m = emit(mode, monkeypatch)
    assert re.search(rf"mul\.lo\.s32 (%r\d+), %r\d+, 64;\s+mad\.lo\.s32 \1, %r\d+, {m.bq}, \1;\s+"
                     rf"setp\.ge\.s32 (%p\d+), \1, %r\d+;\s+@\2 bra\.uni \$L_idle_tile_\d+;", ptx)
    busy, idle, outside = copies(ptx)
    assert sum("wgmma.mma_async" in ln for ln in busy) == 2 * (m.d // 16 + m.bkv // 16)
    for what in ("wgmma", "st.global", "ex2", "shfl", "cvt.rn.bf16x2"):
        assert not [ln for ln in idle if what in ln], what
    busy_skeleton, idle_skeleton = skeleton(busy, outside), skeleton(idle, outside)
    assert idle_skeleton == busy_skeleton
    ops = " ".join(barrier_ops(idle_skeleton))
    assert "mbarrier.try_wait.parity" in ops and "mbarrier.arrive" in ops
    assert "bar.sync" in ops and "bar.arrive" in ops and re.search(r"@!%\w+ bar\.arrive", ops)  # last turn
    assert "$L_first_turn" in " ".join(idle_skeleton)  # consumer 0's first-turn skip


def test_the_skeleton_comparison_sees_a_missing_turn_or_release(monkeypatch):
    """The check above is not vacuous: an idle copy without one turn, one stage release or one ring
    advance compares different."""
    ptx, *_ = emit("d64", monkeypatch)
    busy, idle, outside = copies(ptx)
    reference = skeleton(busy, outside)
    for gone in (r"bar\.sync", r"mbarrier\.arrive", r"xor\.b32 (%r\d+), \1, 1;"):
        n = next(n for n, ln in enumerate(idle) if re.search(gone, ln))
        assert skeleton(idle[:n] + idle[n + 1:], outside) != reference, gone


def test_cross_tile_has_no_idle_copy(monkeypatch):
    """Cross-tile overlap (a pin) stores a tile in the next one's first trip: no idle copy there."""
    monkeypatch.setattr(attention_plan, "CROSS_TILE", True)
    opts = CompileOptions.resolve(constants={"D": 64, "CAUSAL": False}, cache=False)
    ptx, meta = emit_hopper_ptx(compile_source(SOURCE, opts, filename="attention.tk").ir, {"arch": "sm_90a"})
    assert {x["decision"]: x["value"] for x in meta["decisions"]}["cross-tile overlap"] == "on"
    assert "$L_idle_tile" not in ptx


@needs_cuda_tools
@pytest.mark.parametrize("mode", ASSEMBLED)
def test_both_copies_assemble_without_spills_or_serialized_wgmma(monkeypatch, mode):
    """The wgmmas sit in the busy copy only, none under a branch inside the pipeline: ptxas keeps
    them pipelined (no C7517/C7519), spills nothing, and the SASS has one copy's HGMMAs."""
    ptx, meta, m = emit(mode, monkeypatch)
    cubin, report = toolchain.assemble(ptx, name=meta["name"])
    fn = report[meta["name"]]
    assert fn.spill_store_bytes == 0 and fn.spill_load_bytes == 0 and fn.stack_frame_bytes == 0, report.log
    assert not {"C7517", "C7519"} & set(report.codes) and not report.setmaxnreg_ignored(), report.log
    ops = re.findall(r"/\*[0-9a-f]{4,5}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", toolchain.sass(cubin))
    assert len([op for op in ops if op.startswith("HGMMA")]) == 2 * (m.d // 16 + m.bkv // 16)
    assert not [op for op in ops if op.startswith(("LDL", "STL"))]


def test_the_idle_copy_is_logged_and_can_be_pinned_off(monkeypatch):
    """The plan logs the choice; unpinned only causal kernels take it (non-causal measured slower);
    IDLE_COPY = False pins the kernel without the idle copy (for a same-run A/B), which has one
    tile body and the HGMMA-issuing lines once."""
    for causal in (True, False):
        monkeypatch.setattr(attention_plan, "IDLE_COPY", None)
        opts = CompileOptions.resolve(constants={"D": 64, "CAUSAL": causal}, cache=False)
        text, meta = emit_hopper_ptx(compile_source(SOURCE, opts, filename="attention.tk").ir, {"arch": "sm_90a"})
        log = {d["decision"]: d for d in meta["decisions"]}
        assert ("idle_tile" in text) == causal
        assert log["rows past N"]["value"] == ("idle copy of the tile" if causal else "computed")
        assert ("heaviest" if causal else "3% slower") in log["rows past N"]["why"]
    ptx, meta, _ = emit("d64", monkeypatch)
    log = {d["decision"]: d for d in meta["decisions"]}
    assert log["rows past N"]["value"] == "idle copy of the tile" and "idle_tile" in ptx
    off, meta_off, _ = emit("d64", monkeypatch, idle=False)
    assert "idle_tile" not in off and off.count("wgmma.mma_async") == ptx.count("wgmma.mma_async")
    log = {d["decision"]: d for d in meta_off["decisions"]}
    assert (log["rows past N"]["value"], log["rows past N"]["why"]) == ("computed", "pinned (IDLE_COPY = False)")
